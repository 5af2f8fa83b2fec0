"""pubswap/ shows its layers in its folders and keeps them: each folder imports only from the layers
below it (function-level imports included), no module imports itself through others, and nothing in
pubswap/ imports Ray or the layers above it (actors/, placement/, jobs/)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE = "core"  # pubswap/*.py besides config.py: seeding, lora, hub, presets, models
# the layer a folder may import from, besides itself
ALLOWED = {
    CORE: set(),
    "algorithms": {CORE},
    "run": {CORE},
    "data": {CORE, "algorithms"},  # a client's data order follows the seeded participation schedule
    "methods": {CORE, "algorithms", "data", "run"},
    "learner": {CORE, "algorithms", "config"},
    "config": {CORE, "algorithms", "data", "run", "methods"},  # the schema checks names against registries
}
ABOVE = ("ray", "actors", "placement", "jobs", "vllm")


def modules() -> dict[str, Path]:
    out = {}
    for path in (REPO / "pubswap").rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else CORE


def imports(path: Path, known: dict) -> tuple[set[str], set[str]]:
    ours, others = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names
            ]
        for name in names:
            (ours if name.startswith("pubswap.") and name in known else others).add(name)
    return ours, others


def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    known = modules()
    edges, outside = {}, {}
    for module, path in known.items():
        ours, others = imports(path, known)
        edges[module], outside[module] = ours - {module}, others
    return edges, outside


def test_each_layer_imports_only_the_layers_below_it():
    edges, outside = graph()
    wrong = [
        f"{m} ({layer(m)}) imports {o} ({layer(o)})"
        for m, outs in edges.items()
        for o in outs
        if layer(o) != layer(m) and layer(o) not in ALLOWED[layer(m)]
    ]
    assert not wrong, "\n".join(wrong)
    above = [f"{m} imports {o}" for m, outs in outside.items() for o in outs if o.split(".")[0] in ABOVE]
    assert not above, "\n".join(above)


def test_no_module_imports_itself_through_others():
    edges, _ = graph()
    state, cycles = {}, []

    def visit(module, path):
        state[module] = "open"
        for nxt in sorted(edges[module]):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not cycles, "\n".join(cycles)
