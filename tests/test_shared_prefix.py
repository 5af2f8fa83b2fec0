"""Shared-prefix GRPO passes compute what one row per response computes: the same per-token log-probs,
loss, gradients and update, on ragged groups, with swapped-in responses, across micro-batch boundaries,
for LoRA and full-parameter policies; only the tokens computed differ."""

import pytest
import torch

from pubswap.algorithms.aggregation import FedProx
from pubswap.config import GRPOConfig, LoraConfig
from pubswap.learner import shared_prefix
from pubswap.learner.trainer import GRPOTrainer, Sample


def ragged_groups(seed: int = 0) -> list[Sample]:
    """Three prompts of different lengths with 4, 1 and 3 responses of different lengths; a group's
    responses come from several clients (swapped ones carry the donor's sampling log-probs)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for p, lens in [(11, (5, 1, 9, 3)), (4, (7,)), (17, (2, 12, 6))]:
        prompt = tuple(torch.randint(3, 200, (p,), generator=g).tolist())
        for j, r in enumerate(lens):
            resp = tuple(torch.randint(3, 200, (r,), generator=g).tolist())
            adv = float(torch.randn((), generator=g))
            behaviour = tuple((-torch.rand(r, generator=g) * 3).tolist())
            out.append(Sample(prompt, resp, advantage=adv, origin=j % 2, behaviour_logprobs=behaviour))
    return out


def make(tiny_model_dir, shared: bool, policy: str = "lora", budget: int = 16384, ckpt: bool = False, **grpo):
    settings = dict(lr=1e-3, grad_epochs=2, kl_coef=0.05, temperature=0.7, tis_cap=2.0, mini_batch_size=0, b=3, K=2)
    settings.update(grpo)
    cfg = GRPOConfig(
        **settings, micro_batch_tokens=budget, shared_prefix=shared, gradient_checkpointing=ckpt, logprob_chunk=7
    )
    t = GRPOTrainer.load(
        str(tiny_model_dir),
        LoraConfig(r=4, alpha=8, dropout=0.0),
        cfg,
        strategy=FedProx(mu=0.5) if policy == "lora" else None,
        seed=0,
        policy=policy,
    )
    torch.manual_seed(3)  # a non-zero B, so the adapter and the reference differ
    t.set_adapter({k: v + torch.randn_like(v) * 0.05 for k, v in t.adapter().items()})
    return t


def per_row(t: GRPOTrainer, samples, shared: bool, grad: bool = False):
    """Each row's per-token log-probs (temperature 0.7) through `shared` or padded micro-batches."""
    out = [None] * len(samples)
    mbs = t.micro_batches(samples, shared)
    with torch.set_grad_enabled(grad):
        for mb in mbs:
            for i, part in zip(mb.index, torch.split(t.logprobs(mb, 0.7), mb.lengths)):
                out[i] = part
    return out, mbs


def test_pack_layout():
    row = shared_prefix.pack([((5, 6, 7), [(8, 9), (10,)]), ((11,), [(12, 13, 14)])])
    assert row.ids.tolist() == [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14]]
    assert row.position_ids.tolist() == [[0, 1, 2, 3, 4, 3, 0, 1, 2, 3]]  # each response continues its prompt
    # response tokens are scored by the prompt's last position first, then by their own previous token
    assert row.score_at.tolist() == [2, 3, 2, 6, 7, 8]
    assert row.targets.tolist() == [8, 9, 10, 12, 13, 14]
    assert [(g.offset, g.prompt_len, g.response_lens) for g in row.groups] == [(0, 3, (2, 1)), (6, 1, (3,))]
    with pytest.raises(ValueError, match="non-empty responses"):
        shared_prefix.pack([((1,), [()])])


