"""jobs.report on two run directories written by hand: the table and the side-by-side PNG."""

from __future__ import annotations

import json

import pytest

from jobs.report import main, run_curve
from pubswap.config import RunConfig


def fake_run(root, name: str, method: str, tau: int, passes: list[float], rewards: list[float]):
    run = root / name
    run.mkdir()
    cfg = RunConfig().to_dict()
    cfg["federation"].update(method=method, tau=tau, rounds=len(passes) - 1)
    (run / "config.json").write_text(json.dumps(cfg))
    records = [
        {
            "round": r,
            "pass@1": p,
            "pass@1_se": 0.02,
            "eval_prompts": 100,
            "eval_n": 4,
            "reward_mean": [rw, rw + 0.1],
            # client 0 sends 1 MiB and gets 2 MiB, client 1 sends 3 and gets 2; 1 MiB of public responses;
            # in the leaderboard's convention (no positions) 1 MiB less up for client 1
            "bytes": {
                "upload": [2**20, 3 * 2**20],
                "download": [2 * 2**20] * 2,
                "upload_board": [2**20, 2 * 2**20],
                "download_board": [2 * 2**20] * 2,
                "public_pool": 2**20,
            },
        }
        for r, (p, rw) in enumerate(zip(passes[1:], rewards), start=1)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "summary.json").write_text(
        json.dumps(
            {
                "base_pass@1": passes[0],
                "base_pass@1_se": 0.02,
                "final_pass@1": passes[-1],
                "final_pass@1_se": 0.02,
                "best_pass@1": max(passes),
                "eval_prompts": 100,
                "eval_n": 4,
                "rounds": len(records),
            }
        )
    )
    return run


def test_report_prints_the_table_and_draws_both_runs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a = fake_run(tmp_path, "a", "pubswap-balanced", 4, [0.2, 0.3, 0.4], [0.25, 0.35])
    b = fake_run(tmp_path, "b", "fedavg-grpo", 8, [0.2, 0.25, 0.28], [0.22, 0.3])
    png = tmp_path / "out" / "cmp.png"
    png.parent.mkdir()
    assert main([str(a), str(b), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "a " in out and "40.0" in out and "28.0" in out and f"plot: {png}" in out
    assert "MB/round/client" in out.splitlines()[0]
    row = next(line for line in out.splitlines() if line.startswith("a "))
    # (1 + 2 + 3 + 2) / 2 clients exact, (1 + 2 + 2 + 2) / 2 as the board counts; 1 / 2 clients public
    assert row.split("|")[0].split()[-3:] == ["4.0", "3.5", "0.500"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    curve_a = run_curve(a)
    assert curve_a.label == "a: pubswap-balanced tau=4"
    assert curve_a.rounds == [0, 1, 2] and curve_a.pass_at_1 == [0.2, 0.3, 0.4] and curve_a.se == [0.02] * 3
    assert curve_a.reward_rounds == [1, 2] and curve_a.reward == pytest.approx([0.3, 0.4])


def test_report_on_an_unfinished_run_is_one_line_exit_2(tmp_path, capsys):
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(RunConfig().to_dict()))
    assert main([str(run), "--plot", str(tmp_path / "x.png")]) == 2
    assert "no summary.json" in capsys.readouterr().err and not (tmp_path / "x.png").exists()


def test_normalized_performance_divides_by_the_centralized_run(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    central = fake_run(tmp_path, "central", "centralized", 4, [0.2, 0.3, 0.40], [0.2, 0.3])
    dsgd = fake_run(tmp_path, "dsgd", "dsgd-lora", 4, [0.2, 0.3, 0.38], [0.2, 0.3])
    assert main([str(dsgd), str(central), "--plot", str(tmp_path / "p.png")]) == 0
    # fields: run, rounds, base, final, SE (2 fields), best, norm.
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:3]}
    assert rows["dsgd"][7] == "95.0" and rows["central"][7] == "100.0", rows
    # an explicit reference wins; none listed and none given: "-"
    assert main([str(dsgd), "--reference", str(dsgd), "--plot", str(tmp_path / "p.png")]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[7] == "100.0"
    assert main([str(dsgd), "--plot", str(tmp_path / "p.png")]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[7] == "-"
