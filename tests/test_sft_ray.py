"""The objective sft through the Ray path: FedAvg clients train the token cross-entropy of each row's
reference answer and the end-of-sequence token after the prompt (no rollouts), the server path
averages them, and the rounds are evaluated by sampling from the engine, as GRPO runs are; after the
last round the FedSRD board's benchmarks are scored too (eval_suite), the choice ones recomputed here."""

import json

import pytest
from dataset_fixtures import board_eval_files
from ray_helpers import metrics, tiny_config
from transformers import AutoTokenizer

from jobs.train import build_split, build_suite, train
from pubswap.algorithms.label_words import accuracy_rewards
from pubswap.config import GRPOConfig, LoraConfig
from pubswap.data.board_evals import BENCHMARKS
from pubswap.data.order import private_batch, private_steps_before
from pubswap.data.prompt_length import prompt_ids
from pubswap.data.rows import DataError
from pubswap.learner.trainer import GRPOTrainer, Sample
from pubswap.lora import read_adapter
from pubswap.run.checkpoint import latest_checkpoint

# MBPP's 3 shots are longer than the tiny model's 512 positions: its own test below
SUITE = [name for name in BENCHMARKS if name != "mbpp"]


def test_fedavg_sft_trains_the_reference_answers_and_evaluates_by_sampling(local_ray, tiny_model_dir, tmp_path):
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path / "run",
        "objective=sft",
        "federation.method=fedavg-grpo",
        "federation.tau=3",
        "grpo.lr=5e-3",
        "grpo.grad_epochs=1",
        "eval_suite_max_prompt_len=400",  # the training rows keep the tiny config's 96
        "eval_suite={" + ", ".join(f"{k}: {v}" for k, v in board_eval_files(tmp_path).items() if k in SUITE) + "}",
    )
    train(cfg)
    records = metrics(cfg.run_dir)
    assert [r["round"] for r in records] == [1, 2]
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    split = build_split(cfg, str(tiny_model_dir))
    for rec in records:
        for st in rec["steps"]:
            assert not st["public"]
            for c in st["clients"]:
                assert c["gen_s"] == 0.0 and c["updates"] == 1
                # the step trained exactly its batch's reference answers, each with the EOS token
                rows = split.clients[c["client"]]
                index = private_steps_before(cfg.federation, cfg.seed, c["client"], rec["round"], st["step"])
                batch = [rows[i] for i in private_batch(cfg.seed, c["client"], len(rows), cfg.grpo.b, index)]
                cut = cfg.model.max_response_len
                want = sum(min(cut, len(tok(r.answer, add_special_tokens=False)["input_ids"]) + 1) for r in batch)
                assert c["response_tokens"] == want
    first = sum(c["nll"] for c in records[0]["steps"][0]["clients"])
    last = sum(c["nll"] for c in records[-1]["steps"][-1]["clients"])
    assert last < first
    # evaluated by sampling: eval_n responses per test prompt, scored by the source's reward
    assert records[-1]["eval_prompts"] == cfg.data.test_size and 0.0 <= records[-1]["pass@1"] <= 1.0
    assert "format_rate" in records[-1]
    # the board's benchmarks, after the last round only, each split across the actors
    assert "suite" not in records[0]
    suite = records[-1]["suite"]
    assert list(suite) == SUITE
    rows = build_suite(cfg, str(tiny_model_dir))
    assert {k: v["prompts"] for k, v in suite.items()} == {k: len(v) for k, v in rows.items()}
    # scored within their own budget: a medqa prompt with its shot is longer than a training prompt may be
    longest = max(len(prompt_ids(tok, r.prompt, r.context, "auto")) for r in rows["medqa"])
    assert cfg.model.max_prompt_len < longest <= cfg.eval_suite_max_prompt_len
    assert records[-1]["suite_avg"] == pytest.approx(sum(v["score"] for v in suite.values()) / len(suite))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["suite"] == suite and summary["suite_avg"] == records[-1]["suite_avg"]
    # choice benchmarks: the most likely option letter under the final average, recomputed from the checkpoint
    t = GRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=8, alpha=16), GRPOConfig(), dtype="float32")
    t.set_adapter(read_adapter(latest_checkpoint(tmp_path / "run" / "checkpoints").path))
    for name in ("medqa", "medmcqa", "fineval", "financeiq"):
        bench = rows[name]
        samples = [
            Sample(
                tuple(prompt_ids(tok, r.prompt, r.context, "auto")),
                tuple(tok(c, add_special_tokens=False)["input_ids"]),
                0.0,
            )
            for r in bench
            for c in r.choices
        ]
        logp = t.sequence_logprobs(samples)
        want = accuracy_rewards(
            [logp[4 * i : 4 * i + 4] for i in range(len(bench))], [r.choices for r in bench], [r.answer for r in bench]
        )
        assert suite[name]["score"] == pytest.approx(sum(w[0] for w in want) / len(bench)), name


def test_a_benchmark_whose_prompts_all_exceed_the_prompt_budget_stops_the_run_before_it_starts(
    tiny_model_dir, tmp_path
):
    files = board_eval_files(tmp_path)
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path / "run",
        "objective=sft",
        "federation.method=fedavg-grpo",
        "eval_suite_max_prompt_len=400",
        f"eval_suite={{mbpp: {files['mbpp']}}}",
    )
    with pytest.raises(DataError, match="eval_suite.mbpp: every prompt is over its budget of 400 tokens"):
        train(cfg)
    assert not (tmp_path / "run").exists()
