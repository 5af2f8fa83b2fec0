"""docs/config.md, generated from the config's dataclasses: every key, its type, default, whether a
resumed run may change it, and the comment written beside it in pubswap/config.py.

    python -m jobs.config_doc            # rewrite docs/config.md
    python -m jobs.config_doc --check    # exit 1 when docs/config.md is stale (a test runs this)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import sys
from pathlib import Path

from pubswap import config

DOC = Path(__file__).resolve().parents[1] / "docs" / "config.md"

HEADER = """# Config reference

Generated from `pubswap/config.py` by `python -m jobs.config_doc` (a test fails when this page is
stale). A run's config is a YAML file plus dotted overrides on the command line:

    python -m jobs.train --config configs/default.yaml federation.tau=8 grpo.lr=3e-5

Unknown keys and invalid values stop the start with one line naming the dotted key (exit 2, nothing
written). "Resume" says whether a resumed run may change the key: the others would change the result,
and a resume with a different value is refused with the differing keys listed. Defaults are the
paper's Table 9 (Qwen3-1.7B on MATH); `configs/default.yaml` overrides them for the CPU default run.
"""


def comments(cls: type) -> dict[str, str]:
    """Each field's comment: the comment lines just above it and the one after it on its line."""
    lines, _ = inspect.getsourcelines(cls)
    body = ast.parse("".join(lines).replace("\n    ", "\n", 0)).body[0]
    out = {}
    for node in body.body:
        if not isinstance(node, ast.AnnAssign):
            continue
        name = node.target.id
        above, i = [], node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#"):
            above.insert(0, lines[i].strip().lstrip("#").strip())
            i -= 1
        inline = lines[node.lineno - 1].split("  # ", 1)
        text = " ".join(above + ([inline[1].strip()] if len(inline) == 2 else []))
        out[name] = text
    return out


def rows(cls: type, instance, prefix: str = ""):
    notes = comments(cls)
    for f in dataclasses.fields(cls):
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            yield from rows(type(value), value, f"{prefix}{f.name}.")
            continue
        key = prefix + f.name
        yield key, str(f.type), json.dumps(value), config.may_change_on_resume(key), notes.get(f.name, "")


def render() -> str:
    sections: dict[str, list[str]] = {}
    for key, kind, default, resumable, note in rows(config.RunConfig, config.RunConfig()):
        section = key.split(".")[0] if "." in key else "top level"
        cells = (f"`{key}`", f"`{kind}`", f"`{default}`", "may change" if resumable else "fixed", note)
        sections.setdefault(section, []).append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
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
