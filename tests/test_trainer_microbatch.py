"""The memory-bounded step is the full-batch step: micro-batches, chunked log-probs and the whole-batch
token-mean denominator change nothing but the order of floating-point sums."""

import copy

import pytest
import torch

from pubswap.aggregation import FedProx
from pubswap.config import GRPOConfig, LoraConfig
from pubswap.grpo import grpo_loss
from pubswap.logprobs import chunked_token_logprobs
from pubswap.microbatch import padded_tokens, plan_micro_batches
from pubswap.trainer import LoraGRPOTrainer, Sample, pad_batch

TEMP = 0.7


def samples_of_unequal_length() -> list[Sample]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i, (p, r) in enumerate([(3, 1), (9, 40), (5, 7), (4, 23), (8, 2), (6, 15), (3, 31)]):
        prompt = tuple(torch.randint(3, 200, (p,), generator=g).tolist())
        resp = tuple(torch.randint(3, 200, (r,), generator=g).tolist())
        out.append(Sample(prompt, resp, advantage=[1.2, -0.7, 0.4, -1.5, 0.9, 0.0, -0.3][i]))
    return out


@pytest.fixture(scope="module")
def trainer(tiny_model_dir):
    grpo = GRPOConfig(lr=1e-4, grad_epochs=2, kl_coef=0.05, temperature=TEMP, grad_clip=1.0)
    t = LoraGRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=8, alpha=16), grpo, strategy=FedProx(mu=0.5))
    torch.manual_seed(3)  # a non-zero B, so policy and reference differ from the first step on
    start = {k: torch.randn_like(v) * 0.05 for k, v in t.adapter().items()}
    t.set_adapter(start)
    return t


def direct_logprobs(model, samples, pad_id, temperature):
    """The textbook way: the whole batch's [B, T, vocab] logits, log-softmax, gather."""
    ids, attn, mask = pad_batch(samples, pad_id)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1), mask


def full_batch_step(t: LoraGRPOTrainer, samples, start):
    """Reference update: one forward over the padded batch per epoch, loss + FedProx penalty, clip, AdamW."""
    g = t.grpo
    t.set_adapter(start)
    model = t.model
    adv = torch.tensor([s.advantage for s in samples])
    with torch.no_grad():
        old, mask = direct_logprobs(model, samples, t.pad_id, g.temperature)
        with model.disable_adapter():
            ref, _ = direct_logprobs(model, samples, t.pad_id, g.temperature)
    params = list(t.trainable().values())
    opt = torch.optim.AdamW(params, lr=g.lr, weight_decay=g.weight_decay)
    losses = []
    for _ in range(g.grad_epochs):
        logp, _ = direct_logprobs(model, samples, t.pad_id, g.temperature)
        out = grpo_loss(logp, old, ref, adv, mask, clip_low=g.clip_low, clip_high=g.clip_high,
                        log_ratio_clamp=g.log_ratio_clamp, kl_coef=g.kl_coef)
        loss = out.loss + t.strategy.client_penalty(t._lora_params_by_adapter_key(), t.anchor)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, g.grad_clip)
        opt.step()
        losses.append(loss.item())
    grads = {n: p.grad.clone() for n, p in t.trainable().items()}
    return t.adapter(), losses[-1], grads


@pytest.mark.parametrize("budget", [10_000, 80, 45, 1])
def test_micro_batched_step_equals_full_batch_step(trainer, budget):
    samples = samples_of_unequal_length()
    start = trainer.adapter()
    want, want_loss, want_grads = full_batch_step(trainer, samples, start)

    trainer.set_adapter(start)
    trainer.grpo.micro_batch_tokens = budget
    metrics = trainer.step(samples)
    got = trainer.adapter()
    grads = {n: p.grad.clone() for n, p in trainer.trainable().items()}  # the last epoch's, clipped
    trainer.set_adapter(start)

    expected_mbs = len(plan_micro_batches([len(s) for s in samples], budget))
    assert metrics["micro_batches"] == expected_mbs
    if budget == 1:
        assert expected_mbs == len(samples)  # one sample per micro-batch
    assert metrics["loss"] == pytest.approx(want_loss, abs=1e-6)
    assert any(not torch.equal(start[k], got[k]) for k in got)  # the step did move the adapter
    for n in want_grads:  # the accumulated gradient is the full-batch gradient
        torch.testing.assert_close(grads[n], want_grads[n], atol=1e-6, rtol=1e-4)
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=1e-6, rtol=0)


