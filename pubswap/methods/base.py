"""What a method is: one small interface the driver runs every method through.

A method family is one module here, registered by its names (pubswap/methods/__init__.py), as an
aggregation strategy is. It says what its clients train (LoRA or every weight), which local steps are
public, what its config must satisfy, how one round runs against the federation's API (the driver's
jobs/federation.py: private_step, public_step, average, gossip, flood, states, evaluate, ...), what a
round evaluates and what the checkpoint keeps besides the global adapter. The driver
(jobs/train.py) owns everything else: the lease, the commits, recovery, logging.

Nothing here imports Ray: `fed` is whatever object offers those calls.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pubswap.algorithms.evaluation import Score
from pubswap.lora import Adapter
from pubswap.run.events import EventLog


def mean(xs) -> float:
    return sum(xs) / len(xs) if xs else 0.0


class _NoBar:
    def write(self, line: str) -> None:
        print(line, flush=True)

    def update(self, n: int = 1) -> None:
        pass


def no_progress(total: int, desc: str):
    return nullcontext(_NoBar())


@dataclass
class RoundContext:
    """What the driver lends a round: the run's start time (for the step lines), the event log, in-round
    checkpoints (None: none; see jobs/train.py), and a progress bar factory (a context manager with
    write(line) and update())."""

    t0: float
    events: EventLog = field(default_factory=lambda: EventLog(None))
    inround: Any = None
    progress: Callable = no_progress


def eval_record(sc: Score) -> dict:
    """An evaluation's fields in metrics.jsonl (and the checkpoint's fixed state for the base model)."""
    return {
        "pass@1": sc.pass_at_1,
        "pass@1_se": sc.se,
        "eval_prompts": sc.prompts,
        "eval_n": sc.n,
        "format_rate": sc.format_rate,
        "pass@1_by_topic": sc.by_topic,
    }


def step_line(cfg, r: int, s: int, out: dict, elapsed: float) -> str:
    """The console's line for step s of round r."""
    f, clients = cfg.federation, out["clients"]
    rewards = " ".join(f"{c['reward_mean']:.2f}" for c in clients)
    kind = "public " if out["public"] else "private"
    extra = f" swapped_in {out['swapped_in']}" if out["public"] else ""
    gen = max(c["gen_s"] for c in clients)
    train = max(c["train_s"] for c in clients)
    return (
        f"round {r}/{f.rounds} step {s}/{f.tau} {kind} reward [{rewards}]{extra} "
        f"gen {gen:.1f}s train {train:.1f}s ({elapsed:.0f}s total)"
    )


def step_event(r: int, s: int, out: dict) -> dict:
    return {"round": r, "step": s, "public": bool(out["public"]), "reward": [c["reward_mean"] for c in out["clients"]]}


def step_done(ctx: RoundContext, bar, cfg, r: int, s: int, out: dict, note: str = "") -> None:
    """Say that step s ran: its console line (with `note`), its event."""
    bar.write(step_line(cfg, r, s, out, time.perf_counter() - ctx.t0) + note)
    ctx.events.emit("step", **step_event(r, s, out))
    sys.stdout.flush()


def round_record(
    r: int, parts: list[int], steps: list[dict], avg: list[dict], num_actors: int, adapter_bytes: int, comm: dict
) -> dict:
    """The round's metrics; per-client lists are in the order of `parts` (the round's participants)."""
    return {
        "round": r,
        "participants": parts,
        "steps": steps,
        "drift_sq": [a["drift_sq"] for a in avg],
        "time": {},  # the driver fills in the breakdown (pubswap/run/timing.py)
        # upload / download: what each participant sends and receives under the aggregation strategy
        # (values + positions for sparse payloads, in the dtype sent); public_pool: the public steps'
        # responses, up to the server and back (all clients). Adapters move between actors, not logical
        # clients: a ring allreduce among A actors sends 2(A-1)/A of the averaged tensors per actor.
        "bytes": {
            "adapter": adapter_bytes,
            "upload": comm["upload"],
            "download": comm["download"],
            "broadcast": num_actors * adapter_bytes,
            "allreduce": 2 * (num_actors - 1) * adapter_bytes,
            "public_pool": 2 * sum(st.get("pool_bytes", 0) for st in steps),
            # the FedSRD leaderboard's convention (fp32 values only, no positions), where a server round ran
            **{k: comm[k] for k in ("upload_board", "download_board") if k in comm},
        },
        "reward_mean": [mean([st["clients"][i]["reward_mean"] for st in steps]) for i in range(len(parts))],
    }


class Method:
    """A method family. Class attributes say what it is; the hooks run it. `name` is the configured
    federation.method (one family serves several names)."""

    names: ClassVar[tuple[str, ...]] = ()
    decentralized: ClassVar[bool] = False  # clients keep their own tensors across rounds (no global adapter)
    checkpoints_in_round: ClassVar[bool] = True  # checkpoint.every_steps applies

    def __init__(self, name: str):
        self.name = name

    # --- what it is ---------------------------------------------------------------------------

    @property
    def full_parameter(self) -> bool:
        """Every weight of the model is trained (no LoRA)."""
        return False

    @property
    def swap_rule(self) -> str | None:
        """'balanced', 'random' or None (no public steps)."""
        return None

    @property
    def gossip_rule(self) -> str | None:
        """dsgd | choco | seedflood for the serverless methods, else None."""
        return None

    @property
    def uses_prox(self) -> bool:
        return False

    def is_public_step(self, federation, step: int) -> bool:
        """Steps are numbered 1..tau."""
        return False

    def problem(self, cfg) -> tuple[str, str] | None:
        """(dotted key, why) of the first thing in `cfg` this method cannot run with, else None."""
        if self.full_parameter and cfg.rollout.backend != "hf":
            return (
                "rollout.backend",
                f"federation.method {self.name} trains every weight, so each client's rollouts need its own "
                "full weights: only the HF backend serves them (set rollout.backend: hf)",
            )
        return None

    # --- running it ---------------------------------------------------------------------------

    def prepare(self, cfg, split):
        """The config and split the rounds actually run (the centralized reference rewrites both)."""
        return cfg, split

    def initial_states(self, adapter: Adapter, num_clients: int) -> dict | None:
        """What the checkpoint keeps per client besides the global adapter before round 1 (None: nothing)."""
        return None

    def run_round(self, fed, cfg, r: int, start: Adapter, ctx: RoundContext) -> tuple[dict, Adapter, dict | None]:
        """Round r from `start` (the global adapter; every client holds it and its round-start state):
        returns the round's record, the adapter to commit, and the per-client states to commit."""
        raise NotImplementedError

    def evaluate(self, fed, cfg, r: int, average: Adapter, states: dict | None) -> dict:
        """Round r's evaluation fields, if one is due."""
        if not cfg.evaluation_due(r):
            return {}
        return eval_record(fed.evaluate(r))
