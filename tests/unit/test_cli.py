"""The `rocketlake` command documents every command, action and option."""

import argparse

from rocketlake.cli.main import build_parser


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_and_option_has_help():
    parser = build_parser()
    assert "Delta Lake" in parser.description and "examples:" in parser.epilog
    commands = subparsers(parser)
    assert set(commands) == {"local", "demo", "ui", "backfill", "offsets", "member", "spark-server", "send"}
    helped = {
        a.dest
        for a in next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))._choices_actions
        if a.help
    }
    assert helped == set(commands)
    for name, command in commands.items():
        assert command.description, name
        for action in command._actions:
            assert action.help, f"rocketlake {name}: {action.option_strings or action.dest} has no help text"
    for action in ("up", "down", "status"):
        assert f"  {action} " in commands["local"].epilog


def test_defaults_are_stated_in_the_help():
    for name, command in subparsers(build_parser()).items():
        for action in command._actions:
            if action.default not in (None, False, argparse.SUPPRESS) and action.dest != "state_dir":
                assert "default" in action.help, f"rocketlake {name} {action.dest}: the default is not stated"


def test_backfill_refuses_a_bad_window_in_one_line_before_any_run(tmp_path, capsys, monkeypatch):
    from rocketlake.cli.main import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "never-created"))
    config = tmp_path / "rocketlake.yaml"
    config.write_text(
        "clusters: {local: {namesrv: '127.0.0.1:9876'}}\n"
        "ingestions:\n  orders: {cluster: local, topic: orders, consumer_group: g, table: orders,\n"
        "           window: {cron: '* * * * *', start: '2026-11-01'}}\n"
    )
    for argv, says in [
        (
            ["orders", "2026-13-01"],
            "'2026-13-01' is neither a window key (format %Y-%m-%d-%H:%M, e.g. 2026-11-01-10:00)",
        ),
        (["orders", "2026-10-31-23:59"], "is before the first window, 2026-11-01-00:00"),
        (["orders", "2026-11-01-00:00", "2999-01-01-00:00"], "is not closed yet"),
        (["invoices", "2026-11-01-00:00"], "no ingestion 'invoices' in the configuration; there are: orders"),
    ]:
        assert main(["backfill", *argv, "--config", str(config)]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
    assert not (tmp_path / "never-created").exists(), "nothing was started"


def test_offsets_show_names_a_dead_name_server_in_one_line(tmp_path, capsys):
    from rocketlake.cli.main import main
    from tests.conftest import free_ports

    [port] = free_ports(1)  # nothing listens there
    config = tmp_path / "rocketlake.yaml"
    config.write_text(
        f"clusters: {{dead: {{namesrv: '127.0.0.1:{port}'}}}}\n"
        "ingestions:\n  orders: {cluster: dead, topic: orders, consumer_group: g, table: orders,\n"
        "           mq_client_api_timeout: 500, window: {cron: '* * * * *', start: '2026-11-01'}}\n"
    )
    assert main(["offsets", "show", "orders", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "cannot reach RocketMQ" in err and f"127.0.0.1:{port}" in err and err.count("\n") == 1, err


def test_a_config_that_cannot_be_read_is_one_sentence_naming_the_file(tmp_path, capsys, monkeypatch):
    """A directory, a file this user may not read, a file that is not UTF-8: each one line, never a traceback."""
    from pathlib import Path

    from rocketlake.cli.main import main

    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("clusters: {caf\xe9: {namesrv: '127.0.0.1:9876'}}\n".encode("latin-1"))
    unreadable = tmp_path / "unreadable.yaml"
    unreadable.write_text("clusters: {}\n")
    real_read_text = Path.read_text

    def read_text(self, *args, **kwargs):  # the tests run as root, whom no file mode stops: the OS's answer instead
        if self == unreadable:
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    for path, said in (
        (tmp_path, "is a directory, not a file"),
        (unreadable, "permission denied"),
        (latin1, "is not UTF-8 text (byte 0xe9 at position 14)"),
    ):
        assert main(["offsets", "show", "orders", "--config", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rocketlake: error: {path} is not valid:") and said in err, err
        assert "Traceback" not in err and err.count("\n") == 2, err  # the file, then its one problem


def test_backfill_refuses_an_instance_whose_group_pool_is_unlimited_before_any_run(tmp_path, capsys, monkeypatch):
    """`rocketlake backfill` executes its run in its own process, past the run queue: on an instance that does not
    limit the group's pool to 1 it is refused in one sentence naming the pool and the setting, and no run exists."""
    from dagster import DagsterInstance

    from rocketlake.cli.main import main

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry: {enabled: false}\n")  # no `concurrency`: pools unlimited
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    config = tmp_path / "rocketlake.yaml"
    config.write_text(
        "clusters: {local: {namesrv: '127.0.0.1:9876'}}\n"
        "ingestions:\n  orders: {cluster: local, topic: orders, consumer_group: g_orders, table: orders,\n"
        "           window: {cron: '* * * * *', start: '2026-11-01'}}\n"
    )
    assert main(["backfill", "orders", "2026-11-01-00:00", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rocketlake: error: ingestion orders: ") and err.count("\n") == 1, err
    assert "rocketmq_group_g_orders" in err and "default_limit: 1" in err, err
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs() == []


def test_send_refuses_a_count_or_queues_below_one_before_connecting(capsys):
    from rocketlake.cli.main import main

    # Port 9 (discard) on loopback: were anything sent, the command would fail on the connection instead.
    assert main(["send", "orders", "--count", "0", "--namesrv", "127.0.0.1:9"]) == 2
    assert "--count 0: give at least 1 message" in capsys.readouterr().err
    assert main(["send", "orders", "--create", "0", "--namesrv", "127.0.0.1:9"]) == 2
    assert "--create 0: give at least 1 queue on each broker" in capsys.readouterr().err
