"""What the code imports is declared, the console entry points work, and the code is clean under ruff."""

import ast
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = {"pubswap", "actors", "jobs", "placement"}
OPTIONAL = {"vllm", "wandb"}  # vllm: the [cpu] or [gpu] extra; wandb: `logger: [wandb]` asks for it at start
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def imported_modules() -> set[str]:
    names = set()
    for folder in OURS:
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names - OURS - set(sys.stdlib_module_names) - OPTIONAL


def declared(requirement: str) -> str:
    for stop in "[=<>!~; ":
        requirement = requirement.split(stop)[0]
    return requirement.lower().replace("_", "-")


def test_every_package_the_code_imports_is_declared():
    deps = {declared(r) for r in PROJECT["dependencies"]}
    dists = packages_distributions()
    missing = sorted(m for m in imported_modules() if not {declared(d) for d in dists.get(m, [m])} & deps)
    assert not missing, f"imported but not in pyproject's dependencies: {missing}"


def test_the_console_entry_points_run():
    bin_dir = Path(sys.executable).parent
    for name, target in PROJECT["scripts"].items():
        module, func = target.split(":")
        assert callable(getattr(__import__(module, fromlist=[func]), func)), target
        done = subprocess.run([str(bin_dir / name), "--help"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "usage" in done.stdout, (name, done.stderr[-2000:])


def test_the_code_is_clean_under_ruff():
    for args in (["check", "."], ["format", "--check", "."]):
        done = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, f"ruff {' '.join(args)}:\n{done.stdout[-3000:]}"
