"""configs/fedsrd/: the FedSRD board's 16 cells (8 methods x 2 models), each loading to the reference
code's setting (Youth-49/FedSRD_2025, run_fedsrd*.sh), and the domain names its clients read."""

from __future__ import annotations

from pathlib import Path

import pytest

from pubswap.config import load_config
from pubswap.data import instructions
from pubswap.data.board_evals import BENCHMARKS

REPO = Path(__file__).resolve().parents[1]
METHODS = {  # cell name -> (federation.method, federation.aggregation)
    "fedsrd": ("fedavg-grpo", "fedsrd"),
    "fedsrd-e": ("fedavg-grpo", "fedsrd-e"),
    "fedprox": ("fedprox-grpo", "fedit"),
    "fedicu": ("fedavg-grpo", "fedicu"),
    "fedavg": ("fedavg-grpo", "fedit"),
    "fed-dare": ("fedavg-grpo", "fed-dare"),
    "flexlora": ("fedavg-grpo", "flexlora"),
    "ffa-lora": ("fedavg-grpo", "ffa-lora"),
}
MODELS = {  # the reference scripts: model, r, alpha, lr (FedSRD-e's own lr where its script differs)
    "qwen2-7b": ("Qwen/Qwen2-7B", 32, 64, 1e-5, 1e-5),
    "llama3.2-3b": ("meta-llama/Llama-3.2-3B", 64, 128, 2e-5, 5e-5),
}


def test_there_is_one_cell_per_method_and_model():
    cells = {p.stem for p in (REPO / "configs/fedsrd").glob("*_*.yaml")}
    assert cells == {f"{m}_{model}" for m in METHODS for model in MODELS}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("method", list(METHODS))
def test_each_cell_is_the_reference_setting(method, model):
    cfg = load_config(REPO / f"configs/fedsrd/{method}_{model}.yaml")
    path, r, alpha, lr, lr_e = MODELS[model]
    f, g, d = cfg.federation, cfg.grpo, cfg.data
    assert (f.method, f.aggregation) == METHODS[method]
    assert (cfg.model.path, cfg.lora.r, cfg.lora.alpha, cfg.lora.target_modules) == (path, r, alpha, ["all-linear"])
    assert g.lr == (lr_e if method == "fedsrd-e" else lr)
    assert (cfg.objective, cfg.model.prompt_format, d.source) == ("sft", "alpaca", "instruct")
    assert d.client_paths == ["code", "medical", "finance", "math"]  # one domain per client, in the reference's order
    assert (f.num_clients, f.clients_in_round(), f.weighting) == (4, 4, "uniform")  # --simple_aggr
    assert (f.tau, f.rounds, g.b, g.grad_epochs) == (10, 100, 32, 1)  # 10 steps of 8 x 4 rows, 100 rounds
    assert cfg.model.max_prompt_len + cfg.model.max_response_len == 512
    assert cfg.seed == 2023 and cfg.run_dir.endswith(f"runs/fedsrd/{method}_{model}")
    assert list(cfg.eval_suite) == list(BENCHMARKS)  # the board's eight columns, from the hub
    if method == "fedprox":
        assert f.fedprox_mu == 0.01
    if method.startswith("fedsrd"):
        assert f.aggregation_kwargs.get("download_p", 0.8) == 0.8  # download_sparse_ratio


def test_a_domain_name_reads_the_references_sets_and_a_local_path_wins(tmp_path, monkeypatch):
    """The hub is out of reach here: its datasets are stood in for by records named after them."""
    asked = []

    def hub(name, split="train", config=None):
        asked.append((name, split, config))
        if name == "openai/gsm8k":
            return [{"question": "2+2?", "answer": "#### 4"}]
        if name == "DigitalLearningGmbH/MATH-lighteval":
            return [{"problem": "x?", "solution": "\\boxed{1}", "level": "Level 1", "type": "Algebra"}]
        return [{"instruction": f"from {name}", "input": "", "output": "ok"}]

    monkeypatch.setattr("pubswap.data.records.load_records", hub)
    monkeypatch.chdir(tmp_path)
    rows, _ = instructions.load_instructions("math")
    assert asked == [("openai/gsm8k", "train", "main"), ("DigitalLearningGmbH/MATH-lighteval", "train", None)]
    assert [(r.prompt, r.topic) for r in rows] == [("2+2?", "math"), ("x?", "math")]
    rows, _ = instructions.load_instructions("")
    assert {r.topic for r in rows} == {"code", "medical", "finance", "math"} and len(rows) == 5
    (tmp_path / "code").mkdir()  # a local folder of that name is read instead
    asked.clear()
    rows, _ = instructions.load_instructions("code")
    assert asked == [("code", "train", None)] and [r.topic for r in rows] == ["code"]
