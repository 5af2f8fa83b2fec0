"""Why an actor ended itself, told to the driver through the cluster's GCS.

An actor that ends its own process (its vLLM engine died: actors/engine_watchdog.py) prints why, but
that line reaches the driver's console only through Ray's log streaming, which is best-effort: a line
written just before the process exits, or while the driver is paused, can be lost. So the actor also
leaves the line in the GCS's key-value store under its actor id, which survives the process (and its
restarts), and the driver takes it when it notices the actor was lost or restarted: the cause goes into
the recovery's console line and its event (jobs/train.py's with_recovery).
"""

from __future__ import annotations

import threading

NAMESPACE = "pubswap"
_PREFIX = "actor-exit/"


def leave(line: str, timeout_s: float = 5.0) -> None:
    """From inside an actor: store `line` under this actor's id. Gives up after `timeout_s` (an
    unreachable GCS must not keep a dying actor alive); outside an actor, does nothing."""

    def put() -> None:
        try:
            import ray
            from ray.experimental import internal_kv

            actor_id = ray.get_runtime_context().get_actor_id()
            if actor_id and internal_kv._internal_kv_initialized():
                internal_kv._internal_kv_put(_PREFIX + actor_id, line, overwrite=True, namespace=NAMESPACE)
        except Exception:  # the note is a courtesy; the exit goes ahead without it
            pass

    t = threading.Thread(target=put, name="exit-note", daemon=True)
    t.start()
    t.join(timeout_s)


def take(actor_ids: list[str]) -> dict[str, str]:
    """From the driver: the notes left by the actors `actor_ids` (hex), removed as they are read."""
    from ray.experimental import internal_kv

    out = {}
    for actor_id in actor_ids:
        key = _PREFIX + actor_id
        value = internal_kv._internal_kv_get(key, namespace=NAMESPACE)
        if value is not None:
            out[actor_id] = value.decode(errors="replace")
            internal_kv._internal_kv_del(key, namespace=NAMESPACE)
    return out
