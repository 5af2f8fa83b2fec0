"""Paper presets, the reproduction grid (one committed config per cell) and the results table."""

import json
from pathlib import Path

import pytest

from jobs import paper_grid, report
from jobs.paper_grid import Cell, cells
from pubswap.config import from_dict, load_config
from pubswap.presets import LLAMA_TARGETS, MODELS

REPO = Path(__file__).resolve().parents[1]


def test_committed_configs_are_exactly_the_grid(tmp_path):
    written = {p.relative_to(tmp_path): p.read_text() for p in paper_grid.write_configs(tmp_path)}
    paper = REPO / "configs" / "paper"
    committed = {p.relative_to(paper): p.read_text() for p in paper.rglob("*.yaml")}
    assert committed == written, "configs/paper is stale: run `python -m jobs.paper_grid write`"
    assert len(cells()) == 83  # T1 48 + T2 8 + T3 8 + T4 6 + new cells of T5 (9) and T6 (4)
    assert len(written) == 83 + 1 + len(MODELS) + 3  # the cells over paper.yaml, the models and the datasets


def test_every_cell_file_loads_to_its_whole_config_with_the_papers_hyperparameters():
    for cell in cells():
        path = REPO / "configs" / "paper" / f"{cell.name}.yaml"
        cfg = load_config(path)
        assert cfg.to_dict() == from_dict(cell.config()).to_dict(), cell.name  # nothing lost by extending
        assert len(path.read_text().splitlines()) <= 8  # a few lines over the files it extends
        assert (cfg.grpo.K, cfg.grpo.grad_epochs, cfg.lora.r, cfg.lora.alpha) == (8, 2, 32, 64)
        assert (cfg.grpo.lr, cfg.grpo.clip_low, cfg.grpo.clip_high, cfg.grpo.kl_coef) == (1e-5, 0.2, 0.25, 1e-4)
        assert cfg.federation.num_clients == 4 and cfg.model.max_response_len == 2048
        assert cfg.federation.rounds * cfg.federation.tau >= 320


def test_cell_specifics():
    qwen4b = load_config(REPO / "configs/paper/qwen3-4b-instruct_deepmath_fedavg-grpo_tau40.yaml")
    assert qwen4b.grpo.b == 4 and qwen4b.model.path == "Qwen/Qwen3-4B-Instruct-2507"
    llama = load_config(REPO / "configs/paper/llama3.2-3b-instruct_medical_pubswap-balanced_swap2_tau120.yaml")
    assert llama.lora.target_modules == LLAMA_TARGETS and llama.data.reward == "choice"
    assert llama.federation.rounds == 5  # 600 GRPO steps at tau=120 (Table 3)
    hetero = load_config(REPO / "configs/paper/qwen3-1.7b_deepmath_a0.1_pubswap-balanced_swap2_tau90.yaml")
    assert hetero.data.dirichlet_alpha == 0.1 and hetero.data.subsample == 20000 and hetero.data.per_client == 4000
    math = load_config(REPO / "configs/paper/qwen2.5-math-1.5b_math_fedprox-grpo_tau10.yaml")
    assert (math.data.per_client, math.data.public_size, math.data.test_size) == (2500, 1250, 1250)
    assert math.federation.rounds == 36 and MODELS["qwen3-1.7b"].target_modules == ("all-linear",)
    assert {c.swap_period for c in cells(5) if c.method.startswith("pubswap")} == {2, 4, 8}
    assert Cell("qwen3-1.7b", "deepmath", "pubswap-balanced", 90) in cells(1) and paper_grid.tables_of(
        Cell("qwen3-1.7b", "deepmath", "pubswap-balanced", 90)
    ) == [1, 5]


def test_list_prints_every_cell_with_an_estimate(capsys):
    assert paper_grid.main(["list", "--table", "3", "--step-s", "60"]) == 0
    out = capsys.readouterr().out
    assert out.count("llama3.2-3b-instruct_medical_") == 8
    # 2 methods x (540 + 560 + 540 + 600 steps) x 4 GPUs x 60 s = 298.7 GPU hours
    assert "8 configs, about 299 GPU hours" in out


def test_report_puts_runs_next_to_the_paper(tmp_path, capsys):
    cfg = load_config(REPO / "configs/paper/qwen3-1.7b_deepmath_pubswap-balanced_swap2_tau90.yaml").to_dict()
    run = tmp_path / "qwen3-1.7b_deepmath_pubswap-balanced_swap2_tau90"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(cfg))
    (run / "summary.json").write_text(
        json.dumps(
            {
                "base_pass@1": 0.149,
                "final_pass@1": 0.53,
                "best_pass@1": 0.545,
                "final_pass@1_se": 0.0158,
                "eval_prompts": 1000,
                "eval_n": 1,
                "rounds": 4,
            }
        )
    )
    other = tmp_path / "smoke"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(load_config(REPO / "configs/default.yaml").to_dict()))
    (other / "summary.json").write_text(json.dumps({"base_pass@1": 0.25, "final_pass@1": 0.25, "rounds": 1}))
    assert report.main([str(run), str(other)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        "  4/4    14.9   53.0     ±1.6 (1000x1)   54.5      -               -        -         - "
        "| T1: 14.9 53.3/53.3; T5: 14.9 53.3/-" in lines[1]
    )
    assert lines[2].startswith("smoke") and lines[2].endswith("| -")
    with pytest.raises(SystemExit):
        report.main([])
