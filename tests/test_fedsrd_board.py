"""jobs.report --fedsrd: the FedSRD leaderboard's table on run directories written by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.fedsrd_board import BOARD, COLUMNS
from jobs.report import main
from pubswap.config import load_config

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20


def fedsrd_dir(root, cell: str, scores: dict[str, float] | None, board_bytes: tuple[int, int], exact: tuple[int, int]):
    """A finished run of configs/fedsrd/<cell>.yaml with these benchmark scores (fractions) and, per
    client and round, (upload, download) bytes in the board's convention and exactly."""
    run = root / cell
    run.mkdir()
    cfg = load_config(REPO / f"configs/fedsrd/{cell}.yaml").to_dict()
    (run / "config.json").write_text(json.dumps(cfg))
    summary = {"final_pass@1": 0.1, "base_pass@1": 0.0, "rounds": 2}
    if scores is not None:
        summary["suite"] = {k: {"score": v, "se": 0.01, "prompts": 10} for k, v in scores.items()}
        summary["suite_avg"] = sum(scores.values()) / len(scores)
    (run / "summary.json").write_text(json.dumps(summary))
    up, down = [board_bytes[0]] * 4, [board_bytes[1]] * 4
    record = {
        "bytes": {"upload": [exact[0]] * 4, "download": [exact[1]] * 4, "upload_board": up, "download_board": down}
    }
    (run / "metrics.jsonl").write_text("\n".join(json.dumps({"round": r, **record}) for r in (1, 2)) + "\n")
    return run


def test_each_run_prints_its_eight_columns_its_average_and_both_mb_with_the_boards_row_under_it(tmp_path, capsys):
    scores = {k: (i + 1) / 10 for i, k in enumerate(COLUMNS)}  # 10%, 20%, ... 80%: average 45%
    ours = fedsrd_dir(tmp_path, "fedsrd_qwen2-7b", scores, (30 * MIB, 31 * MIB), (40 * MIB, 41 * MIB))
    unscored = fedsrd_dir(tmp_path, "fedavg_llama3.2-3b", None, (MIB, MIB), (MIB, 2 * MIB))
    assert main(["--fedsrd", str(ours), str(unscored)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(x for x in lines if x.startswith("fedsrd_qwen2-7b")).split()
    assert row[1:] == [
        "45.00",
        "10.00",
        "20.00",
        "30.00",
        "40.00",
        "50.00",
        "60.00",
        "70.00",
        "80.00",
        "61.00",
        "81.00",
    ]
    board = lines[lines.index(next(x for x in lines if x.startswith("fedsrd_qwen2-7b"))) + 1].split()
    assert board[:3] == ["board", "fedsrd", "qwen2-7b"] and board[3:] == [
        "61.19", "68.29", "36.19", "77.77", "78.94", "64.55", "48.48", "69.93", "45.36", "61",
    ]  # fmt: skip
    other = next(x for x in lines if x.startswith("fedavg_llama3.2-3b")).split()
    assert other[1:] == ["-"] * 9 + ["2.00", "3.00"]
    assert any(x.split()[:3] == ["board", "fedavg", "llama3.2-3b"] for x in lines)


def test_a_run_that_has_not_finished_a_round_is_one_line_and_exit_2(tmp_path, capsys):
    run = fedsrd_dir(tmp_path, "fedavg_qwen2-7b", None, (1, 1), (1, 1))
    (run / "summary.json").unlink()
    assert main(["--fedsrd", str(run)]) == 2
    assert "no summary.json" in capsys.readouterr().err


def test_the_boards_rows_are_its_16_cells_and_its_qwen_averages_are_the_mean_of_the_eight():
    cells = {p.stem for p in (REPO / "configs/fedsrd").glob("*_*.yaml")}
    assert {f"{method}_{model}" for method, model in BOARD} == cells
    for (method, model), (average, values, _) in BOARD.items():
        assert len(values) == 8
        if model == "qwen2-7b" or method in ("fedsrd", "fedavg"):
            assert sum(values) / 8 == pytest.approx(average, abs=0.01), (method, model)


def test_a_reduced_run_of_a_model_the_board_did_not_measure_is_shown_beside_the_named_models_row(tmp_path):
    from jobs.fedsrd_board import fedsrd_run, fedsrd_table

    run = fedsrd_run(fedsrd_dir(tmp_path, "reduced", {k: 0.5 for k in COLUMNS}, (MIB, MIB), (MIB, MIB)))
    assert run.model == "builtin:smollm2-135m-instruct" and run.method == "fedavg"
    lines = fedsrd_table([run], board_model="qwen2-7b").splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("reduced"))
    assert lines[at + 1].split()[:4] == ["board", "fedavg", "qwen2-7b", "57.04"]
    assert not any(x.split()[:1] == ["board"] for x in fedsrd_table([run]).splitlines())
