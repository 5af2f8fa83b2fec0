"""Deliberate crashes at named points of a round, for fault-tolerance tests and drills.

Set PUBSWAP_FAULT_FILE to a path; while a JSON spec is there, the process it names SIGKILLs itself
when it reaches the named point, once (the spec file is renamed to `<path>.fired` first, so a
restarted process or a resubmitted driver runs on). A spec names:

    {"who": "client", "client": 1, "round": 2, "step": 1, "phase": "private_train"}
    {"who": "driver", "round": 2, "step": 2, "phase": "step"}

Client phases: "private_train" (private step: responses generated, before training), "public_answer"
(public responses generated, before they reach the server), "public_train" (before training on the
swapped group), "average" (before the allreduce; step is ignored), "gossip" (a decentralized client,
before it puts its gossip message of that step), "evaluate" (an actor evaluating, named by its first
client; step 0; round 0 is the base model's evaluation). Driver phase: "step" (before the
step's work is sent to the clients).

With no PUBSWAP_FAULT_FILE (the normal case) `maybe_crash` is a dictionary lookup.
"""

from __future__ import annotations

import json
import os
import signal

ENV = "PUBSWAP_FAULT_FILE"
PHASES = {
    "client": ("private_train", "public_answer", "public_train", "average", "gossip", "evaluate"),
    "driver": ("step",),
}


def maybe_crash(who: str, round_idx: int, step: int, phase: str, client: int | None = None) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    try:
        with open(path) as fh:
            spec = json.load(fh)
    except (FileNotFoundError, json.JSONDecodeError):
        return
    if spec.get("who") != who or spec.get("phase") != phase or spec.get("round") != round_idx:
        return
    if phase != "average" and spec.get("step") != step:
        return
    if who == "client" and spec.get("client") != client:
        return
    try:
        os.rename(path, path + ".fired")  # exactly one process wins the rename
    except FileNotFoundError:
        return
    os.kill(os.getpid(), signal.SIGKILL)
