"""Serving a LoRA adapter merged into the engine's weights: W' = W + (alpha / r) * B @ A.

Why: on CPU, vLLM's LoRA kernels are PyTorch fallbacks, and decoding with a live adapter runs at about
half the base model's speed at r=8 (and a sixth at r=32, bf16). A merged adapter costs nothing per
token: the engine runs the plain model (no LoRA wrappers). The price is a weight rebuild whenever the
engine switches to another client's adapter (measured in benchmarks/rollout_lora.py), and one adapter
per engine call: an actor hosting several clients rolls them out one after another.

`MergedLoRAExtension` is a vLLM worker extension (`LLM(worker_extension_cls=...)`): its methods run in
the engine's worker process through `LLM.collective_rpc`. At start it reads the base weights of every
linear layer inside the decoder blocks from the checkpoint's safetensors, in vLLM's packed layout
(q, k, v -> qkv_proj; gate, up -> gate_up_proj, by the model's `packed_modules_mapping`). A merge
rebuilds each adapted layer from that copy, so merges never accumulate rounding. On CPU vLLM repacks a
linear layer's weight for oneDNN at load time and drops the plain tensor: a rebuilt weight is
re-dispatched the same way. Tensor parallelism 1 only (a CPU engine; one GPU per engine).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping

import torch

PEFT_PREFIX = "base_model.model."


def lora_deltas(adapter: Mapping[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """PEFT adapter tensors -> {HF module name: (A [r, in], B [out, r])} in float32."""
    out: dict[str, list] = {}
    for key, value in adapter.items():
        for part, slot in ((".lora_A.weight", 0), (".lora_B.weight", 1)):
            if key.endswith(part):
                module = key[: -len(part)].removeprefix(PEFT_PREFIX)
                out.setdefault(module, [None, None])[slot] = value.detach().float().contiguous()
    missing = [m for m, (a, b) in out.items() if a is None or b is None]
    if missing:
        raise ValueError(f"adapter has LoRA A without B (or B without A) for {missing[:3]}")
    return {m: (a, b) for m, (a, b) in out.items()}


def pack_deltas(deltas: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None) -> dict | None:
    """Deltas as plain msgpack types for `LLM.collective_rpc` (it decodes untyped tensors as raw tuples):
    {module: [A shape, A float32 bytes, B shape, B float32 bytes]}."""
    if deltas is None:
        return None
    return {
        m: [
            list(a.shape),
            a.float().contiguous().numpy().tobytes(),
            list(b.shape),
            b.float().contiguous().numpy().tobytes(),
        ]
        for m, (a, b) in deltas.items()
    }


def unpack_deltas(packed: Mapping | None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    def tensor(shape, data) -> torch.Tensor:
        return torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape)

    return {m: (tensor(sa, a), tensor(sb, b)) for m, (sa, a, sb, b) in (packed or {}).items()}


def _install(layer: torch.nn.Module, weight: torch.Tensor) -> None:
    """Give a vLLM linear layer a new weight: in place where the layer keeps its tensor (GPU), else
    (CPU, where vLLM prepacked it and dropped the tensor) set it and prepack again."""
    current = getattr(layer, "weight", None)
    if current is not None and current.shape == weight.shape:
        current.data.copy_(weight)
        return
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    layer.weight = torch.nn.Parameter(weight, requires_grad=False)
    dispatch_cpu_unquantized_gemm(layer, remove_weight=True)


class MergedLoRAExtension:
    """Methods added to vLLM's worker (the process that holds the model)."""

    def pubswap_exit_with_parent(self, poll_s: float = 1.0) -> int:
        """Exit this worker when the process that started it dies. A SIGKILLed driver or actor takes
        its engine core down with it, but the worker would live on, re-parented to init, holding the
        model's memory (and, on CPU, spinning). Returns the watched parent's pid."""
        import threading
        import time

        parent = os.getppid()

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(poll_s)
            os._exit(1)

        threading.Thread(target=watch, name="pubswap-parent-watch", daemon=True).start()
        return parent

    def pubswap_merge_init(self, model_dir: str) -> int:
        """Read the base weights of the decoder's linear layers; returns how many vLLM layers can merge."""
        from safetensors import safe_open

        model = self.model_runner.get_model()
        modules = dict(model.named_modules())
        packed = getattr(model, "packed_modules_mapping", {}) or {}
        shard_of = {part: (whole, i) for whole, parts in packed.items() for i, part in enumerate(parts)}
        dtype = next(model.parameters()).dtype
        hf: dict[str, torch.Tensor] = {}
        for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
            with safe_open(path, framework="pt") as f:
                for name in f.keys():
                    if ".layers." in name and name.endswith(".weight") and len(f.get_slice(name).get_shape()) == 2:
                        hf[name[: -len(".weight")]] = f.get_tensor(name)
        # vLLM layer -> [(shard index, HF module name, rows)], and its base weight
        self._merge_shards: dict[str, list[tuple[int, str, int]]] = {}
        for name, weight in hf.items():
            head, _, leaf = name.rpartition(".")
            whole, index = shard_of.get(leaf, (leaf, 0))
            target = f"{head}.{whole}"
            if target in modules:
                self._merge_shards.setdefault(target, []).append((index, name, weight.shape[0]))
        self._merge_base: dict[str, torch.Tensor] = {}
        self._merge_rows: dict[str, tuple[str, int, int]] = {}  # HF module -> (vLLM layer, first row, rows)
        for target, shards in self._merge_shards.items():
            shards.sort()
            self._merge_base[target] = torch.cat([hf[n] for _, n, _ in shards]).to(dtype)
            row = 0
            for _, n, rows in shards:
                self._merge_rows[n] = (target, row, rows)
                row += rows
        self._merge_modules = modules
        self._merged: set[str] = set()
        return len(self._merge_base)

    def pubswap_merge_load(self, packed: Mapping | None, scale: float) -> int:
        """Serve base + scale * B @ A for every adapted module (`pack_deltas`; None: the base model).
        Returns the number of layers rebuilt."""
        deltas = unpack_deltas(packed)
        unknown = sorted(set(deltas) - set(self._merge_rows))
        if unknown:
            raise ValueError(
                f"cannot merge LoRA into unknown modules {unknown[:3]} (known e.g. {sorted(self._merge_rows)[:3]})"
            )
        touched: dict[str, list[str]] = {}
        for module in deltas:
            touched.setdefault(self._merge_rows[module][0], []).append(module)
        rebuilt = 0
        for target in sorted(set(touched) | self._merged):
            base = self._merge_base[target]
            layer = self._merge_modules[target]
            if target not in touched:  # merged before, not adapted now: back to the base weight
                _install(layer, base.to(_device(layer), copy=True))
                self._merged.discard(target)
                rebuilt += 1
                continue
            weight = base.float().clone()
            for module in touched[target]:
                a, b = deltas[module]
                _, row, rows = self._merge_rows[module]
                weight[row : row + rows] += scale * (b.float() @ a.float())
            _install(layer, weight.to(base.dtype).to(_device(layer)))
            self._merged.add(target)
            rebuilt += 1
        return rebuilt


def _device(layer: torch.nn.Module) -> torch.device:
    for p in layer.parameters():
        if p.numel():
            return p.device
    return torch.device("cpu")
