"""A light task in each client bundle that reports what the client actor will find there: the GPU and
its memory, and whether cupy (Ray's NCCL backend) imports. Run before the heavy actors start, so that
a budget that cannot fit or a missing package fails the run at once, in one line."""

from __future__ import annotations

import ray

from placement.groups import bundle_strategy


@ray.remote(max_retries=0)
def _probe() -> dict:
    import importlib
    import socket

    report = {"host": socket.gethostname(), "cuda": False, "cupy": False}
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            free, total = torch.cuda.mem_get_info(0)
            report.update(cuda=True, gpu_name=props.name, total_bytes=int(total), free_bytes=int(free))
    except Exception as e:  # a broken CUDA install is reported, not raised here
        report["cuda_error"] = f"{type(e).__name__}: {e}"
    try:
        importlib.import_module("cupy")
        importlib.import_module("cupy.cuda.nccl")  # Ray's NCCL backend needs cupy's NCCL bindings, not just cupy
        report["cupy"] = True
    except Exception as e:
        report["cupy_error"] = f"{type(e).__name__}: {e}"
    return report


def probe_bundles(pg, num_bundles: int, gpus: float, timeout_s: float = 300.0) -> list[dict]:
    """One report per bundle of `pg` (asks the bundle's GPU share, no CPU)."""
    refs = [
        _probe.options(num_cpus=0, num_gpus=gpus, scheduling_strategy=bundle_strategy(pg, i)).remote()
        for i in range(num_bundles)
    ]
    return ray.get(refs, timeout=timeout_s)