@pytest.mark.parametrize("budget", [16384, 30])  # one packed row; groups cut between responses and rows
def test_logprobs_and_gradients_equal_the_unshared_rows(tiny_model_dir, budget):
    t = make(tiny_model_dir, shared=True, budget=budget)
    samples = ragged_groups()
    shared, mbs = per_row(t, samples, True, grad=True)
    padded, _ = per_row(t, samples, False, grad=True)
    assert all(a.shape == b.shape for a, b in zip(shared, padded))
    torch.testing.assert_close(torch.cat(shared), torch.cat(padded), rtol=0, atol=2e-5)
    if budget == 30:
        assert len(mbs) > 2 and sum(mb.packed.ids.shape[1] for mb in mbs) < sum(map(len, samples))
    # gradients of a weighted token sum: through the prompt positions that K responses share
    w = [torch.linspace(-1, 1, len(x)) for x in shared]
    grads = []
    for lps in (shared, padded):
        t.optimizer.zero_grad(set_to_none=True)
        sum((x * wi).sum() for x, wi in zip(lps, w)).backward()
        grads.append({n: p.grad.clone() for n, p in t.trainable().items()})
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], rtol=1e-4, atol=1e-6)


def test_one_packed_row_computes_each_prompt_once(tiny_model_dir):
    t = make(tiny_model_dir, shared=True)
    samples = ragged_groups()
    (mb,) = t.micro_batches(samples, True)
    prompts = {s.prompt_ids for s in samples}
    assert mb.packed.ids.shape[1] == sum(map(len, prompts)) + sum(len(s.response_ids) for s in samples)
    assert mb.index == list(range(len(samples)))  # group-major, as the step's samples come


@pytest.mark.parametrize(
    "policy,ckpt,extra",
    [
        ("lora", False, {}),
        ("lora", True, {"mini_batch_size": 1, "b": 3}),  # checkpointing recomputes the layers with the layout
        ("full", False, {"entropy_coef": 0.01}),
    ],
)
def test_a_step_is_the_unshared_step(tiny_model_dir, policy, ckpt, extra):
    """Old, reference and training passes: the metrics and the trained weights of a whole step
    (swapped responses with truncated IS, KL, clipping, AdamW) equal those of one row per response."""
    samples = ragged_groups(1)
    results = []
    for shared in (True, False):
        t = make(tiny_model_dir, shared=shared, policy=policy, budget=40, ckpt=ckpt, **extra)
        assert t.shared_prefix is shared
        metrics = t.step(samples, owner=0)
        results.append((metrics, t.adapter()))
    (m1, a1), (m0, a0) = results
    for k in ("loss", "pg_loss", "kl", "clip_frac", "entropy", "grad_norm", "nll_own", "nll_swapped"):
        assert m1[k] == pytest.approx(m0[k], rel=1e-4, abs=1e-6), k
    assert m1["nll_swapped"] > 0 and m1["kl"] != 0
    for k in a0:  # AdamW turns rounding of near-zero gradients into up to a few % of a step (lr 1e-3)
        torch.testing.assert_close(a1[k], a0[k], rtol=1e-4, atol=5e-5)
    assert any(not torch.equal(a0[k], make(tiny_model_dir, False, policy).adapter()[k]) for k in a0)  # it trained


def test_other_forwards_are_unchanged(tiny_model_dir):
    """Evaluation and the unshared path run the model's own SDPA attention after the switch."""
    t = make(tiny_model_dir, shared=True)
    samples = ragged_groups()
    before = t.response_logprobs(samples, 0.7)
    t.step(samples[:4], owner=0)  # switches the attention implementation
    assert t.causal().config._attn_implementation == shared_prefix.ATTENTION
    t.set_adapter(t.anchor)
    after = t.response_logprobs(samples, 0.7)
    for a, b in zip(before, after):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_models_without_sdpa_keep_one_row_per_response(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32, attn_implementation="eager")
    assert not shared_prefix.supported(base)
    t = GRPOTrainer(base, LoraConfig(r=4, alpha=8), GRPOConfig(K=2, b=3))
    assert not t.shared_prefix
    metrics = t.step(ragged_groups(), owner=0)
    assert metrics["micro_batches"] >= 1 and t.causal().config._attn_implementation == "eager"
