"""LoRA adapters as flat `name -> tensor` dicts, and their PEFT adapter folders on disk.

An Adapter's keys are PEFT's saved state-dict names, e.g.
`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`. The folder written by
`save_adapter` (adapter_config.json + adapter_model.safetensors) is what `PeftModel.from_pretrained`
and vLLM's `LoRARequest` load. Writes are atomic: a temp folder renamed into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

Adapter = dict[str, Tensor]

WEIGHTS_NAME = "adapter_model.safetensors"
CONFIG_NAME = "adapter_config.json"


def peft_lora_config(r: int, alpha: int, target_modules: list[str], dropout: float = 0.0, base_model: str = ""):
    """A peft.LoraConfig for causal LMs. `["all-linear"]` means every linear layer but the LM head."""
    from peft import LoraConfig

    targets: str | list[str] = "all-linear" if target_modules == ["all-linear"] else list(target_modules)
    return LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
        base_model_name_or_path=base_model or None,
    )


def adapter_from_model(peft_model) -> Adapter:
    """A detached CPU copy of the model's active LoRA weights."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in get_peft_model_state_dict(peft_model).items()}


def load_into_model(peft_model, adapter: Mapping[str, Tensor]) -> None:
    """Copy `adapter` into the model's active LoRA weights; every LoRA weight must be given."""
    from peft import set_peft_model_state_dict

    expected = set(adapter_from_model(peft_model))
    if set(adapter) != expected:
        missing, extra = sorted(expected - set(adapter)), sorted(set(adapter) - expected)
        raise ValueError(f"adapter keys do not match the model: missing {missing[:3]}, unexpected {extra[:3]}")
    set_peft_model_state_dict(peft_model, dict(adapter))


def write_folder(path: str | os.PathLike, fill: Callable[[Path], None]) -> Path:
    """Build a folder with `fill(tmp)` in a temp folder beside `path` and rename it into place (an
    existing `path` is replaced): readers see the old folder or the new one, never a half-written one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        fill(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def save_adapter(path: str | os.PathLike, adapter: Mapping[str, Tensor], lora_config) -> Path:
    """Write a PEFT adapter folder atomically; returns its path."""

    def fill(tmp: Path) -> None:
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in adapter.items()},
            str(tmp / WEIGHTS_NAME),
            metadata={"format": "pt"},
        )
        cfg = lora_config.to_dict()
        cfg = {k: (sorted(v) if isinstance(v, set) else v) for k, v in cfg.items()}
        (tmp / CONFIG_NAME).write_text(json.dumps(cfg, indent=2, default=str))

    return write_folder(path, fill)


def read_adapter(path: str | os.PathLike) -> Adapter:
    path = Path(path)
    weights = path / WEIGHTS_NAME
    if not weights.is_file():
        raise FileNotFoundError(f"no {WEIGHTS_NAME} in {path}")
    return load_file(str(weights))


# --- flat vectors, for collectives ------------------------------------------------------------


@dataclass(frozen=True)
class FlatSpec:
    """How to cut a flat vector back into the adapter's tensors (names in sorted order)."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[torch.dtype, ...]


def flatten(adapter: Mapping[str, Tensor], dtype: torch.dtype = torch.float32) -> tuple[Tensor, FlatSpec]:
    names = tuple(sorted(adapter))
    spec = FlatSpec(names, tuple(tuple(adapter[n].shape) for n in names), tuple(adapter[n].dtype for n in names))
    flat = (
        torch.cat([adapter[n].detach().reshape(-1).to(dtype) for n in names]) if names else torch.zeros(0, dtype=dtype)
    )
    return flat, spec


def unflatten(flat: Tensor, spec: FlatSpec) -> Adapter:
    sizes = [int(torch.Size(s).numel()) for s in spec.shapes]
    if flat.numel() != sum(sizes):
        raise ValueError(f"flat vector has {flat.numel()} elements, spec needs {sum(sizes)}")
    out: Adapter = {}
    for name, shape, dtype, chunk in zip(spec.names, spec.shapes, spec.dtypes, torch.split(flat, sizes)):
        out[name] = chunk.reshape(shape).to(dtype).clone()
    return out


def squared_distance(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> Tensor:
    """sum over tensors of ||a - b||^2 (float32); keys must match."""
    if set(a) != set(b):
        raise ValueError("adapters have different keys")
    return sum(((a[k].float() - b[k].float()) ** 2).sum() for k in sorted(a)) if a else torch.zeros(())


def components(key: str, start: int, stop: int | None = None) -> tuple[slice, ...] | None:
    """The index of rank components start..stop of LoRA tensor `key`: rows of an A [r, m], columns of
    a B [d, r]; None for a tensor that is neither."""
    if "lora_A" in key:
        return (slice(start, stop),)
    if "lora_B" in key:
        return (slice(None), slice(start, stop))
    return None


def truncate_rank(adapter: Mapping[str, Tensor], r: int) -> Adapter:
    """The adapter with only its first r rank components: rows r.. of every A and columns r.. of every
    B set to zero (new tensors; unchanged ones are shared)."""
    out = dict(adapter)
    for k, v in adapter.items():
        beyond = components(k, r)
        if beyond is not None and bool(v[beyond].any()):
            out[k] = v.clone()
            out[k][beyond] = 0
    return out


def num_bytes(adapter: Mapping[str, Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in adapter.values())
