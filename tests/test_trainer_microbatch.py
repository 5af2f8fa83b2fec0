"""The memory-bounded step is the full-batch step: micro-batches, chunked log-probs and the whole-batch
token-mean denominator change nothing but the order of floating-point sums."""

import copy

import pytest
import torch

from pubswap.algorithms.aggregation import FedProx
from pubswap.algorithms.grpo import grpo_loss
from pubswap.config import GRPOConfig, LoraConfig
from pubswap.learner.logprobs import chunked_token_logprobs
from pubswap.learner.microbatch import padded_tokens, plan_micro_batches
from pubswap.learner.trainer import GRPOTrainer, Sample, pad_batch

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
    # the padded rows' planner (shared-prefix packing equals it: tests/test_shared_prefix.py)
    grpo = GRPOConfig(lr=1e-4, grad_epochs=2, kl_coef=0.05, temperature=TEMP, grad_clip=1.0, shared_prefix=False)
    t = GRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=8, alpha=16), grpo, strategy=FedProx(mu=0.5))
    torch.manual_seed(3)  # a non-zero B, so policy and reference differ from the first step on
    start = {k: torch.randn_like(v) * 0.05 for k, v in t.adapter().items()}
    t.set_adapter(start)
    return t


def direct_logprobs(model, samples, pad_id, temperature):
    """The textbook way: the whole batch's [B, T, vocab] logits, log-softmax, gather."""
    ids, attn, mask = pad_batch(samples, pad_id)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1), mask


def full_batch_step(t: GRPOTrainer, samples, start, mini_batches=None):
    """Reference update: per epoch and mini-batch (default: the whole batch) one forward over the padded
    mini-batch, loss + FedProx penalty, clip, AdamW. Returns the adapter, the mean loss, the last grads."""
    g = t.grpo
    t.set_adapter(start)
    model = t.model
    parts = []
    for r in mini_batches or [range(len(samples))]:
        rows = [samples[i] for i in r]
        with torch.no_grad():
            old, mask = direct_logprobs(model, rows, t.pad_id, g.temperature)
            with model.disable_adapter():
                ref, _ = direct_logprobs(model, rows, t.pad_id, g.temperature)
        parts.append((rows, old, ref, mask, torch.tensor([s.advantage for s in rows])))
    params = list(t.trainable().values())
    opt = torch.optim.AdamW(params, lr=g.lr, weight_decay=g.weight_decay)
    losses = []
    for _ in range(g.grad_epochs):
        for rows, old, ref, mask, adv in parts:
            logp, _ = direct_logprobs(model, rows, t.pad_id, g.temperature)
            out = grpo_loss(
                logp,
                old,
                ref,
                adv,
                mask,
                clip_low=g.clip_low,
                clip_high=g.clip_high,
                clip_ratio_c=g.clip_ratio_c,
                log_ratio_clamp=g.log_ratio_clamp,
                kl_coef=g.kl_coef,
            )
            loss = out.loss
            if t.strategy is not None:
                loss = loss + t.strategy.client_penalty(t._lora_params_by_adapter_key(), t.anchor)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, g.grad_clip)
            opt.step()
            losses.append(loss.item())
    grads = {n: p.grad.clone() for n, p in t.trainable().items()}
    return t.adapter(), sum(losses) / len(losses), grads


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
    # AdamW's early updates are about lr * g / |g| per entry (lr 1e-4 here): an entry whose gradient is
    # near zero and differs in its last bits moves a few 1e-6 differently (seen on one CPU: 1.004e-6)
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=5e-6, rtol=0)


