"""One client's GRPO learner: a PEFT LoRA model on the shared base, trained on scored responses.

No Ray and no vLLM here: the rollout engine lives in the actor. A step takes responses with their
advantages, from the client itself or (PubSwap) from other clients, and:

  1. recomputes "old" log-probs under the current local policy for every response, so the ratio
     starts at 1 for on- and off-policy responses alike (as VERL does);
  2. computes reference log-probs with the adapter disabled (KL to the base model);
  3. runs `grad_epochs` full-batch AdamW updates of the GRPO loss (+ the strategy's client penalty,
     e.g. FedProx's (mu/2)||theta - theta_global||^2), clipping the gradient norm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pubswap.aggregation.base import AggregationStrategy
from pubswap.config import GRPOConfig, LoraConfig
from pubswap.grpo import grpo_loss
from pubswap.lora import Adapter, adapter_from_model, load_into_model, peft_lora_config

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Sample:
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    advantage: float
    origin: int = -1  # client that generated the response (-1: unknown)


def pad_batch(samples: Sequence[Sample], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """input_ids, attention_mask [B, T] right-padded, and the response mask [B, T-1] aligned with
    next-token log-probs (position t scores token t+1)."""
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    T = max(lengths)
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


class LoraGRPOTrainer:
    def __init__(self, model_dir: str, lora: LoraConfig, grpo: GRPOConfig, dtype: str = "float32",
                 strategy: AggregationStrategy | None = None, seed: int = 0):
        from peft import get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(seed)
        self.grpo = grpo
        self.strategy = strategy
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype])
        base.config.use_cache = False
        self.model = get_peft_model(base, peft_lora_config(lora.r, lora.alpha, lora.target_modules, lora.dropout,
                                                           base_model=model_dir))
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                p.data = p.data.float()  # LoRA weights and their optimizer state in fp32
        self.lora_config = self.model.peft_config["default"]
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.anchor: Adapter = adapter_from_model(self.model)  # round-start global adapter
        self.reset_optimizer()

    # --- adapter state ------------------------------------------------------------------------

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
        load_into_model(self.model, adapter)
        self.optimizer = optimizer

    def set_adapter(self, adapter: Adapter, reset_optimizer: bool = True) -> None:
        """Load the (global) adapter; it becomes the anchor of the client penalty. Optimizer reset per round."""
        load_into_model(self.model, {k: v.float() for k, v in adapter.items()})
        self.anchor = {k: v.detach().clone().float() for k, v in adapter.items()}
        if reset_optimizer:
            self.reset_optimizer()

    def adapter(self) -> Adapter:
        return adapter_from_model(self.model)

    # --- log-probs ----------------------------------------------------------------------------

    def _token_logprobs(self, ids: Tensor, attn: Tensor, temperature: float) -> Tensor:
        logits = self.model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        if temperature != 1.0:
            logits = logits / temperature
        # log p(token) = logit(token) - logsumexp(logits): no [B, T, vocab] log-softmax copy is kept
        return logits.gather(-1, ids[:, 1:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)

    @torch.no_grad()
    def response_logprobs(self, samples: Sequence[Sample], temperature: float = 1.0,
                          use_adapter: bool = True) -> list[Tensor]:
        """Per-token log-probs of each response under the current adapter (or the base model)."""
        ids, attn, resp = pad_batch(samples, self.pad_id)
        if use_adapter:
            lp = self._token_logprobs(ids, attn, temperature)
        else:
            with self.model.disable_adapter():
                lp = self._token_logprobs(ids, attn, temperature)
        return [lp[i][resp[i] > 0] for i in range(len(samples))]

    # --- one GRPO step ------------------------------------------------------------------------

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        if not samples:
            return {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "grad_norm": 0.0, "penalty": 0.0}
        g = self.grpo
        self.model.train()
        ids, attn, mask = pad_batch(samples, self.pad_id)
        adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
        with torch.no_grad():
            old = self._token_logprobs(ids, attn, g.temperature)
            ref = None
            if g.kl_coef > 0:
                with self.model.disable_adapter():
                    ref = self._token_logprobs(ids, attn, g.temperature)
        metrics: dict[str, float] = {}
        for _ in range(g.grad_epochs):
            logp = self._token_logprobs(ids, attn, g.temperature)
            out = grpo_loss(logp, old, ref, adv, mask, clip_low=g.clip_low, clip_high=g.clip_high,
                            log_ratio_clamp=g.log_ratio_clamp, kl_coef=g.kl_coef)
            loss = out.loss
            penalty = torch.zeros(())
            if self.strategy is not None:
                penalty = self.strategy.client_penalty(self._lora_params_by_adapter_key(), self.anchor)
                loss = loss + penalty
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(list(self.trainable().values()), g.grad_clip)
            self.optimizer.step()
            metrics = {"loss": loss.item(), "pg_loss": out.pg_loss.item(), "kl": out.kl.item(),
                       "clip_frac": out.clip_frac.item(), "grad_norm": float(grad_norm), "penalty": float(penalty.detach())}
        self.model.eval()
        return metrics

    def _lora_params_by_adapter_key(self) -> dict[str, Tensor]:
        """Live LoRA parameters keyed like the saved adapter (PEFT drops the '.default' adapter name)."""
        out = {}
        for name, p in self.trainable().items():
            out[name.replace(".default.", ".")] = p
        if set(out) != set(self.anchor):
            raise RuntimeError("LoRA parameter names do not match the adapter's keys")
        return out