@pytest.mark.parametrize("chunk", [1, 7, 4096])
@pytest.mark.parametrize("use_adapter", [True, False])
def test_chunked_logprobs_equal_direct_logprobs(trainer, chunk, use_adapter):
    samples = samples_of_unequal_length()
    trainer.grpo.logprob_chunk, trainer.grpo.micro_batch_tokens = chunk, 60
    got = trainer.response_logprobs(samples, TEMP, use_adapter=use_adapter)
    with torch.no_grad():
        if use_adapter:
            direct, mask = direct_logprobs(trainer.model, samples, trainer.pad_id, TEMP)
        else:
            with trainer.model.disable_adapter():
                direct, mask = direct_logprobs(trainer.model, samples, trainer.pad_id, TEMP)
    for i, s in enumerate(samples):
        want = direct[i][mask[i] > 0]
        assert got[i].shape == (len(s.response_ids),)
        torch.testing.assert_close(got[i], want, atol=1e-5, rtol=0)


def test_chunked_logprob_gradient_equals_direct_gradient():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    h = torch.randn(23, 16, requires_grad=True)
    targets = torch.randint(0, 50, (23,))
    weights = torch.randn(23)
    (chunked_token_logprobs(h, targets, head, 0.7, chunk=5) * weights).sum().backward()
    g_chunked = h.grad.clone()
    h.grad = None
    direct = torch.log_softmax(head(h).float() / 0.7, -1).gather(-1, targets[:, None]).squeeze(-1)
    (direct * weights).sum().backward()
    torch.testing.assert_close(g_chunked, h.grad, atol=1e-6, rtol=0)


def test_plan_bounds_padded_tokens_and_groups_similar_lengths():
    lengths = [3000, 40, 3072, 100, 2900, 50, 60, 3050]
    plan = plan_micro_batches(lengths, 6200)
    assert sorted(i for g in plan for i in g) == list(range(len(lengths)))
    for group in plan:
        assert len(group) * max(lengths[i] for i in group) <= 6200 or len(group) == 1
    # long and short sequences never share a micro-batch, so padding stays small
    assert padded_tokens(lengths, plan) <= 1.05 * sum(lengths)
    assert plan_micro_batches([10, 20], 5) == [[1], [0]]  # over-long sequences: one per micro-batch
    with pytest.raises(ValueError):
        plan_micro_batches([1], 0)


def test_device_placement_and_dtypes(tiny_model_dir):
    t = LoraGRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=4, alpha=8), GRPOConfig(), dtype="bfloat16",
                             device="cpu")
    base = [p for p in t.model.parameters() if not p.requires_grad]
    lora = list(t.trainable().values())
    assert {p.dtype for p in base} == {torch.bfloat16} and {p.dtype for p in lora} == {torch.float32}
    assert {p.device.type for p in t.model.parameters()} == {"cpu"}
    mb = t.micro_batches(samples_of_unequal_length()[:2])[0]
    assert mb.ids.device == t.device and mb.advantages.dtype == torch.float32
    t.step(samples_of_unequal_length()[:3])
    state = [s for group in t.optimizer.state.values() for s in group.values() if torch.is_tensor(s) and s.dim()]
    assert state and {s.dtype for s in state} == {torch.float32}
    assert copy.deepcopy(t.adapter()).keys() == t.anchor.keys()
