"""MkDocs hook: the references, generated from the code at build time, so they cannot drift from it.

* ``<!-- configuration-reference -->``: one table per section of ``rocketlake.yaml`` (and of the Component's
  attributes, which are the same models): every key, its type, default, allowed values and what it does, read from
  ``rocketlake.engine.config``.
* ``<!-- python-api-reference -->``: every name ``import rocketlake`` offers (``rocketlake.PUBLIC``), with its
  signature and docstring.
* ``<!-- cli-reference -->``: every ``rocketlake`` command with its options, from the CLI's own parser.
* ``<!-- table-features -->``: the Delta table features, each a cell of ``tests/integration/test_table_features.py``
  (its ``FEATURES``) or a property the configuration refuses (``REFUSED_TABLE_PROPERTIES``).
"""

from __future__ import annotations

import typing
from enum import Enum

from pydantic import BaseModel

MARKER = "<!-- configuration-reference -->"
API_MARKER = "<!-- python-api-reference -->"
CLI_MARKER = "<!-- cli-reference -->"
FEATURES_MARKER = "<!-- table-features -->"


def _type(annotation) -> str:
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    if origin in (dict,):
        return f"map of name → {_type(args[1])}"
    if origin in (list,):
        return f"list of {_type(args[0])}"
    if args and len(args) < len(typing.get_args(annotation)):  # Optional[X]
        return _type(args[0]) + " (optional)"
    return getattr(annotation, "__name__", str(annotation))


def _default(field) -> str:
    if field.is_required():
        return "**required**"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, BaseModel):
        return "see its table"
    return f"`{value!r}`" if value not in (None, {}, []) else "unset"


def _allowed(name: str, field, ranges: dict, not_supported: dict) -> str:
    parts = []
    if name in ranges:
        parts.append(getattr(ranges[name], "allowed", ""))
    for m in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                parts.append(f"{sign} {getattr(m, attr)}")
    if name in not_supported:
        parts.append(f"**not supported yet** ({not_supported[name]}): refused when present")
    return "; ".join(p for p in parts if p)


def render() -> str:
    from rocketlake.engine import config as c

    sections = [
        ("Top level", c.RocketLakeConfig),
        ("ClusterConfig", c.ClusterConfig),
        ("TlsConfig", c.TlsConfig),
        ("LakeConfig", c.LakeConfig),
        ("S3Config", c.S3Config),
        ("SparkConfig", c.SparkConfig),
        ("IngestionConfig", c.IngestionConfig),
        ("WindowConfig", c.WindowConfig),
        ("BodyConfig", c.BodyConfig),
        ("RunRetryConfig", c.RunRetryConfig),
        ("LayoutConfig", c.LayoutConfig),
    ]
    out = []
    for title, model in sections:
        out.append(f"## {title}\n")
        doc = (model.__doc__ or "").strip()
        if doc and not doc.startswith(("Usage docs", "!!!")):
            out.append(doc.split("\n\n")[0].replace("\n", " ") + "\n")
        out.append("| key | type | default | allowed | what it does |\n|---|---|---|---|---|")
        for name, field in model.model_fields.items():
            key = field.alias or name
            description = (field.description or "").replace("|", "\\|").replace("\n", " ")
            out.append(
                f"| `{key}` | {_type(field.annotation)} | {_default(field)} | "
                f"{_allowed(name, field, c.PUSH_CONSUMER_RANGES, c.NOT_SUPPORTED_YET)} | {description} |"
            )
        out.append("")
    return "\n".join(out)


def render_api() -> str:
    import inspect

    import rocketlake

    out = []
    for name, module in rocketlake.PUBLIC.items():
        value = getattr(rocketlake, name)
        kind = "class" if inspect.isclass(value) else "function"
        try:
            signature = str(inspect.signature(value))
        except (TypeError, ValueError):
            signature = ""
        if inspect.isclass(value) and issubclass(value, BaseModel):
            signature = ""  # a model's fields are its keys: see the configuration reference
        out.append(f"## `{name}`\n")
        out.append(f"```python\n{kind} rocketlake.{name}{signature}\n```\n")
        out.append(f"*Defined in* `{module}`.\n")
        # A class's own docstring only: one it inherits (pydantic's, Dagster's) says nothing about rocketlake.
        own = value.__dict__.get("__doc__") if inspect.isclass(value) else value.__doc__
        doc = inspect.cleandoc(own) if own else ""
        if doc:
            out.append(doc.replace("``", "`") + "\n")
    return "\n".join(out)


def render_cli() -> str:
    import argparse

    from rocketlake.cli.main import build_parser

    def commands(parser: argparse.ArgumentParser, prefix: str):
        for action in parser._actions:  # argparse offers no public walk of its subcommands
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for name, sub in action.choices.items():
                    yield f"{prefix} {name}", helps.get(name), sub
                    yield from commands(sub, f"{prefix} {name}")

    parser = build_parser()
    out = ["```text", parser.format_usage().strip(), "```", ""]
    for path, help_text, sub in commands(parser, "rocketlake"):
        out.append(f"## `{path}`\n")
        if help_text:
            out.append(help_text + "\n")
        out.append("```text\n" + sub.format_help().strip() + "\n```\n")
    return "\n".join(out)


def render_features() -> str:
    import sys
    from pathlib import Path

    from rocketlake.engine.config import REFUSED_TABLE_PROPERTIES

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: its tests are the matrix's source
    from tests.integration.test_table_features import FEATURES

    out = ["| feature | turned on by | in the table's protocol as | every path |", "|---|---|---|---|"]
    for name, feature in FEATURES.items():
        how = [f"`{key}: {value}`" for key, value in feature.properties.items()]
        how += [f"`layout: {feature.layout}`"] if feature.layout else []
        how += [f"then `{feature.between_runs.format(table='<table>')}`"] if feature.between_runs else []
        out.append(f"| {name} | {'<br>'.join(how)} | `{feature.protocol_name}` | works |")
    for key, why in REFUSED_TABLE_PROPERTIES.items():
        out.append(
            f"| {why.split(' is not')[0]} | `{key}` | | refused at load: {why}; a table that already has it on is "
            "refused before the run writes |"
        )
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    for marker, render_page in (
        (MARKER, render),
        (API_MARKER, render_api),
        (CLI_MARKER, render_cli),
        (FEATURES_MARKER, render_features),
    ):
        if marker in markdown:
            markdown = markdown.replace(marker, render_page())
    return markdown
