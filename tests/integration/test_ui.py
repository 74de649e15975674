"""What a person sees in the Dagster UI, in a real headless browser (Debian's chromium through chromium-driver).

The README's first command runs for real (`rocketlake demo`, one window, on free ports): its own name server and
brokers, the Java producer, the raw table and the downstream aggregate through Dagster. Then the Java producer
sends more orders and `make ui` starts as a newcomer starts it (`rocketlake ui`: dg dev's webserver and daemon on the
demo's instance, and a trickle of orders): the lag sensor's first tick records the new lag. The browser checks that
the lineage page shows the topic, the raw table, the aggregate and the dead letters; that the partitions view lists
the landed window; and that the lag plot has points. Then Ctrl-C on its process group ends everything within 10 s.
Screenshots go to ``$ROCKETLAKE_SCREENSHOTS`` (the README's are made this way), else the test's temporary directory.

Backfill by timestamp from the UI: a range of windows typed into the asset's partitions view and launched from the
dialog it opens (the backfill daemon makes one run of it) lands exactly those windows; the group's offsets stay where
the landed ranges leave a gap, and move to the queues' ends once the window before them is launched from the UI too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.execution.backfill import BulkActionStatus
from deltalake import DeltaTable

from rocketlake.dagster.lag import LAG_MESSAGES
from rocketlake.demo.run import sample_orders
from rocketlake.local.peers import produce
from rocketlake.local.process import command_line, session_members
from tests.conftest import free_ports
from tests.dagster_instance import recommended_home
from tests.integration.deployment_support import Deployment, end_group, start_daemon, stop_daemon
from tests.integration.ingestion_support import unique, until, wait_until

pytestmark = pytest.mark.stack
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TOPIC = "rocketlake_demo_orders"
MORE = 20  # orders sent after the demo: the lag the sensor must see
PER_BATCH = 5  # orders the trickle of `rocketlake ui` sends each 15 s


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    # Its own process group: the daemon and the webserver start code servers of their own.
    return subprocess.Popen(
        cmd, cwd=log.parent, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        end_group(process, timeout=30)


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1600,1100",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
    driver.implicitly_wait(20)  # the UI renders after its GraphQL queries answer
    try:
        yield driver
    finally:
        driver.quit()


def colored_pixels(driver, canvas) -> int:
    """Pixels of the plot's line and points (chart.js draws them in the theme's blue; axes and grid are grey)."""
    return driver.execute_script(
        """
        const c = arguments[0], data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < data.length; i += 4) {
            const [r, g, b, a] = [data[i], data[i + 1], data[i + 2], data[i + 3]];
            if (a > 0 && b > 150 && b - r > 60 && b - g > 60) n++;
        }
        return n;""",
        canvas,
    )


def test_lineage_partitions_and_lag_plot_in_a_real_browser(tmp_path, browser):
    from selenium.webdriver.common.by import By

    shots = Path(os.environ.get("ROCKETLAKE_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    namesrv_port, broker_a, broker_b, web_port, connect_port = free_ports(5, block=2)
    config = yaml.safe_load((ROOT / "rocketlake.yaml").read_text())
    config["clusters"]["local"]["namesrv"] = f"127.0.0.1:{namesrv_port}"
    # The demo's Spark Connect server, which every run of the demo and of the daemon opens its session on.
    config["spark"]["remote"] = f"sc://127.0.0.1:{connect_port}"
    config["lake"]["root"] = str(tmp_path / "lake")
    (tmp_path / "rocketlake.yaml").write_text(yaml.safe_dump(config))
    home = recommended_home(tmp_path / "dagster")
    cluster = [
        "--state-dir",
        str(tmp_path / "state"),
        "--namesrv-port",
        str(namesrv_port),
        "--broker-ports",
        f"{broker_a},{broker_b}",
    ]
    env = dict(os.environ, DAGSTER_HOME=str(home))
    env.pop("ROCKETLAKE_CONFIG", None)
    ui = None
    try:
        demo = subprocess.run(
            [str(BIN / "rocketlake"), "demo", "--windows", "1", "--messages", "40", *cluster],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        assert "1/5 starting the local RocketMQ cluster" in demo.stdout and " is up at " in demo.stdout
        assert f"Spark Connect server on sc://127.0.0.1:{connect_port} (master local[*], Delta)" in demo.stdout
        # "rows per window": one line "  2026-11-24 04:23      40"
        landed = [
            f"{p[0]}-{p[1]}"
            for p in map(str.split, demo.stdout.splitlines())
            if len(p) == 3 and p[0].startswith("20") and p[2] == "40"
        ]
        assert len(landed) == 1, f"one window of 40 rows: {demo.stdout[-2000:]}"
        (window_key,) = landed

        # More orders after the demo: the lag the sensor reports and the UI plots. Then `make ui` (`rocketlake ui`:
        # dg dev's webserver and daemon on the demo's code location, schedules and sensors running, and the trickle
        # of orders from the Java producer, PER_BATCH every 15 s), as a newcomer starts it after the demo.
        produce(f"127.0.0.1:{namesrv_port}", tmp_path / "state", sample_orders(TOPIC, MORE, first=10_000))
        ui = start(
            [str(BIN / "rocketlake"), "ui", "--port", str(web_port), "--per-minute", str(4 * PER_BATCH), *cluster],
            env,
            tmp_path / "ui.log",
        )
        with DagsterInstance.from_config(str(home)) as instance:

            def lag_observed():
                records = instance.fetch_observations(AssetKey("orders_raw"), limit=5).records
                return [
                    r.asset_observation.metadata[LAG_MESSAGES].value
                    for r in records
                    if LAG_MESSAGES in r.asset_observation.metadata
                ]

            first = until(lag_observed, 180, "the lag sensor's first observation", ui)[-1]
            assert first >= MORE, first  # and what the trickle stored so far

        base = f"http://127.0.0.1:{web_port}"
        until(lambda: answers(f"{base}/server_info"), 120, "the webserver to answer", ui)

        browser.get(base + "/asset-groups")
        browser.execute_script("localStorage.setItem('communityNux', '1')")  # the newsletter pop-up, seen
        # The lineage of rocketlake's group: topic -> raw table -> aggregate, and -> dead letters.
        browser.get(f"{base}/locations/rocketlake.demo.definitions/asset-groups/rocketlake")
        for node in ("rocketlake_demo_orders", "orders_raw", "orders_raw_by_region", "orders_raw_dlq"):
            assert browser.find_elements(By.XPATH, f"//*[normalize-space(text())='{node}']"), f"no node {node}"
        browser.implicitly_wait(0)
        until(
            lambda: not browser.find_elements(By.XPATH, "//*[starts-with(normalize-space(text()), 'Loading')]"),
            60,
            "the nodes' status to load",
        )
        browser.implicitly_wait(20)
        browser.save_screenshot(str(shots / "lineage.png"))

        # The partitions view lists the landed window as materialized.
        browser.get(f"{base}/assets/orders_raw?view=partitions")
        browser.find_element(By.XPATH, "//*[contains(text(), 'Materialized (')]")  # the trickle's windows land too
        assert browser.find_elements(By.XPATH, f"//*[normalize-space(text())='{window_key}']"), window_key

        # The lag plot: Overview -> Metadata -> Plots, over events (observations included).
        browser.get(f"{base}/assets/orders_raw?view=overview")
        browser.find_element(By.XPATH, "//button[normalize-space()='Plots']").click()
        browser.find_elements(By.XPATH, "//button[normalize-space()='Events']")[-1].click()
        title = browser.find_element(By.XPATH, f"//*[normalize-space(text())='{LAG_MESSAGES}']")
        canvas = title.find_element(By.XPATH, "./ancestor::*[.//canvas][1]//canvas")
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
        assert until(lambda: colored_pixels(browser, canvas), 30, "the lag plot to draw its points") > 20
        browser.save_screenshot(str(shots / "lag-plot.png"))

        # Ctrl-C, which the terminal sends to `make ui`'s whole process group: the webserver, the daemon, the runs in
        # flight and the trickle's producer are all gone within 10 s.
        until(
            lambda: any("PeerServer" in command_line(p) for p in session_members(ui.pid)),
            60,
            "the trickle's producer",
            ui,
        )
        running = {p: command_line(p) for p in session_members(ui.pid)}
        os.killpg(ui.pid, signal.SIGINT)
        interrupted = time.monotonic()
        deadline = interrupted + 10
        while (left := session_members(ui.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)  # polling the process table, bounded by the 10 s the issue allows
        assert not left, f"still running 10 s after Ctrl-C: {[running.get(p, command_line(p)) for p in left]}"
        assert ui.wait(timeout=5) == 0, (tmp_path / "ui.log").read_text()[-3000:]
        assert len(running) >= 4, running  # rocketlake ui, dg dev, its webserver and daemon, the producer at least
    finally:
        stop(ui)
        subprocess.run(
            [str(BIN / "rocketlake"), "local", "down", "--wipe", *cluster],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=120,
        )


def launch_from_partitions_view(browser, base: str, table: str, selection: str, button: str) -> None:
    """What a person does: type the windows into the asset's partitions view, open Materialize, launch."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(f"{base}/assets/{table}?view=partitions")
    field = browser.find_element(By.XPATH, "//input[contains(@value, '...')]")  # the view's range, all at first
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(selection, Keys.ENTER)
    browser.find_element(By.XPATH, "//button[normalize-space()='Materialize…']").click()
    # The dialog takes the view's selection as its custom range.
    dialog = browser.find_element(By.XPATH, "//div[@role='dialog']")
    assert dialog.find_element(By.XPATH, ".//input[@placeholder]").get_attribute("value") == selection
    dialog.find_element(By.XPATH, f".//button[normalize-space()='{button}']").click()
    until(lambda: not browser.find_elements(By.XPATH, "//div[@role='dialog']"), 30, "the dialog to close")


