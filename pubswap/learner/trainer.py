"""One client's GRPO learner: a PEFT LoRA model on the shared base, trained on scored responses.

No Ray and no vLLM here: the rollout engine lives in the actor. A step takes responses with their
advantages, from the client itself or (PubSwap) from other clients, and:

  1. recomputes "old" log-probs under the current local policy for every response, in eval mode (no
     LoRA dropout), so the ratio starts at 1 for on- and off-policy responses alike (as VERL does);
  2. computes reference log-probs with the adapter disabled (KL to the base model), also in eval mode;
  3. runs `grad_epochs` passes over the step's batch in mini-batches of `grpo.mini_batch_size` prompts
     (VERL's ppo_epochs x ppo_mini_batch_size; default one mini-batch: the whole batch), one AdamW
     update per mini-batch of the GRPO loss (+ the strategy's client penalty, e.g. FedProx's
     (mu/2)||theta - theta_global||^2), clipping the gradient norm. An update whose gradient norm is
     not finite is skipped (weights and AdamW moments unchanged) and counted.

Off-policy responses (PubSwap's swapped-in ones) are measured by their per-token NLL under the local
model (`nll_swapped`, beside `nll_own`); with `grpo.tis_cap` > 0 their policy loss is weighted per
token by min(pi_local / pi_donor, tis_cap), pi_donor being the donor engine's sampling log-probs.

Memory is bounded by `grpo.micro_batch_tokens`, not by the batch: each update accumulates gradients
over micro-batches (pubswap.learner.microbatch), and log-probs come from hidden states in chunks of positions
(pubswap.learner.logprobs), so no [batch, tokens, vocab] tensor exists. The update is still exactly the
full-batch token-mean loss: every micro-batch's token sum is divided by the number of response tokens
of the WHOLE batch, so the micro-batch losses add up to the full-batch loss (only the order of the
floating-point sums differs).

Device: the trainer runs on `device` (default: the GPU Ray assigned to the actor, else the CPU). The
base weights stay in the model dtype (bf16 on GPUs); LoRA weights, their gradients and the AdamW state
are fp32. Adapters leave the trainer as CPU tensors (`adapter()`), for the engine and the average.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from pubswap.algorithms.aggregation.base import AggregationStrategy
from pubswap.algorithms.cross_entropy import token_nll
from pubswap.algorithms.grpo import grpo_loss, off_policy, truncated_is_weights
from pubswap.config import GRPOConfig, LoraConfig
from pubswap.learner import shared_prefix
from pubswap.learner.gpu_budget import nograd_micro_batch_tokens
from pubswap.learner.logprobs import chunked_token_logprobs
from pubswap.learner.microbatch import plan_micro_batches
from pubswap.learner.policy import POLICIES
from pubswap.lora import Adapter, components

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Sample:
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    advantage: float
    origin: int = -1  # client that generated the response (-1: unknown)
    behaviour_logprobs: tuple[float, ...] = ()  # the sampling engine's log-probs of response_ids, if known

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def pad_batch(samples: Sequence[Sample], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """input_ids, attention_mask [B, T] right-padded, and the response mask [B, T-1] aligned with
    next-token log-probs (position t scores token t+1)."""
    T = max(len(s) for s in samples)
    ids = torch.full((len(samples), T), pad_id, dtype=torch.long)
    attn = torch.zeros((len(samples), T), dtype=torch.long)
    resp = torch.zeros((len(samples), T - 1), dtype=torch.float32)
    for i, s in enumerate(samples):
        seq = list(s.prompt_ids) + list(s.response_ids)
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        p = len(s.prompt_ids)
        resp[i, p - 1 : len(seq) - 1] = 1.0
    return ids, attn, resp


@dataclass
class MicroBatch:
    """Rows `index` of a step on the trainer's device: padded rows (`mask` marks the scored positions),
    or with `packed` one shared-prefix row of their groups (pubswap/learner/shared_prefix.py)."""

    index: list[int]
    ids: Tensor  # [n, T]
    attn: Tensor | None  # [n, T]
    mask: Tensor | None  # [n, T-1] bool: position t scores token t+1, a response token
    advantages: Tensor  # [N] fp32: each scored token's sequence advantage (N = mask.sum())
    lengths: list[int]  # response tokens per row
    packed: shared_prefix.PackedRow | None = None

    @property
    def tokens(self) -> int:
        return sum(self.lengths)


def default_device() -> torch.device:
    """The GPU Ray assigned to this process (CUDA_VISIBLE_DEVICES makes it cuda:0), else the CPU."""
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


class GRPOTrainer:
    def __init__(
        self,
        base_model,
        lora: LoraConfig,
        grpo: GRPOConfig,
        pad_id: int = 0,
        strategy: AggregationStrategy | None = None,
        seed: int = 0,
        base_model_name: str = "",
        device: torch.device | str | None = None,
        policy: str = "lora",
    ):
        """`base_model`: a transformers causal LM; `policy` (pubswap/learner/policy.py): "lora" trains
        LoRA layers on it, "full" every weight. Use `load` for a folder."""
        torch.manual_seed(seed)
        self.grpo = grpo
        self.strategy = strategy
        self.rank: int | None = None  # the active client's rank when below the adapters' (FlexLoRA); None: all
        self.pad_id = pad_id
        self.device = torch.device(device) if device is not None else default_device()
        base_model.config.use_cache = False
        base_model.to(self.device)
        model_dtype = base_model.get_input_embeddings().weight.dtype
        self.policy = POLICIES[policy]()
        self.model, self.lora_config = self.policy.build(base_model, lora, base_model_name, strategy, grpo.kl_coef)
        ckpt = grpo.gradient_checkpointing if grpo.gradient_checkpointing is not None else self.device.type == "cuda"
        if ckpt:
            # non-reentrant checkpointing needs no input grads (the embeddings are frozen)
            self.causal().gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.gradient_checkpointing = ckpt
        autocast = grpo.lora_autocast if grpo.lora_autocast is not None else self.device.type == "cuda"
        low = model_dtype in (torch.bfloat16, torch.float16) and policy == "lora"
        self.autocast_dtype = model_dtype if autocast and low else None  # LoRA's compute dtype (None: fp32)
        # the no-grad passes (old policy, reference) hold one layer's activations: larger micro-batches
        self.nograd_tokens = grpo.nograd_micro_batch_tokens or nograd_micro_batch_tokens(
            self.causal().config,
            self.causal().get_input_embeddings().weight.element_size(),
            ckpt,
            grpo.micro_batch_tokens,
        )
        self.shared_prefix = grpo.shared_prefix and shared_prefix.supported(self.causal())
        self.model.eval()
        self.anchor: Adapter = self.adapter()  # round-start global adapter (CPU)
        self._anchor_dev: dict[str, Tensor] = self._penalty_anchor()
        self.reset_optimizer()

    @classmethod
    def load(
        cls,
        model_dir: str,
        lora: LoraConfig,
        grpo: GRPOConfig,
        dtype: str = "float32",
        strategy: AggregationStrategy | None = None,
        seed: int = 0,
        device: torch.device | str | None = None,
        policy: str = "lora",
    ) -> GRPOTrainer:
        """A trainer on the model and tokenizer in `model_dir`; `.tokenizer` is set."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype])
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        trainer = cls(
            base,
            lora,
            grpo,
            pad_id=pad,
            strategy=strategy,
            seed=seed,
            base_model_name=model_dir,
            device=device,
            policy=policy,
        )
        trainer.tokenizer = tokenizer
        return trainer

    # --- adapter state ------------------------------------------------------------------------

    def _on_device(self, adapter: Adapter) -> dict[str, Tensor]:
        return {k: v.detach().to(self.device, torch.float32, copy=True) for k, v in adapter.items()}

    def _penalty_anchor(self) -> dict[str, Tensor]:
        """The anchor on the device, for the strategy's client penalty (none without a strategy)."""
        return self._on_device(self.anchor) if self.strategy is not None else {}

    def trainable(self) -> dict[str, Tensor]:
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    def new_optimizer(self) -> torch.optim.Optimizer:
        """A fresh AdamW over the live LoRA parameters (its moments are created at its first step)."""
        g = self.grpo
        return torch.optim.AdamW(list(self.trainable().values()), lr=g.lr, weight_decay=g.weight_decay)

    def reset_optimizer(self) -> None:
        self.optimizer = self.new_optimizer()

    def activate(self, adapter: Adapter, optimizer: torch.optim.Optimizer) -> None:
        """Switch to another client's state: its LoRA weights become the live ones, its optimizer (from
        `new_optimizer`, over the same parameter objects, with that client's moments) steps them."""
        self.load_weights(adapter)
        self.optimizer = optimizer

    def set_adapter(self, adapter: Adapter, reset_optimizer: bool = True) -> None:
        """Load the (global) adapter; it becomes the anchor of the client penalty. Optimizer reset per round."""
        self.load_weights({k: v.float() for k, v in adapter.items()})
        self.anchor = {k: v.detach().to("cpu", torch.float32, copy=True) for k, v in adapter.items()}
        self._anchor_dev = self._penalty_anchor()
        if reset_optimizer:
            self.reset_optimizer()

    def adapter(self) -> Adapter:
        """The live trained weights (LoRA's, or every weight) as detached fp32 CPU tensors."""
        return self.policy.weights()

    def load_weights(self, adapter: Adapter) -> None:
        """Copy `adapter` (every trained tensor) into the live weights."""
        self.policy.load(adapter)

    # --- log-probs ----------------------------------------------------------------------------

    def micro_batches(self, samples: Sequence[Sample], shared: bool = False, budget: int = 0) -> list[MicroBatch]:
        """The samples cut into micro-batches of at most `budget` tokens (0: `grpo.micro_batch_tokens`, the
        training passes'): padded rows, or with `shared` packed shared-prefix rows (each prompt once per
        micro-batch)."""
        budget = budget or self.grpo.micro_batch_tokens
        if shared:
            return self._packed_micro_batches(samples, budget)
        plan = plan_micro_batches([len(s) for s in samples], budget)
        out = []
        for index in plan:
            rows = [samples[i] for i in index]
            ids, attn, mask = pad_batch(rows, self.pad_id)
            out.append(
                MicroBatch(
                    index, ids.to(self.device), attn.to(self.device), mask.bool().to(self.device), *self._adv(rows)
                )
            )
        return out

    def _lora_compute(self):
        """The decoder's forward context: with `autocast_dtype`, autocast to it, and PEFT's LoRA layers
        not casting their inputs to fp32, so LoRA's matmuls and saved activations are in the model dtype
        while its weights (cast on the fly), gradients and AdamW state stay fp32. Gradient checkpointing
        recomputes under the same autocast (torch.utils.checkpoint keeps it)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        from peft.helpers import disable_input_dtype_casting

        stack = contextlib.ExitStack()
        stack.enter_context(torch.autocast(self.device.type, dtype=self.autocast_dtype))
        stack.enter_context(disable_input_dtype_casting(self.model))
        return stack

    def _adv(self, rows: Sequence[Sample]) -> tuple[Tensor, list[int]]:
        """Each response token's advantage [N] (on the device) and the rows' response lengths."""
        lengths = [len(s.response_ids) for s in rows]
        adv = torch.repeat_interleave(
            torch.tensor([s.advantage for s in rows], dtype=torch.float32), torch.tensor(lengths)
        )
        return adv.to(self.device), lengths

    def _packed_micro_batches(self, samples: Sequence[Sample], budget: int) -> list[MicroBatch]:
        """Shared-prefix micro-batches: samples with equal prompts form a group (in order of first
        appearance); a group longer than the budget is cut between responses (its prompt repeated);
        groups fill a packed row, in order, while prompt + responses tokens fit the budget."""
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, s in enumerate(samples):
            groups.setdefault(s.prompt_ids, []).append(i)
        units: list[list[int]] = []  # sample indices sharing one prompt copy
        for prompt, members in groups.items():
            unit: list[int] = []
            for i in members:
                size = len(prompt) + sum(len(samples[j].response_ids) for j in unit + [i])
                if unit and size > budget:
                    units.append(unit)
                    unit = []
                unit.append(i)
            units.append(unit)

        def length(unit: list[int]) -> int:
            return len(samples[unit[0]].prompt_ids) + sum(len(samples[i].response_ids) for i in unit)

        plans: list[list[list[int]]] = []
        for unit in units:
            if plans and sum(map(length, plans[-1])) + length(unit) <= budget:
                plans[-1].append(unit)
            else:
                plans.append([unit])
        out = []
        for plan in plans:
            index = [i for unit in plan for i in unit]
            packed = shared_prefix.pack(
                [(samples[u[0]].prompt_ids, [samples[i].response_ids for i in u]) for u in plan]
            )
            rows = [samples[i] for i in index]
            out.append(MicroBatch(index, packed.ids.to(self.device), None, None, *self._adv(rows), packed=packed))
        return out

    def logprobs(self, mb: MicroBatch, temperature: float, entropy: str = "") -> Tensor | tuple[Tensor, Tensor]:
        """[N] log-probs of the micro-batch's response tokens, row by row (grad flows when enabled);
        with `entropy` ("grad" / "value") also their [N] entropies."""
        causal = self.causal()  # the transformers model (with PEFT's LoRA layers inside)
        with self._lora_compute():
            if mb.packed is not None:
                shared_prefix.enable(causal)
                scored = shared_prefix.hidden_states(causal.get_decoder(), mb.packed, self.device)
                targets = mb.packed.targets.to(self.device)
            else:
                decoder = causal.get_decoder()
                hidden = decoder(input_ids=mb.ids, attention_mask=mb.attn, use_cache=False).last_hidden_state
                scored = hidden[:, :-1][mb.mask]  # only response positions reach the LM head: [N, H]
                targets = mb.ids[:, 1:][mb.mask]
        return chunked_token_logprobs(
            scored, targets, causal.get_output_embeddings(), temperature, self.grpo.logprob_chunk, entropy
        )

    @torch.no_grad()
    def _frozen_logprobs(self, mbs: Sequence[MicroBatch], temperature: float, use_adapter: bool) -> list[Tensor]:
        """Per micro-batch [N] log-probs in eval mode (no dropout), under the adapter or the base model."""
        self.model.eval()
        if use_adapter:
            return [self.logprobs(mb, temperature) for mb in mbs]
        with self.reference_model():
            return [self.logprobs(mb, temperature) for mb in mbs]

    def causal(self):
        """The transformers causal LM whose forward computes the log-probs."""
        return self.policy.causal()

    def reference_model(self):
        """A context in which `causal()` computes the reference policy's log-probs."""
        return self.policy.reference()

    def response_logprobs(
        self, samples: Sequence[Sample], temperature: float = 1.0, use_adapter: bool = True
    ) -> list[Tensor]:
        """Per-token log-probs of each response (CPU) under the current adapter (or the base model)."""
        if not samples:
            return []
        mbs = self.micro_batches(samples, budget=self.nograd_tokens)
        out: list[Tensor | None] = [None] * len(samples)
        for mb, lp in zip(mbs, self._frozen_logprobs(mbs, temperature, use_adapter)):
            for i, part in zip(mb.index, torch.split(lp.cpu(), mb.lengths)):
                out[i] = part
        return out  # type: ignore[return-value]

    # --- one GRPO step ------------------------------------------------------------------------

    def mini_batches(self, n_samples: int) -> list[range]:
        """Sample ranges of the step's optimizer updates: `grpo.mini_batch_size` prompts (x K responses)
        each, in order; one range (the whole batch) when mini_batch_size is 0 or covers the batch."""
        g = self.grpo
        size = g.mini_batch_size * g.K if g.mini_batch_size else n_samples
        return [range(i, min(i + size, n_samples)) for i in range(0, n_samples, size)]

    def _tis_weights(self, mb: MicroBatch, samples: Sequence[Sample], old: Tensor, off: set[int]) -> Tensor | None:
        """Per-token truncated IS weights for the micro-batch (1 on own responses), or None when off."""
        cap = self.grpo.tis_cap
        if cap <= 0 or not off:
            return None
        parts = []
        for i, old_part in zip(mb.index, torch.split(old, mb.lengths)):
            s = samples[i]
            if i in off and len(s.behaviour_logprobs) == len(s.response_ids):
                behaviour = torch.tensor(s.behaviour_logprobs, dtype=torch.float32, device=old.device)
                parts.append(truncated_is_weights(old_part, behaviour, cap))
            else:
                parts.append(torch.ones_like(old_part))
        return torch.cat(parts)

    def old_logprobs(self, mbs: Sequence[MicroBatch]) -> list[Tensor]:
        """The step-start ("old") log-probs of the live policy, per micro-batch."""
        return self._frozen_logprobs(mbs, self.grpo.temperature, use_adapter=True)

    @torch.no_grad()
    def old_logprobs_and_entropy(self, mbs: Sequence[MicroBatch]) -> tuple[list[Tensor], float]:
        """The old log-probs per micro-batch and the step-start policy's token-mean entropy over them
        (VERL's actor/entropy, logged whether or not grpo.entropy_coef uses it), in one pass."""
        self.model.eval()
        out = [self.logprobs(mb, self.grpo.temperature, "value") for mb in mbs]
        tokens = sum(mb.tokens for mb in mbs)
        return [lp for lp, _ in out], (float(sum(e.sum() for _, e in out)) / tokens if tokens else 0.0)

    def ref_logprobs(self, mbs: Sequence[MicroBatch]) -> list[Tensor | None]:
        """The KL reference's log-probs per micro-batch (None each when grpo.kl_coef is 0)."""
        if self.grpo.kl_coef > 0:
            return self._frozen_logprobs(mbs, self.grpo.temperature, use_adapter=False)
        return [None] * len(mbs)

    def loss(self, logp: Tensor, old: Tensor, ref: Tensor | None, mb: MicroBatch, n_tokens: float, **extra):
        """The GRPO loss of one micro-batch with this learner's settings; its token sum is divided by
        `n_tokens`, the response tokens of the whole (mini-)batch."""
        g = self.grpo
        return grpo_loss(
            logp,
            old,
            ref,
            mb.advantages,
            torch.ones_like(logp),
            clip_low=g.clip_low,
            clip_high=g.clip_high,
            clip_ratio_c=g.clip_ratio_c,
            log_ratio_clamp=g.log_ratio_clamp,
            kl_coef=g.kl_coef,
            denominator=n_tokens,
            **extra,
        )

    @staticmethod
    def nll(mbs: Sequence[MicroBatch], old: Sequence[Tensor], off: set[int]) -> dict[str, float]:
        """Mean per-token NLL under the old (step-start) local policy of the own responses and of the
        off-policy ones (sample indices `off`), in one pass."""
        total, count = {False: 0.0, True: 0.0}, {False: 0, True: 0}
        for mb, lp in zip(mbs, old):
            for i, part in zip(mb.index, torch.split(lp, mb.lengths)):
                total[i in off] -= float(part.sum())
                count[i in off] += part.numel()
        mean = {k: total[k] / count[k] if count[k] else 0.0 for k in total}
        return {"nll_own": mean[False], "nll_swapped": mean[True]}

    def step(self, samples: Sequence[Sample], owner: int | None = None) -> dict[str, float]:
        """One GRPO step on `samples` (prompt-major, K per prompt) of client `owner`: responses whose
        origin is another client are off-policy (their NLL is reported; truncated IS if configured)."""
        keys = ("loss", "pg_loss", "kl", "clip_frac", "entropy", "grad_norm", "penalty")
        if not samples:
            return {**dict.fromkeys(keys, 0.0), "micro_batches": 0, "updates": 0, "skipped_updates": 0}
        g = self.grpo
        ranges = self.mini_batches(len(samples))
        plans = [self._step_micro_batches(samples, r) for r in ranges]
        nograd = plans  # the old-policy and reference passes' micro-batches: larger where they fit
        if self.nograd_tokens > g.micro_batch_tokens:
            nograd = [self._step_micro_batches(samples, r, self.nograd_tokens) for r in ranges]
        old_and_entropy = [self.old_logprobs_and_entropy(mbs) for mbs in nograd]
        tokens = [float(sum(mb.tokens for mb in mbs)) for mbs in plans]
        entropy = sum(e * n for (_, e), n in zip(old_and_entropy, tokens)) / sum(tokens)
        off = off_policy(samples, owner)
        metrics: dict[str, float] = self.nll(
            [mb for mbs in nograd for mb in mbs], [lp for lps, _ in old_and_entropy for lp in lps], off
        )
        old = [self._regroup(n, lps, mbs) for n, (lps, _), mbs in zip(nograd, old_and_entropy, plans)]
        ref = [self._regroup(n, self.ref_logprobs(n), mbs) for n, mbs in zip(nograd, plans)]
        # the weights depend only on the old log-probs: computed once, used by every epoch
        tis = [[self._tis_weights(mb, samples, lp, off) for mb, lp in zip(mbs, lps)] for mbs, lps in zip(plans, old)]
        totals = tokens  # the token-mean's denominators: every row's tokens, trained or not
        inert = self.inert_rows(samples)
        if inert:  # train the other rows only; each mini-batch's denominator still counts every token
            plans, old, tis = self._without(inert, ranges, plans, old, tis, samples)
        trained = [float(sum(mb.tokens for mb in mbs)) for mbs in plans]
        entropy_mode = "grad" if g.entropy_coef > 0 else ""  # computed in training only where it is used
        sums = dict.fromkeys(keys, 0.0)
        updates = skipped = 0
        self.model.train()
        try:
            for _ in range(g.grad_epochs):
                for mbs, old_mbs, ref_mbs, tis_mbs, total, own in zip(plans, old, ref, tis, totals, trained):
                    grpo = partial(self._grpo_micro_loss, old_mbs, ref_mbs, tis_mbs, total, entropy_mode)
                    part, ok = self._update(mbs, grpo, ("loss", "pg_loss", "kl", "clip_frac", "entropy"))
                    updates, skipped = updates + 1, skipped + (not ok)
                    if 0 < own < total:  # logged as the share of the tokens trained
                        part["clip_frac"] *= total / own
                    for k, v in part.items():
                        sums[k] += v
        finally:
            self.model.eval()
        metrics.update({k: v / updates for k, v in sums.items()})
        metrics.update(
            entropy=entropy,
            micro_batches=sum(len(mbs) for mbs in plans),
            updates=updates,
            skipped_updates=skipped,
            inert_frac=len(inert) / len(samples),
        )
        return metrics

    def inert_rows(self, samples: Sequence[Sample]) -> set[int]:
        """Rows that add nothing to the loss or its gradient but their tokens to the token-mean's
        denominator: a zero advantage (a group whose K rewards are equal) zeroes the policy loss, and
        with no KL and no entropy term nothing else reaches them. Empty when either coefficient is set."""
        if self.grpo.kl_coef > 0 or self.grpo.entropy_coef > 0:
            return set()
        return {i for i, s in enumerate(samples) if s.advantage == 0.0}

    def _without(self, inert: set[int], ranges, plans, old, tis, samples):
        """The step's micro-batch plans over the rows not in `inert`, with their old log-probs and IS
        weights cut from the full plans' (computed on every row: the NLL metrics cover them all)."""
        new_plans, new_old, new_tis = [], [], []
        for r, mbs, old_mbs, tis_mbs in zip(ranges, plans, old, tis):
            active = [i for i in r if i not in inert]
            cut = self._step_micro_batches(samples, active) if active else []
            new_plans.append(cut)
            new_old.append(self._regroup(mbs, old_mbs, cut))
            new_tis.append(self._regroup(mbs, tis_mbs, cut))
        return new_plans, new_old, new_tis

    def _step_micro_batches(self, samples: Sequence[Sample], rows: Sequence[int], budget: int = 0) -> list[MicroBatch]:
        """Micro-batches of the step's rows `rows` (shared-prefix where supported), indexing the step's samples."""
        mbs = self.micro_batches([samples[i] for i in rows], self.shared_prefix, budget)
        for mb in mbs:
            mb.index = [rows[i] for i in mb.index]
        return mbs

    def _regroup(self, source: Sequence[MicroBatch], per_mb: Sequence[Tensor | None], plan: Sequence[MicroBatch]):
        """Per-token values computed over the micro-batches `source`, cut into those of `plan` (the same
        rows or fewer); None values stay None."""
        if source is plan or per_mb[0] is None:
            return per_mb if source is plan else [None] * len(plan)
        of = self._by_row(source, per_mb)
        return [torch.cat([of[i] for i in mb.index]) for mb in plan]

    @staticmethod
    def _by_row(mbs: Sequence[MicroBatch], per_mb: Sequence[Tensor]) -> dict[int, Tensor]:
        """Per-token values of a plan's micro-batches, split back into the rows they came from."""
        return {i: part for mb, t in zip(mbs, per_mb) for i, part in zip(mb.index, torch.split(t, mb.lengths))}

    def _grpo_micro_loss(self, old, ref, tis, n_tokens: float, entropy_mode: str, i: int, mb: MicroBatch):
        g = self.grpo
        logp, entropy = (
            self.logprobs(mb, g.temperature, entropy_mode) if entropy_mode else (self.logprobs(mb, g.temperature), None)
        )
        return self.loss(
            logp, old[i], ref[i], mb, n_tokens, entropy=entropy, entropy_coef=g.entropy_coef, is_weights=tis[i]
        )

    def _ce_micro_loss(self, n_tokens: float, i: int, mb: MicroBatch):
        return token_nll(self.logprobs(mb, 1.0), n_tokens)

    def _update(self, mbs: Sequence[MicroBatch], micro_loss, keys: Sequence[str]) -> tuple[dict[str, float], bool]:
        """One optimizer update over a mini-batch: `micro_loss(i, mb)` (an object with a `.loss` to
        backpropagate and the float fields `keys`) for each micro-batch, gradients accumulated, plus the
        strategy's client penalty; the gradient norm clipped; skipped when not finite. Returns the summed
        fields with "penalty" and "grad_norm" (loss includes the penalty), and whether it stepped."""
        self.optimizer.zero_grad(set_to_none=True)
        part = dict.fromkeys(keys, 0.0)
        for i, mb in enumerate(mbs):
            out = micro_loss(i, mb)
            out.loss.backward()
            for k in part:
                part[k] += float(getattr(out, k).detach())
        if not mbs:  # every row was inert: a zero gradient, and AdamW still steps (its moments decay)
            for p in self.trainable().values():
                p.grad = torch.zeros_like(p)
        penalty = 0.0
        if self.strategy is not None:
            p = self.strategy.client_penalty(self._lora_params_by_adapter_key(), self._anchor_dev)
            if p.requires_grad:
                p.backward()
            penalty = float(p.detach())
        if self.rank is not None:
            self._zero_grads_beyond_rank()
        grad_norm = torch.nn.utils.clip_grad_norm_(list(self.trainable().values()), self.grpo.grad_clip)
        ok = bool(torch.isfinite(grad_norm))
        if ok:
            self.optimizer.step()
        else:  # VERL: a non-finite gradient norm skips the update instead of poisoning the weights
            self.optimizer.zero_grad(set_to_none=True)
        return {**part, "loss": part["loss"] + penalty, "penalty": penalty, "grad_norm": float(grad_norm)}, ok

    # --- one cross-entropy step (objective label-words) ---------------------------------------

    def ce_step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One step of token cross-entropy on the samples' responses (the label words after the prompt;
        prompt tokens are not scored): per mini-batch of `grpo.mini_batch_size` samples (0: all), one
        AdamW update of the token-mean NLL (+ the strategy's client penalty), `grad_epochs` passes."""
        keys = ("loss", "nll", "grad_norm", "penalty")
        if not samples:
            return {**dict.fromkeys(keys, 0.0), "micro_batches": 0, "updates": 0, "skipped_updates": 0}
        g = self.grpo
        size = g.mini_batch_size or len(samples)
        ranges = [range(i, min(i + size, len(samples))) for i in range(0, len(samples), size)]
        plans = [self.micro_batches([samples[i] for i in r]) for r in ranges]
        sums = dict.fromkeys(keys, 0.0)
        updates = skipped = 0
        self.model.train()
        try:
            for _ in range(g.grad_epochs):
                for mbs in plans:
                    n_tokens = float(sum(mb.tokens for mb in mbs))

                    part, ok = self._update(mbs, partial(self._ce_micro_loss, n_tokens), ("loss", "nll"))
                    updates, skipped = updates + 1, skipped + (not ok)
                    for k, v in part.items():
                        sums[k] += v
        finally:
            self.model.eval()
        out = {k: v / updates for k, v in sums.items()}
        out.update(micro_batches=sum(len(p) for p in plans), updates=updates, skipped_updates=skipped)
        return out

    @torch.no_grad()
    def sequence_logprobs(self, samples: Sequence[Sample]) -> list[float]:
        """Each sample's response log-likelihood after its prompt (sum over its tokens, temperature 1)
        under the live weights, in eval mode."""
        return [float(lp.sum()) for lp in self.response_logprobs(samples, 1.0)]

    def _zero_grads_beyond_rank(self) -> None:
        """A client of rank r < max rank trains only the first r components: rows r.. of every A and
        columns r.. of every B get no gradient (they are zero, and AdamW keeps them zero)."""
        for name, p in self.model.named_parameters():
            beyond = components(name, self.rank)
            if p.grad is not None and beyond is not None:
                p.grad[beyond] = 0

    def _lora_params_by_adapter_key(self) -> dict[str, Tensor]:
        """Live LoRA parameters keyed like the saved adapter (PEFT drops the '.default' adapter name)."""
        out = {}
        for name, p in self.model.named_parameters():
            if "lora_" in name:  # frozen ones too (FFA-LoRA's A): the anchor has every LoRA tensor
                out[name.replace(".default.", ".")] = p
        if set(out) != set(self.anchor):
            raise RuntimeError("LoRA parameter names do not match the adapter's keys")
        return out
