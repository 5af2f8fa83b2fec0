"""Full-parameter training state: every weight of the causal LM as a flat `name -> tensor` dict.

The dict has the same shape as an Adapter (pubswap/lora.py), so gossip, averaging and checkpoints
treat LoRA tensors and full weights alike; its keys are the model's `named_parameters()` names (tied
weights once), which are also the names of a transformers `model.safetensors`. A checkpoint of a
full-parameter run is therefore a model folder: `model.safetensors` + the base model's `config.json`,
loadable with `AutoModelForCausalLM.from_pretrained` (with the base model's tokenizer).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from pubswap.lora import write_folder

WEIGHTS_NAME = "model.safetensors"
MODEL_CONFIG = "config.json"


def weights_from_model(model: torch.nn.Module) -> dict[str, Tensor]:
    """A detached fp32 CPU copy of every parameter."""
    return {n: p.detach().to("cpu", torch.float32, copy=True).contiguous() for n, p in model.named_parameters()}


def load_weights(model: torch.nn.Module, weights: Mapping[str, Tensor]) -> None:
    """Copy `weights` into the model's parameters (cast to their dtype and device); every parameter must be given."""
    params = dict(model.named_parameters())
    if set(weights) != set(params):
        missing, extra = sorted(set(params) - set(weights)), sorted(set(weights) - set(params))
        raise ValueError(f"weights do not match the model: missing {missing[:3]}, unexpected {extra[:3]}")
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(weights[n])


@dataclass(frozen=True)
class FullModelConfig:
    """What a full-parameter run's weights are, on disk: the base model's architecture, all weights trained.
    Plays the role the PEFT LoraConfig plays for adapters (checkpoints call `save`)."""

    base_model: str  # the base model's folder: its config.json goes next to the weights

    weights_name = WEIGHTS_NAME

    def to_dict(self) -> dict:
        return {"full_parameter": True, "base_model_name_or_path": self.base_model}

    def save(self, path: str | os.PathLike, weights: Mapping[str, Tensor]) -> Path:
        """Write a model folder atomically; returns its path."""

        def fill(tmp: Path) -> None:
            save_file(
                {k: v.detach().cpu().contiguous() for k, v in weights.items()},
                str(tmp / WEIGHTS_NAME),
                metadata={"format": "pt"},
            )
            shutil.copyfile(Path(self.base_model) / MODEL_CONFIG, tmp / MODEL_CONFIG)

        return write_folder(path, fill)


def read_weights(path: str | os.PathLike) -> dict[str, Tensor]:
    weights = Path(path) / WEIGHTS_NAME
    if not weights.is_file():
        raise FileNotFoundError(f"no {WEIGHTS_NAME} in {path}")
    return load_file(str(weights))