def landed(path: str, version: int | None = None) -> Counter:
    table = DeltaTable(path, version=version)
    return Counter(r["msg_id"] for r in table.to_pyarrow_table(columns=["msg_id"]).to_pylist())


def test_a_range_of_windows_backfilled_from_the_ui_lands_exactly_those_windows(
    tmp_path, browser, local_cluster, produced, spark_connect
):
    w1, w2 = produced.windows()
    w3 = (datetime.strptime(w2, "%Y-%m-%d-%H:%M") + timedelta(minutes=1)).strftime("%Y-%m-%d-%H:%M")
    # w3 holds no message of the topic; it must be closed (+ the 2 s grace) to be landed.
    wait_until(datetime.strptime(w3, "%Y-%m-%d-%H:%M").replace(tzinfo=timezone.utc).timestamp() + 63)
    table, group = unique("t_ui"), unique("g_ui")
    # The lag sensor runs in the daemon: its catch-up would land window 1 on its own once a queue trails past the
    # bound (close + grace + freshness_slack_seconds); a bound of an hour keeps this test's launches the only ones.
    deployment = Deployment(
        tmp_path,
        local_cluster,
        "ui",
        {
            "orders": {
                "topic": produced.topic,
                "consumer_group": group,
                "table": table,
                "window": {
                    "cron": "* * * * *",
                    "timezone": "UTC",
                    "grace_seconds": 2,
                    "freshness_slack_seconds": 3600,
                    "start": (datetime.now(timezone.utc) - timedelta(days=1)).strftime("%Y-%m-%dT00:00:00+00:00"),
                },
            }
        },
        spark_connect.settings(),
    )
    path = str(tmp_path / "lake" / table)
    daemon = web = None
    try:
        # The deployed shape: the daemon (which runs backfills) and the webserver on one long-lived code server.
        daemon = start_daemon(deployment)
        web_port = free_ports(1)[0]
        web = start(
            [
                str(BIN / "dagster-webserver"),
                "-w",
                str(daemon.code_server.workspace),
                "-h",
                "127.0.0.1",
                "-p",
                str(web_port),
            ],
            deployment.env,
            tmp_path / "webserver.log",
        )
        base = f"http://127.0.0.1:{web_port}"
        until(lambda: answers(f"{base}/server_info"), 120, "the webserver to answer", web)
        browser.get(base + "/asset-groups")
        browser.execute_script("localStorage.setItem('communityNux', '1')")

        with DagsterInstance.from_config(str(deployment.home)) as instance:
            # 1. Windows 2 and 3 (window 1 left out): the backfill the UI makes, one run of both windows.
            launch_from_partitions_view(browser, base, table, f"[{w2}...{w3}]", "Launch backfill")
            (backfill,) = instance.get_backfills()
            (run,) = until(
                lambda: instance.get_runs(RunsFilter.for_backfill(backfill.backfill_id)),
                120,
                "the backfill's run",
                daemon,
            )
            run = until(
                lambda: (r := instance.get_run_by_id(run.run_id)).is_finished and r,
                300,
                "the backfill's run to end",
                daemon,
            )
            assert run.status is DagsterRunStatus.SUCCESS
            assert (run.tags["dagster/asset_partition_range_start"], run.tags["dagster/asset_partition_range_end"]) == (
                w2,
                w3,
            )
            materializations = instance.fetch_materializations(AssetKey(table), limit=10).records
            assert sorted(r.partition_key for r in materializations) == [w2, w3]
            # Exactly window 2's messages, each once (window 3 has none).
            assert landed(path) == Counter(m["msgId"] for m in produced.in_window(w2))
            # The group has not passed window 1, which is not landed: every queue stays at its start (0), as the
            # Java admin tool reports it.
            progress = local_cluster.mqadmin().consumer_progress(group, produced.topic)
            assert not [q for q in progress if q.topic == produced.topic and q.consumer_offset], progress

            # 2. Window 1 alone: one run, launched by the webserver; the offsets move over all three windows.
            launch_from_partitions_view(browser, base, table, w1, "Launch 1 run")
            (single,) = until(
                lambda: instance.get_runs(RunsFilter(tags={"dagster/partition": w1})), 60, "the window's run", web
            )
            ended = until(
                lambda: (r := instance.get_run_by_id(single.run_id)).is_finished and r,
                300,
                "the window's run to end",
                daemon,
            )
            assert ended.status is DagsterRunStatus.SUCCESS
            assert sorted(
                r.partition_key for r in instance.fetch_materializations(AssetKey(table), limit=10).records
            ) == [w1, w2, w3]
            # The backfill ended with its one run (the daemon marks it in one of its next iterations).
            done = until(
                lambda: (
                    (b := instance.get_backfill(backfill.backfill_id)).status
                    in (
                        BulkActionStatus.COMPLETED_SUCCESS,
                        BulkActionStatus.COMPLETED_FAILED,
                        BulkActionStatus.FAILED,
                        BulkActionStatus.CANCELED,
                    )
                    and b
                ),
                120,
                "the backfill to end",
                daemon,
            )
            assert done.status is BulkActionStatus.COMPLETED_SUCCESS, done
        assert landed(path) == Counter(produced.by_msg_id.keys())
        ends = Counter()
        for m in produced.by_msg_id.values():
            ends[(m["brokerName"], m["queueId"])] = max(ends[(m["brokerName"], m["queueId"])], m["queueOffset"] + 1)
        progress = local_cluster.mqadmin().consumer_progress(group, produced.topic)
        assert {
            (q.broker_name, q.queue_id): q.consumer_offset
            for q in progress
            if q.topic == produced.topic and (q.broker_name, q.queue_id) in ends
        } == dict(ends)
    finally:
        stop(web)
        stop_daemon(daemon)
