"""The objective label-words: cross-entropy of the label word after the prompt, accuracy by the label
words' likelihood (pubswap/algorithms/label_words.py), first-order and zeroth-order."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from pubswap.algorithms.cross_entropy import token_nll
from pubswap.algorithms.gossip import direction
from pubswap.algorithms.label_words import accuracy_rewards, label_text, predict
from pubswap.config import ConfigError, GRPOConfig, LoraConfig, from_dict
from pubswap.data.classification import classification_rows
from pubswap.data.prompt_length import prompt_ids
from pubswap.learner.trainer import GRPOTrainer, Sample
from pubswap.methods.seedflood import zo_step

POS = Sample((5, 6, 7, 8), (40, 41), 1.0)
NEG = Sample((9, 10), (50,), 1.0)
LONG = Sample((5, 6, 7, 8, 9, 10, 11), (60, 61, 62), 1.0)


def trainer(model_dir, policy="lora", **grpo):
    return GRPOTrainer.load(
        str(model_dir), LoraConfig(r=4, alpha=8), GRPOConfig(**grpo), dtype="float32", policy=policy, seed=0
    )


def reference_nll(t, samples) -> torch.Tensor:
    """The label tokens' mean cross-entropy from the model's full logits: F.cross_entropy, no chunks."""
    total, n = 0.0, 0
    for s in samples:
        ids = torch.tensor([list(s.prompt_ids) + list(s.response_ids)])
        logits = t.causal()(input_ids=ids).logits[0, :-1]
        p = len(s.prompt_ids)
        total = total + F.cross_entropy(logits[p - 1 :], ids[0, p:], reduction="sum")
        n += len(s.response_ids)
    return total / n


@pytest.mark.parametrize("budget", [10_000, 9])
def test_a_ce_step_descends_the_label_tokens_cross_entropy(tiny_model_dir, budget):
    """One update (micro-batched or not) is AdamW on the gradient of F.cross_entropy over the label
    tokens only; prompt tokens add nothing."""
    t = trainer(tiny_model_dir, lr=1e-3, grad_epochs=1, grad_clip=1e9, micro_batch_tokens=budget)
    gen = torch.Generator().manual_seed(0)  # B = 0 gives A no gradient: start from a nonzero adapter
    start = {k: torch.randn(v.shape, generator=gen) * 0.1 for k, v in t.adapter().items()}
    t.set_adapter(start)
    samples = [POS, NEG, LONG]
    t.model.train()
    want_loss = reference_nll(t, samples)
    want_loss.backward()
    want = {n: p.grad.clone() for n, p in t.trainable().items()}
    t.set_adapter(start)
    metrics = t.ce_step(samples)
    assert metrics["micro_batches"] == (1 if budget == 10_000 else 3)
    assert metrics["nll"] == pytest.approx(want_loss.item(), rel=1e-5)
    for n, p in t.trainable().items():
        torch.testing.assert_close(p.grad, want[n], atol=1e-6, rtol=1e-4)
    before = float(reference_nll(t, samples))
    for _ in range(5):
        t.ce_step(samples)
    assert float(reference_nll(t, samples)) < before - 0.1


def test_token_nll_divides_by_the_whole_batch():
    logp = torch.tensor([-1.0, -2.0, -3.0])
    assert float(token_nll(logp[:2], 6.0).loss) + float(token_nll(logp[2:], 6.0).loss) == pytest.approx(1.0)


def test_prediction_is_the_most_likely_label_word():
    assert predict([-3.0, -1.0]) == 1 and predict([-1.0, -1.0]) == 0  # the first of equals
    assert accuracy_rewards([[-3.0, -1.0], [-0.5, -2.0]], [("no", "yes"), ("no", "yes")], ["yes", "yes"]) == [
        [1.0],
        [0.0],
    ]
    with pytest.raises(ValueError):
        predict([])


def test_accuracy_follows_the_trained_label(tiny_model_dir):
    """Training the label word 'positive' after a prompt makes it the prediction there (it was not)."""
    t = trainer(tiny_model_dir, lr=5e-3, grad_epochs=1)
    tok = t.tokenizer
    row = classification_rows("sst2", [{"sentence": "a fine film", "label": 1}])[0][0]
    assert row.choices == ("negative", "positive") and row.answer == "positive"
    pid = tuple(prompt_ids(tok, row.prompt, row.context, "chat"))

    def scores():
        words = [tuple(tok(label_text(c, False), add_special_tokens=False)["input_ids"]) for c in row.choices]
        return t.sequence_logprobs([Sample(pid, w, 0.0) for w in words]), words

    (neg, pos), words = scores()
    target = 0 if pos > neg else 1  # train towards the label the untrained model does not predict
    for _ in range(30):
        t.ce_step([Sample(pid, words[target], 1.0)])
    after, _ = scores()
    assert predict(after) == target


def test_a_base_model_scores_the_label_word_after_a_space(base_model_dir):
    tok = AutoTokenizer.from_pretrained(str(base_model_dir))
    assert (
        tok(label_text("no", True), add_special_tokens=False)["input_ids"]
        != tok("no", add_special_tokens=False)["input_ids"]
    )
    assert tok.decode(tok(label_text("no", True), add_special_tokens=False)["input_ids"]) == " no"


@pytest.mark.parametrize("policy", ["full", "lora"])
def test_seedflood_step_on_the_label_loss(tiny_model_dir, policy):
    """SeedFlood's zeroth-order step estimates the slope of the label tokens' NLL along z(seed)."""
    t = trainer(tiny_model_dir, policy=policy)
    if policy == "lora":
        gen = torch.Generator().manual_seed(0)
        t.set_adapter({k: torch.randn(v.shape, generator=gen) * 0.1 for k, v in t.adapter().items()})
    x = t.adapter()
    samples = [POS, NEG]
    eps, lr = 1e-3, 1e-4

    def nll_at(weights) -> float:
        t.load_weights(weights)
        with torch.no_grad():
            return float(reference_nll(t, samples))

    z = direction(17, x)
    plus, minus = nll_at({k: x[k] + eps * z[k] for k in x}), nll_at({k: x[k] - eps * z[k] for k in x})
    slope = (plus - minus) / (2 * eps)
    before = nll_at(x)
    scalar, metrics = zo_step(t, samples, seed=17, eps=eps, lr=lr, objective="label-words")
    assert metrics["projected_grad"] == pytest.approx(slope, rel=1e-3, abs=1e-4)
    assert metrics["nll"] == pytest.approx((plus + minus) / 2, rel=1e-5)  # the loss at x +- eps z
    assert scalar == pytest.approx(lr * slope, rel=1e-3, abs=1e-8)
    after = t.adapter()
    assert float(reference_nll(t, samples)) < before  # a descent step
    t.load_weights(x)
    assert any(not torch.equal(after[k], x[k]) for k in x)


def test_the_objective_is_a_config_choice_with_its_rules():
    cfg = from_dict({"objective": "label-words", "data": {"source": "rte"}, "federation": {"method": "fedavg-grpo"}})
    assert cfg.objective == "label-words" and from_dict({}).objective == "grpo"
    with pytest.raises(ConfigError, match="^objective: label-words needs a classification source"):
        from_dict({"objective": "label-words", "federation": {"method": "fedavg-grpo"}})
    with pytest.raises(ConfigError, match="^objective: label-words has no responses to swap"):
        from_dict({"objective": "label-words", "data": {"source": "sst2"}})
    with pytest.raises(ConfigError, match="^objective: sft has no responses to swap"):
        from_dict({"objective": "sft"})
    assert from_dict({"objective": "sft", "federation": {"method": "dsgd-lora"}}).objective == "sft"