def test_mini_batches_make_one_update_each(trainer):
    """grpo.mini_batch_size: grad_epochs x (batch / mini-batch) AdamW updates, each the token-mean loss of
    its own mini-batch (VERL's ppo_mini_batch_size), equal to a direct per-mini-batch reference."""
    samples = samples_of_unequal_length()
    start = trainer.adapter()
    g = trainer.grpo
    saved = (g.K, g.mini_batch_size, g.micro_batch_tokens)
    try:
        g.K, g.mini_batch_size, g.micro_batch_tokens = 1, 3, 45  # 7 samples -> mini-batches of 3, 3, 1
        ranges = trainer.mini_batches(len(samples))
        assert [list(r) for r in ranges] == [[0, 1, 2], [3, 4, 5], [6]]
        want, want_loss, _ = full_batch_step(trainer, samples, start, ranges)
        trainer.set_adapter(start)
        metrics = trainer.step(samples)
        got = trainer.adapter()
        assert metrics["updates"] == 2 * 3 and metrics["skipped_updates"] == 0
        assert metrics["loss"] == pytest.approx(want_loss, abs=1e-6)
        for k in want:
            torch.testing.assert_close(got[k], want[k], atol=1e-6, rtol=0)
        whole, _, _ = full_batch_step(trainer, samples, start)  # one full-batch update per epoch differs
        assert any(not torch.allclose(whole[k], want[k], atol=1e-6) for k in want)
    finally:
        g.K, g.mini_batch_size, g.micro_batch_tokens = saved
        trainer.set_adapter(start)


def test_non_finite_gradient_skips_the_update(trainer):
    start = trainer.adapter()
    samples = samples_of_unequal_length()
    samples[2] = Sample(samples[2].prompt_ids, samples[2].response_ids, advantage=float("nan"))
    trainer.set_adapter(start)
    metrics = trainer.step(samples)
    got = trainer.adapter()
    assert metrics["skipped_updates"] == metrics["updates"] == trainer.grpo.grad_epochs
    for k in start:
        assert torch.equal(got[k], start[k])  # bitwise unchanged: no NaN reached the weights
    assert not any(trainer.optimizer.state)  # nor the AdamW moments
    trainer.set_adapter(start)


def test_old_and_reference_logprobs_use_eval_mode_so_the_first_ratio_is_one(tiny_model_dir):
    """With LoRA dropout 0.1 the old log-probs are the current policy's without dropout: recomputing them
    gives exactly the same values (ratio exactly 1), while a train-mode forward (dropout on) does not."""
    t = GRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=8, alpha=16, dropout=0.1), GRPOConfig(kl_coef=0.1))
    torch.manual_seed(3)
    t.set_adapter({k: torch.randn_like(v) * 0.05 for k, v in t.adapter().items()})
    samples = samples_of_unequal_length()
    mbs = t.micro_batches(samples)
    old = t._frozen_logprobs(mbs, TEMP, use_adapter=True)
    again = t._frozen_logprobs(mbs, TEMP, use_adapter=True)
    assert all(torch.equal(torch.exp(a - b), torch.ones_like(a)) for a, b in zip(again, old))
    t.model.train()
    with torch.no_grad():
        dropped = [t.logprobs(mb, TEMP) for mb in mbs]
    t.model.eval()
    assert any(not torch.allclose(d, o) for d, o in zip(dropped, old))  # dropout is live in train mode
    assert not t.model.training  # the trainer is left in eval mode


@pytest.mark.parametrize("mini", [0, 2])
def test_zero_advantage_rows_are_skipped_and_the_step_is_unchanged(tiny_model_dir, mini):
    """With no KL and no entropy term, rows of zero advantage add nothing but their tokens to the
    token-mean's denominator: they are not trained, and the step equals the full-batch one. mini 2 (x K
    2 = 4 rows a mini-batch): the first mini-batch is all such rows, and AdamW still makes its
    (zero-gradient) update there."""
    grpo = GRPOConfig(lr=1e-3, grad_epochs=2, kl_coef=0.0, temperature=TEMP, K=2, mini_batch_size=mini)
    t = GRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=8, alpha=16), grpo)
    torch.manual_seed(3)
    start = {k: torch.randn_like(v) * 0.05 for k, v in t.adapter().items()}
    adv = [0.0, 0.0, 0.0, 0.0, 0.9, 0.0, -0.3] if mini else [1.2, 0.0, 0.4, 0.0, 0.0, 0.0, -0.3]
    samples = [Sample(s.prompt_ids, s.response_ids, a) for s, a in zip(samples_of_unequal_length(), adv)]
    ranges = [range(0, 4), range(4, 7)] if mini else None
    # the reference's first mini-batch of 4 zero-gradient updates moves nothing but AdamW's step count:
    # then its second mini-batch's update differs from a fresh AdamW's (bias correction)
    want, _, want_grads = full_batch_step(t, samples, start, ranges)
    t.set_adapter(start)
    metrics = t.step(samples)
    got = t.adapter()
    for n, p in t.trainable().items():  # the last update's gradient, over the trained rows only
        torch.testing.assert_close(p.grad, want_grads[n], atol=1e-6, rtol=1e-4)
    assert metrics["inert_frac"] == pytest.approx(adv.count(0.0) / 7)
    assert metrics["updates"] == 2 * (2 if mini else 1)
    assert metrics["micro_batches"] == (1 if mini else 1)  # only the trained rows are planned
    assert any(not torch.equal(start[k], got[k]) for k in got)
    # AdamW's steps are about lr per entry whatever the gradient's size, so rounding in a near-zero
    # gradient entry can move its weight by a few percent of lr (1e-5 seen at lr 1e-3)
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=0.05 * grpo.lr, rtol=0)


