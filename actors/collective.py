"""Which collective backend averages the adapters, where its tensor lives, and what it needs installed.

The averaged vector is the LoRA adapter only (Qwen3-1.7B, r=32, all linear layers: 34.9M fp32 values,
133 MiB), moved once per round. Two backends of `ray.util.collective`:

  * gloo (default, CPU and GPU clusters): torch's gloo over TCP on a CPU tensor. Nothing to install;
    the adapter is copied off the GPU once per round (~30 ms over PCIe for 133 MiB).
  * nccl (resources.collective_backend=nccl, GPU only): NCCL on a CUDA tensor of the actor's GPU. Ray's
    NCCL backend is built on cupy, which neither ray nor vllm installs: the `nccl` extra installs
    cupy-cuda13x, the build that matches the CUDA 13 of the pinned vllm wheel.

docs/gpu.md gives the measured gloo time; NCCL was not measured (no GPU cluster here).
"""

from __future__ import annotations

BACKENDS = ("gloo", "nccl")
CUPY_PACKAGE = "cupy-cuda13x"


class CollectiveSetupError(RuntimeError):
    """The chosen backend cannot run on this cluster; the message says what to change or install."""


def choose_backend(requested: str, gpus_per_actor: float) -> str:
    if requested not in BACKENDS:
        raise CollectiveSetupError(f"resources.collective_backend must be one of {BACKENDS}, got {requested!r}")
    if requested == "nccl" and gpus_per_actor <= 0:
        raise CollectiveSetupError(
            "resources.collective_backend=nccl needs GPUs (resources.gpus_per_client > 0); use gloo on CPU clusters"
        )
    return requested


def check_backend_deps(backend: str, node: dict) -> None:
    """`node` is a probe report (placement.probe): raise if `backend` cannot run there."""
    if backend == "nccl" and not node.get("cupy"):
        raise CollectiveSetupError(
            f"resources.collective_backend=nccl needs cupy on every GPU node, and node {node.get('host', '?')} has "
            f"none ({node.get('cupy_error', 'not importable')}): pip install '{CUPY_PACKAGE}' there (the project's "
            "`nccl` extra), or use resources.collective_backend=gloo"
        )


def tensor_device(backend: str) -> str:
    """Where the flat adapter must be for the allreduce: NCCL refuses CPU tensors."""
    return "cuda" if backend == "nccl" else "cpu"
