"""docs/config.md, generated from the config's schema (pubswap/config.py): every key, its type, default,
whether a resumed run may change it, and its description.

    python -m jobs.config_doc            # rewrite docs/config.md
    python -m jobs.config_doc --check    # exit 1 when docs/config.md is stale (a test runs this)
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel

from pubswap import config

DOC = Path(__file__).resolve().parents[1] / "docs" / "config.md"

HEADER = """# Config reference

Generated from the schema in `pubswap/config.py` by `python -m jobs.config_doc` (a test fails when this page is
stale). A run's config is a YAML file plus dotted overrides on the command line:

    python -m jobs.train --config configs/default.yaml federation.tau=8 grpo.lr=3e-5

Unknown keys and invalid values stop the start with one line naming the dotted key (exit 2, nothing
written). "Resume" says whether a resumed run may change the key: the others would change the result,
and a resume with a different value is refused with the differing keys listed. Defaults are the
paper's Table 9 (Qwen3-1.7B on MATH); `configs/default.yaml` overrides them for the CPU default run.
"""


def type_name(annotation) -> str:
    """How a field's type reads in the table: choices as `a | b`, Annotated types by their base."""
    text = repr(annotation) if not isinstance(annotation, type) else annotation.__name__
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(str(a) for a in typing.get_args(annotation))
    if typing.get_origin(annotation) is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(a) for a in typing.get_args(annotation))
    return text.replace("typing.", "").replace("NoneType", "None").replace("|", "\\|")


def rows(model: type[BaseModel] = config.RunConfig, prefix: str = ""):
    """(key, type, default, may change on resume, description) for every setting, in schema order."""
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from rows(kind, f"{prefix}{name}.")
            continue
        default = info.get_default(call_default_factory=True)
        resumable = bool((info.json_schema_extra or {}).get("resume"))
        bounds = [
            f"{sign} {getattr(m, attr):g}"
            for m in info.metadata
            for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
            if getattr(m, attr, None) is not None
        ]
        kind_text = type_name(kind) + (f", {' and '.join(bounds)}" if bounds else "")
        yield prefix + name, kind_text, json.dumps(default), resumable, info.description or ""


def render() -> str:
    sections: dict[str, list[str]] = {}
    for key, kind, default, resumable, note in rows():
        section = key.split(".")[0] if "." in key else "top level"
        cells = (f"`{key}`", kind, f"`{default}`", "may change" if resumable else "fixed", note.replace("|", "\\|"))
        sections.setdefault(section, []).append("| " + " | ".join(cells) + " |")
    out = [HEADER]
    for section in ["top level", *[s for s in sections if s != "top level"]]:
        out += [f"\n## {section}\n", "| key | type | default | resume | what it does |", "|---|---|---|---|---|"]
        out += sections[section]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.config_doc", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/config.md is not what would be written")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.is_file() or DOC.read_text() != text:
            print(f"{DOC.name} is stale: run python -m jobs.config_doc", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
