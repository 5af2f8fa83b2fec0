"""Client actors that share a GPU take turns loading onto it, and a restarted one waits for its share.

Two facts of vLLM on a shared card (resources.gpus_per_client < 1) make a restart fail without this:
its engine refuses to start unless the card's free memory is at least `gpu_memory_utilization` of the
whole card, and it sizes its KV cache from what it sees while it profiles. A restarted actor's
predecessor may still hold its share for a few seconds after it was killed (its engine process exits
after it), and in a recovery every actor on the card restarts at once. So the actor's model loading
runs inside `card_turn` (an flock on a node-local file named after the card's UUID: one actor at a
time per card, at the first start and at every restart, whoever restarted it; the kernel releases it
when a holder dies), and the engine is built only after `wait_for_free` saw enough free memory.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# a killed predecessor's memory is normally back within seconds; after this the engine is tried anyway
# and fails with vLLM's own message (the driver's recovery then tries again within its retry budget)
FREE_WAIT_S = 180.0


def card_uuid() -> str | None:
    """The UUID of this process's (first visible) CUDA device; None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_properties(0).uuid)


@contextmanager
def card_turn(card: str | None, lock_dir: str | None = None) -> Iterator[None]:
    """Hold the card's loading turn for the block (no-op without a card)."""
    if card is None:
        yield
        return
    path = os.path.join(lock_dir or tempfile.gettempdir(), f"pubswap-card-{card}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel if this process dies holding it
        yield
    finally:
        os.close(fd)


def wait_for_free(
    need_bytes: int,
    free_bytes: Callable[[], int],
    timeout_s: float = FREE_WAIT_S,
    poll_s: float = 1.0,
    out: Callable[[str], None] = print,
    sleep=time.sleep,
) -> bool:
    """Wait until `free_bytes()` >= `need_bytes`, at most `timeout_s`; True if it was reached. Says once
    that it waits, and how it ended."""
    start = time.monotonic()
    free = free_bytes()
    if free >= need_bytes:
        return True
    out(
        f"GPU share: {free / 2**30:.2f} GiB free, the engine needs {need_bytes / 2**30:.2f} GiB; waiting up "
        f"to {timeout_s:.0f} s for a previous process on this card to release its memory"
    )
    while time.monotonic() - start < timeout_s:
        sleep(poll_s)
        free = free_bytes()
        if free >= need_bytes:
            out(f"GPU share: free after {time.monotonic() - start:.1f} s")
            return True
    out(f"GPU share: still only {free / 2**30:.2f} GiB free after {timeout_s:.0f} s; starting the engine anyway")
    return False


def wait_for_engine_share(fraction: float) -> bool:
    """Before a vLLM engine that takes `fraction` of the card starts: wait for that much free memory."""
    import torch

    total = torch.cuda.mem_get_info()[1]
    return wait_for_free(int(fraction * total), lambda: torch.cuda.mem_get_info()[0])
