"""The GRPO learner of the full-parameter decentralized methods (dsgd, chocosgd, seedflood): every
weight of the model is trained, no LoRA.

Everything but the model is LoraGRPOTrainer's (the same loss, micro-batching, log-prob chunking and
skipped non-finite updates); what differs:
  * the trained model is the transformers model itself, its weights cast to fp32 (master weights,
    gradients and AdamW moments in fp32: 16 bytes per parameter while a client trains, plus 12 per
    parameter for each client held: its weights and two moments);
  * the reference policy of the KL term is a frozen copy of the base model in the model dtype, made
    only when grpo.kl_coef > 0 (the base model can no longer be had by switching an adapter off);
  * the "adapter" that leaves the trainer is every parameter (pubswap/learner/full_model.py).
"""

from __future__ import annotations

import contextlib
import copy

from pubswap.config import LoraConfig
from pubswap.learner.full_model import FullModelConfig, load_weights, weights_from_model
from pubswap.learner.trainer import LoraGRPOTrainer
from pubswap.lora import Adapter


class FullGRPOTrainer(LoraGRPOTrainer):
    def _trainable_model(self, base_model, lora: LoraConfig, base_model_name: str):
        self.reference = None
        self._use_reference = False
        if self.grpo.kl_coef > 0:
            self.reference = copy.deepcopy(base_model).requires_grad_(False).eval()
        for p in base_model.parameters():
            p.data = p.data.float()
            p.requires_grad_(True)
        return base_model, FullModelConfig(base_model_name)

    def causal(self):
        return self.reference if self._use_reference else self.model

    @contextlib.contextmanager
    def reference_model(self):
        if self.reference is None:
            raise RuntimeError("no reference model: grpo.kl_coef is 0")
        self._use_reference = True
        try:
            yield
        finally:
            self._use_reference = False

    def adapter(self) -> Adapter:
        return weights_from_model(self.model)

    def load_weights(self, adapter: Adapter) -> None:
        load_weights(self.model, adapter)
