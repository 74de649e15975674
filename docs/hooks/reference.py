"""MkDocs hook: the configuration reference, generated from the configuration models at build time.

A page holding ``<!-- configuration-reference -->`` gets one table per section of ``rocketlake.yaml`` (and of the
Component's attributes, which are the same models): every key, its type, default, allowed values and what it does,
read from ``rocketlake.pipelines.config``, so the reference cannot drift from what a load accepts.
"""

from __future__ import annotations

import typing
from enum import Enum

from pydantic import BaseModel

MARKER = "<!-- configuration-reference -->"


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
    from rocketlake.pipelines import config as c

    sections = [("Top level", c.RocketLakeConfig), ("ClusterConfig", c.ClusterConfig), ("TlsConfig", c.TlsConfig),
                ("LakeConfig", c.LakeConfig), ("S3Config", c.S3Config), ("SparkConfig", c.SparkConfig), ("IngestionConfig", c.IngestionConfig),
                ("WindowConfig", c.WindowConfig), ("BodyConfig", c.BodyConfig), ("RunRetryConfig", c.RunRetryConfig),
                ("LayoutConfig", c.LayoutConfig)]
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
            out.append(f"| `{key}` | {_type(field.annotation)} | {_default(field)} | "
                       f"{_allowed(name, field, c.PUSH_CONSUMER_RANGES, c.NOT_SUPPORTED_YET)} | {description} |")
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
