"""The `rocketlake` command documents every command, action and option."""

import argparse

from rocketlake.cli import build_parser


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_and_option_has_help():
    parser = build_parser()
    assert "Delta Lake" in parser.description and "examples:" in parser.epilog
    commands = subparsers(parser)
    assert set(commands) == {"local", "demo"}
    helped = {a.dest for a in next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))._choices_actions
              if a.help}
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
