"""The objective label-words through the Ray path: DSGD-LoRA clients train the label word's
cross-entropy on SST-2 rows (no rollouts), and the round's score is the accuracy of the clients'
average by the label words' likelihood, recomputed here from the checkpoint."""

import json

import pytest
from ray_helpers import metrics, tiny_config

from jobs.train import build_split, train
from pubswap.algorithms.label_words import accuracy_rewards, label_text
from pubswap.config import GRPOConfig, LoraConfig
from pubswap.data.prompt_length import prompt_ids
from pubswap.learner.trainer import GRPOTrainer, Sample
from pubswap.lora import read_adapter
from pubswap.run.checkpoint import latest_checkpoint


def sst2_file(path, n=80):
    words = ["fine", "dull", "bright", "flat", "warm", "cold", "sharp", "slow"]
    rows = [{"sentence": f"a {words[i % 8]} film, take {i}", "label": int(i % 2 == 0), "idx": i} for i in range(n)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_dsgd_lora_trains_label_words_and_scores_accuracy(local_ray, tiny_model_dir, tmp_path):
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path / "run",
        "objective=label-words",
        "federation.method=dsgd-lora",
        "federation.num_clients=4",
        "resources.num_actors=2",
        "federation.tau=3",
        "federation.topology=ring",
        "data.source=sst2",
        f"data.paths=[{sst2_file(tmp_path / 'sst2.jsonl')}]",
        "data.per_client=12",
        "data.public_size=0",
        "data.test_size=16",
        "grpo.b=4",
        "grpo.lr=5e-3",
        "grpo.grad_epochs=1",
        "model.max_prompt_len=256",  # the byte-level test tokenizer spends many tokens on English
    )
    train(cfg)
    records = metrics(cfg.run_dir)
    assert len(records) == 2
    for rec in records:  # every step trained the label words, with no responses generated
        for st in rec["steps"]:
            assert not st["public"]
            for c in st["clients"]:
                assert c["gen_s"] == 0.0 and c["updates"] == 1 and c["response_tokens"] > 0
                assert 0.0 < c["reward_mean"] < 1.0  # the label tokens' geometric-mean probability
    first = [c["nll"] for c in records[0]["steps"][0]["clients"]]
    last = [c["nll"] for c in records[-1]["steps"][-1]["clients"]]
    assert sum(last) < sum(first)  # the cross-entropy fell
    # the last round's score is the accuracy of the clients' average on the test rows, label word by
    # label word: recomputed here from the checkpointed average with a trainer of our own
    split = build_split(cfg, str(tiny_model_dir))
    t = GRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=8, alpha=16), GRPOConfig(), dtype="float32")
    t.set_adapter(read_adapter(latest_checkpoint(tmp_path / "run" / "checkpoints").path))
    tok, rows = t.tokenizer, split.test
    samples = [
        Sample(
            tuple(prompt_ids(tok, r.prompt, r.context, "auto")),
            tuple(tok(label_text(c, False), add_special_tokens=False)["input_ids"]),
            0.0,
        )
        for r in rows
        for c in r.choices
    ]
    logp = t.sequence_logprobs(samples)
    scores = [logp[2 * i : 2 * i + 2] for i in range(len(rows))]
    want = accuracy_rewards(scores, [r.choices for r in rows], [r.answer for r in rows])
    assert records[-1]["pass@1"] == pytest.approx(sum(w[0] for w in want) / len(rows))
    assert records[-1]["eval_prompts"] == len(rows) == 16
