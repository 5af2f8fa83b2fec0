"""The objective sft through the Ray path: FedAvg clients train the token cross-entropy of each row's
reference answer and the end-of-sequence token after the prompt (no rollouts), the server path
averages them, and the rounds are evaluated by sampling from the engine, as GRPO runs are."""

from ray_helpers import metrics, tiny_config
from transformers import AutoTokenizer

from jobs.train import build_split, train
from pubswap.data.order import private_batch, private_steps_before


def test_fedavg_sft_trains_the_reference_answers_and_evaluates_by_sampling(local_ray, tiny_model_dir, tmp_path):
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path / "run",
        "objective=sft",
        "federation.method=fedavg-grpo",
        "federation.tau=3",
        "grpo.lr=5e-3",
        "grpo.grad_epochs=1",
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
