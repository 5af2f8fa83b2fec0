"""jobs.report --board: the decentralized leaderboard's normalisation on run directories written by hand."""

from __future__ import annotations

import json

import pytest

from jobs.decentralized_board import BOARD
from jobs.report import main
from pubswap.config import RunConfig


def board_run(root, method: str, n: int, topology: str, task: str, final: float):
    run = root / f"{method}_{n}_{topology}_{task}"
    run.mkdir()
    cfg = RunConfig().to_dict()
    cfg["federation"].update(method=method, num_clients=n, topology=topology)
    cfg["data"]["source"] = task
    (run / "config.json").write_text(json.dumps(cfg))
    (run / "summary.json").write_text(json.dumps({"final_pass@1": final}))
    return run


def row_of(out: str, method: str, n: int, topology: str) -> list[str]:
    (line,) = [x for x in out.splitlines() if x.split()[:3] == [method, str(n), topology]]
    return line.split()


def test_each_topology_and_task_is_normalised_by_its_own_dsgd_16_then_averaged(tmp_path, capsys):
    runs = []
    for task, ring_ref, mesh_ref in [("sst2", 0.80, 0.50), ("rte", 0.60, 0.40), ("boolq", 0.50, 0.25)]:
        runs += [board_run(tmp_path, "dsgd", 16, "ring", task, ring_ref)]
        runs += [board_run(tmp_path, "dsgd", 16, "meshgrid", task, mesh_ref)]
        runs += [board_run(tmp_path, "seedflood", 128, "ring", task, ring_ref * 0.9)]  # 90 on every task
        runs += [board_run(tmp_path, "chocosgd-lora", 64, "meshgrid", task, 0.40)]
    runs += [board_run(tmp_path, "dsgd-lora", 32, "ring", "sst2", 0.40)]  # one task only
    assert main(["--board", *map(str, runs)]) == 0
    out = capsys.readouterr().out
    assert row_of(out, "dsgd", 16, "ring")[3:] == ["100.0", "100.0", "100.0", "100.0", "100.0"]
    assert row_of(out, "seedflood", 128, "ring")[3:] == ["90.0", "90.0", "90.0", "90.0", "100.2"]
    # meshgrid's own reference: 0.40 / 0.50, 0.40 / 0.40, 0.40 / 0.25 -> 80, 100, 160, mean 113.3
    assert row_of(out, "chocosgd-lora", 64, "meshgrid")[3:] == ["80.0", "100.0", "160.0", "113.3", "86.4"]
    assert row_of(out, "dsgd-lora", 32, "ring")[3:] == ["50.0", "50.0", "98.4"]  # the mean of the tasks it has


def test_a_missing_reference_is_a_dash_and_two_runs_of_a_cell_are_refused(tmp_path, capsys):
    lone = board_run(tmp_path, "chocosgd", 16, "ring", "rte", 0.5)
    assert main(["--board", str(lone)]) == 0
    assert row_of(capsys.readouterr().out, "chocosgd", 16, "ring")[3:] == ["-", "-", "98.6"]
    twin = tmp_path / "twin"
    twin.mkdir()
    for name in ("config.json", "summary.json"):
        (twin / name).write_text((lone / name).read_text())
    assert main(["--board", str(lone), str(twin)]) == 2
    assert "two runs of ('chocosgd', 16, 'ring', 'rte')" in capsys.readouterr().err


def test_the_boards_own_numbers_are_its_40_cells():
    assert sum(len(v) for v in BOARD.values()) == 40
    assert BOARD["dsgd"][("ring", 16)] == BOARD["dsgd"][("meshgrid", 16)] == 100.0


@pytest.mark.parametrize("method", ["pubswap-balanced"])
def test_a_run_that_is_no_board_cell_is_left_out_with_a_line(tmp_path, capsys, method):
    other = board_run(tmp_path, method, 4, "ring", "sst2", 0.5)
    ref = board_run(tmp_path, "dsgd", 16, "ring", "sst2", 0.5)
    assert main(["--board", str(other), str(ref)]) == 0
    out, err = capsys.readouterr()
    assert "is not a board cell" in err and method not in out


def test_the_board_config_set_has_its_40_cells_each_runnable_on_every_task():
    """configs/board/: one file per cell of the board, each a valid label-words run on SST-2, RTE and
    BoolQ once data.source is set, with the cell's method, topology and client count."""
    from pathlib import Path

    from pubswap.config import _apply_override, from_dict, read_yaml

    root = Path(__file__).resolve().parents[1] / "configs" / "board"
    cells = sorted(root.glob("*_*_*.yaml"))
    want = {(m, t, n) for m, by in BOARD.items() for (t, n) in by}
    assert len(cells) == len(want) == 40
    seen = set()
    for path in cells:
        for task in ("sst2", "rte", "boolq"):
            raw = read_yaml(path)
            _apply_override(raw, f"data.source={task}")
            cfg = from_dict(raw)
            f = cfg.federation
            assert cfg.objective == "label-words" and cfg.model.prompt_format == "plain"
            assert f.gossip_rule is not None and f.num_clients * cfg.data.per_client + cfg.data.test_size <= 2490
            seen.add((f.method, f.topology, f.num_clients))
            assert path.stem == f"{f.method}_{f.topology}_{f.num_clients}"
    assert seen == want
