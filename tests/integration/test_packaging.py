"""The built wheel, installed in a fresh venv, beside a user's dg project that has its own ``assets`` package.

The wheel is built from this tree with pip (as a user or an index would), installed with ``--no-deps``
into a new venv whose dependencies come from this environment's site-packages by a plain path entry
(rocketlake's own editable hook lives in a ``.pth`` there, which a path entry does not run). The
user's project has a top-level ``assets`` package of its own and adds an ingestion through
rocketlake's Dagster Component in ``defs.yaml``; Dagster's CLI must load both.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.dagster_instance import recommended_home

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parents[2]

DEFS_YAML = """\
type: rocketlake.component.RocketlakeComponent
attributes:
  clusters:
    main: {namesrv: "127.0.0.1:9876"}
  lake: {root: lake}
  ingestions:
    orders:
      cluster: main
      topic: orders
      consumer_group: GID_user_orders
      table: user_orders
      window: {cron: "*/5 * * * *", start: "2026-11-01"}
"""


def run(args, **kw) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)
    assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def user_project(root: Path, defs_yaml: str) -> Path:
    files = {
        "pyproject.toml": '[project]\nname = "user-project"\nversion = "0"\n\n'
        '[tool.dg]\ndirectory_type = "project"\n\n[tool.dg.project]\nroot_module = "user_project"\n',
        "assets/__init__.py": "from dagster import asset\n\n\n@asset\ndef user_report():\n    return 1\n",
        "user_project/__init__.py": "",
        "user_project/defs/__init__.py": "",
        "user_project/defs/orders/defs.yaml": defs_yaml,
        "user_project/definitions.py": textwrap.dedent("""\
            from pathlib import Path

            import dagster as dg

            from assets import user_report  # the user's own top-level package, not rocketlake's


            @dg.definitions
            def defs():
                return dg.Definitions.merge(dg.Definitions(assets=[user_report]),
                                            dg.load_from_defs_folder(path_within_project=Path(__file__).parent))
            """),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp / "dist"), str(ROOT)])
    (wheel,) = (tmp / "dist").glob("rocketlake-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    top_level = {name.split("/")[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"rocketlake"}, top_level
    # Its files that are not modules: the recommended instances and the Java peers' sources.
    for data in ("rocketlake/dagster/dagster.yaml", "rocketlake/local/peers/PeerServer.java"):
        assert data in names, data

    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()] or [
        sysconfig.get_paths()["purelib"]
    ]
    (site / "project_dependencies.pth").write_text("\n".join(deps) + "\n")
    run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)])
    return python


def test_the_wheel_claims_only_rocketlake_and_loads_beside_a_users_assets_package(installed: Path, tmp_path: Path):
    project = user_project(tmp_path / "project", DEFS_YAML)
    env = {**os.environ, "PYTHONPATH": str(project), "DAGSTER_HOME": str(tmp_path / "home")}
    env.pop("ROCKETLAKE_CONFIG", None)
    (tmp_path / "home").mkdir()
    where = run(
        [
            str(installed),
            "-c",
            "import assets, rocketlake, rocketlake.dagster; "
            "print(assets.__file__); print(rocketlake.__file__); print(rocketlake.dagster.__file__)",
        ],
        cwd=project,
        env=env,
    ).split()
    assert where[0] == str(project / "assets" / "__init__.py")
    site = str(installed.parent.parent)
    assert where[1].startswith(site) and where[2].startswith(site), where  # the wheel's copy, not this tree

    run(
        [str(installed), "-m", "dagster", "definitions", "validate", "-m", "user_project.definitions"],
        cwd=project,
        env=env,
    )
    listed = run(
        [str(installed), "-m", "dagster", "asset", "list", "-m", "user_project.definitions"], cwd=project, env=env
    )
    assert "user_report" in listed and "user_orders" in listed, listed


def test_a_not_supported_key_in_defs_yaml_fails_the_project_load_naming_it(installed: Path, tmp_path: Path):
    bad = DEFS_YAML.replace(
        "      table: user_orders\n", "      table: user_orders\n      consume_concurrently_max_span: 100\n"
    )
    project = user_project(tmp_path / "project", bad)
    env = {**os.environ, "PYTHONPATH": str(project), "DAGSTER_HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    done = subprocess.run(
        [str(installed), "-m", "dagster", "definitions", "validate", "-m", "user_project.definitions"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0
    assert (
        "ingestions.orders.consume_concurrently_max_span" in done.stdout + done.stderr
        and "not supported yet" in done.stdout + done.stderr
    )


USER_JOB = textwrap.dedent("""\
    from pathlib import Path

    import dagster as dg

    from assets import user_report


    # The project's own job, on the executor the project chose for it.
    user_job = dg.define_asset_job("user_job", selection=[user_report], executor_def=dg.multiprocess_executor)


    @dg.definitions
    def defs():
        return dg.Definitions.merge(dg.Definitions(assets=[user_report], jobs=[user_job]),
                                    dg.load_from_defs_folder(path_within_project=Path(__file__).parent))
    """)


def test_in_a_dg_project_the_users_job_keeps_its_executor_and_a_killed_rocketlake_run_blocks_nothing(
    installed: Path, tmp_path: Path, local_cluster, create_topic
):
    """The project's job runs on the executor it chose; rocketlake's job, killed outright while it holds its group's
    pool slot, is failed and its slot freed by the next run of that job, which lands the window."""
    import json
    import signal
    import time

    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    from rocketlake.dagster.run_guard import recorded_process

    topic = create_topic(2)
    defs_yaml = (
        DEFS_YAML.replace("127.0.0.1:9876", local_cluster.spec.namesrv_address)
        .replace("topic: orders", f"topic: {topic}")
        .replace('"*/5 * * * *"', '"* * * * *"')
    )
    project = user_project(tmp_path / "project", defs_yaml)
    (project / "user_project" / "definitions.py").write_text(USER_JOB)
    home = recommended_home(tmp_path / "home")  # pools: 1 per group, or rocketlake's run refuses to start
    env = {**os.environ, "PYTHONPATH": str(project), "DAGSTER_HOME": str(home)}
    env.pop("ROCKETLAKE_CONFIG", None)

    def job(name: str, tags: dict | None = None) -> list[str]:
        return [
            str(installed),
            "-m",
            "dagster",
            "job",
            "execute",
            "-m",
            "user_project.definitions",
            "-j",
            name,
            *(["--tags", json.dumps(tags)] if tags else []),
        ]

    def execute(args: list[str]) -> str:
        done = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}"
        return done.stdout + done.stderr  # Dagster logs to stderr

    mine = execute(job("user_job"))
    assert "multiprocess executor" in mine, mine[-3000:]

    window = time.strftime("%Y-%m-%d-%H:%M", time.gmtime(time.time() - 180))
    proc = subprocess.Popen(
        job("user_orders_job", {"dagster/partition": window}),
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    with DagsterInstance.from_config(str(home)) as instance:
        deadline = time.monotonic() + 300
        while True:  # until the run recorded its process and holds the group's slot
            runs = instance.get_runs(RunsFilter(job_name="user_orders_job", statuses=[DagsterRunStatus.STARTED]))
            holders = instance.event_log_storage.get_concurrency_run_ids()
            if runs and recorded_process(runs[0]) and runs[0].run_id in holders:
                killed = runs[0].run_id
                break
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        rerun = execute(job("user_orders_job", {"dagster/partition": window}))
        assert f"run {killed} died without finishing" in rerun, rerun[-3000:]
        assert instance.get_run_by_id(killed).status is DagsterRunStatus.FAILURE
        assert killed not in instance.event_log_storage.get_concurrency_run_ids()
        assert window in instance.get_materialized_partitions(__import__("dagster").AssetKey("user_orders"))