def test_entropy_is_logged_and_its_bonus_raises_entropy(tiny_model_dir):
    def entropy_after(coef):
        t = GRPOTrainer.load(
            str(tiny_model_dir),
            LoraConfig(r=8, alpha=16),
            GRPOConfig(lr=1e-2, grad_epochs=1, kl_coef=0.0, entropy_coef=coef),
        )
        torch.manual_seed(3)
        t.set_adapter({k: torch.randn_like(v) * 0.05 for k, v in t.adapter().items()})
        zero_adv = [Sample(s.prompt_ids, s.response_ids, 0.0) for s in samples_of_unequal_length()]
        first = t.step(zero_adv)["entropy"]
        for _ in range(3):
            t.step(zero_adv)
        return first, t.step(zero_adv)["entropy"]

    start, without_bonus = entropy_after(0.0)
    start_b, with_bonus = entropy_after(1.0)
    assert start == pytest.approx(start_b) and start > 0  # the token entropy is reported either way
    assert without_bonus == pytest.approx(start, rel=1e-3)  # zero advantages, no bonus: nothing moves it
    assert with_bonus > start + 1e-3  # the bonus (entropy_coef > 0) raises it


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
    t = GRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=4, alpha=8), GRPOConfig(), dtype="bfloat16", device="cpu")
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


def test_truncated_is_weights_only_swapped_in_responses(trainer):
    """grpo.tis_cap: a swapped-in response (origin != owner) is weighted per token by min(pi_old / pi_donor,
    cap). Donor log-probs equal to the local ones (weight 1) leave the update as without TIS; donor
    log-probs far above the local ones (weight ~0) make it the update without those responses."""
    start = trainer.adapter()
    base = samples_of_unequal_length()
    old = trainer.response_logprobs(base, TEMP)
    swapped = {1, 4}

    def with_donor(logps):
        return [
            Sample(
                s.prompt_ids,
                s.response_ids,
                s.advantage,
                origin=1 if i in swapped else 0,
                behaviour_logprobs=tuple(logps[i].tolist()) if i in swapped else (),
            )
            for i, s in enumerate(base)
        ]

    def update(samples, cap):
        trainer.set_adapter(start)
        trainer.grpo.tis_cap = cap
        try:
            metrics = trainer.step(samples, owner=0)
        finally:
            trainer.grpo.tis_cap = 0.0
        return trainer.adapter(), metrics

    plain, m = update(with_donor(old), 0.0)
    assert m["nll_swapped"] == pytest.approx(-float(torch.cat([old[i] for i in swapped]).mean()), rel=1e-5)
    same, _ = update(with_donor(old), 2.0)
    for k in plain:
        torch.testing.assert_close(same[k], plain[k], atol=1e-7, rtol=0)
    confident = [lp + 30.0 if i in swapped else lp for i, lp in enumerate(old)]  # donor far surer: weight e^-20
    weighted, _ = update(with_donor(confident), 2.0)
    assert any(not torch.allclose(weighted[k], plain[k], atol=1e-6) for k in plain)
    # policy-gradient-wise the swapped responses now count for ~nothing; their tokens still enter the KL term
    # and the token-mean's denominator, so compare against zero-advantage copies of them
    muted = [
        Sample(s.prompt_ids, s.response_ids, 0.0 if i in swapped else s.advantage, s.origin)
        for i, s in enumerate(with_donor(old))
    ]
    expected, _ = update(muted, 0.0)
    for k in plain:
        torch.testing.assert_close(weighted[k], expected[k], atol=1e-6, rtol=0)
    trainer.set_adapter(start)
