"""What a GRPO learner trains: LoRA layers on a frozen base, or every weight of the model.

The learner (pubswap/learner/trainer.py) is one; its policy says which weights the optimizer steps,
which model computes the log-probs, what the KL reference is, and how the trained weights leave and
enter the model:

    lora   PEFT LoRA layers (fp32) on the frozen base in the model dtype; the reference is the base
           model (the adapter switched off); the weights are the adapter's tensors.
    full   every weight, cast to fp32 (master weights, gradients and AdamW moments in fp32: 16 bytes a
           parameter while a client trains); the reference is a frozen copy of the base model in the
           model dtype, made only when grpo.kl_coef > 0; the weights are every parameter
           (pubswap/learner/full_model.py). The full-parameter methods (dsgd, chocosgd, seedflood).
"""

from __future__ import annotations

import contextlib
import copy

from pubswap.learner.full_model import FullModelConfig, load_weights, weights_from_model
from pubswap.lora import Adapter, adapter_from_model, load_into_model, peft_lora_config


class LoraPolicy:
    name = "lora"

    def build(self, base_model, lora, base_model_name: str, strategy=None, kl_coef: float = 0.0):
        """The model the optimizer steps and the config that describes its weights on disk."""
        from peft import get_peft_model

        model = get_peft_model(
            base_model,
            peft_lora_config(lora.max_r, lora.alpha, lora.target_modules, lora.dropout, base_model=base_model_name),
        )
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()  # LoRA weights, their gradients and the AdamW state in fp32
        for name, p in model.named_parameters():
            if p.requires_grad and strategy is not None and not strategy.trains(name):
                p.requires_grad_(False)  # e.g. FFA-LoRA's A: kept at its seeded initialisation
        self.model = model
        return model, model.peft_config["default"]

    def causal(self):
        """The transformers causal LM whose forward computes the log-probs (PEFT's layers inside)."""
        return self.model.get_base_model()

    def reference(self):
        """A context in which `causal()` computes the reference policy: the base model."""
        return self.model.disable_adapter()

    def weights(self) -> Adapter:
        return adapter_from_model(self.model)

    def load(self, weights: Adapter) -> None:
        load_into_model(self.model, weights)


class FullPolicy:
    name = "full"

    def build(self, base_model, lora, base_model_name: str, strategy=None, kl_coef: float = 0.0):
        self.frozen = copy.deepcopy(base_model).requires_grad_(False).eval() if kl_coef > 0 else None
        self._reference = False
        for p in base_model.parameters():
            p.data = p.data.float()
            p.requires_grad_(True)
        self.model = base_model
        return base_model, FullModelConfig(base_model_name)

    def causal(self):
        return self.frozen if self._reference else self.model

    @contextlib.contextmanager
    def reference(self):
        if self.frozen is None:
            raise RuntimeError("no reference model: grpo.kl_coef is 0")
        self._reference = True
        try:
            yield
        finally:
            self._reference = False

    def weights(self) -> Adapter:
        return weights_from_model(self.model)

    def load(self, weights: Adapter) -> None:
        load_weights(self.model, weights)


POLICIES = {"lora": LoraPolicy, "full": FullPolicy}
