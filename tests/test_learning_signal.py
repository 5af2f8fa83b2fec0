"""A GRPO run without a learning signal says so once, with its likely causes; the evaluation reports
pass@1 per task; zero-advantage rows are not trained (pubswap/learner/trainer.py: inert_rows)."""

from ray_helpers import ft_config, metrics

from jobs.train import train
from pubswap.algorithms.evaluation import score
from pubswap.run.learning_signal import no_signal, no_signal_note


def test_score_by_topic_is_the_mean_over_each_topics_prompts():
    sc = score([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]], [[True] * 2] * 3, ["a", "b", "a"])
    assert sc.pass_at_1 == 0.5 and sc.by_topic == {"a": 0.75, "b": 0.0}
    assert score([[1.0]], [[True]]).by_topic == {}


def test_no_signal_needs_every_client_step_without_advantages():
    step = {"clients": [{"zero_adv_frac": 1.0, "response_clip_ratio": 0.5}, {"zero_adv_frac": 1.0}]}
    rec = {"round": 3, "steps": [step, step]}
    assert no_signal(rec)
    assert not no_signal({"round": 3, "steps": [step, {"clients": [{"zero_adv_frac": 0.75}]}]})
    assert not no_signal({"round": 3, "steps": [{"clients": [{"nll": 1.0}]}]})  # a cross-entropy step
    note = no_signal_note(rec, 16, {"pass@1_by_topic": {"chain_sum": 0.0, "leg_counting": 0.05}}, "strict")
    assert note.startswith("round 3: no learning signal")
    assert "max_response_len=16 (50% of" in note and "chain_sum 0.00, leg_counting 0.05" in note
    assert "\\boxed{}" in note


def test_a_run_without_rewards_says_so_once_and_trains_no_row(local_ray, digit_model_dir, tmp_path, capsys):
    """The digit model never writes \\boxed{}: under the strict reward every reward is 0."""
    cfg = ft_config(
        digit_model_dir, tmp_path / "run", "data.reward_mode=strict", "federation.method=fedavg-grpo", "grpo.kl_coef=0"
    )
    train(cfg)
    out = capsys.readouterr().out
    records = metrics(cfg.run_dir)
    assert len(records) == 2 and all(no_signal(r) for r in records)
    assert out.count("no learning signal") == 1 and "round 1: no learning signal" in out
    topics = sorted(records[0]["pass@1_by_topic"])  # the test set's tasks (8 prompts: one or both)
    assert topics and set(topics) <= {"basic_arithmetic", "chain_sum"}
    assert "base pass@1 by task: " + ", ".join(f"{t} 0.00" for t in topics) + ");" in out
    assert "max_response_len=1 (100% of this round's responses" in out
    for r in records:
        assert sorted(r["pass@1_by_topic"]) == topics
        for st in r["steps"]:
            for c in st["clients"]:  # nothing was trained: no micro-batch ran, AdamW still stepped
                assert c["inert_frac"] == 1.0 and c["micro_batches"] == 0
                assert c["updates"] == cfg.grpo.grad_epochs
