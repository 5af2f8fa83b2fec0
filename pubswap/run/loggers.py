"""Metrics where users look: TensorBoard event files (always on by default) and, optionally, W&B.

`logger` in the config lists the sinks: `[console, tensorboard]` by default; add `wandb` to also log to
Weights & Biases (needs `pip install wandb`; off by default, never required). Console lines are printed
by the driver; this module turns the round records of metrics.jsonl into scalars:

  per step (x = global step = (round - 1) * tau + step), aggregated over the step's clients and, under
  `client_{id}/`, per client, with VERL's names (TRL's where VERL has none):
    critic/rewards/mean, critic/rewards/std, critic/frac_reward_zero_std, response_length/mean,
    response_length/clip_ratio, actor/pg_loss, actor/kl_loss, actor/pg_clipfrac, actor/grad_norm,
    actor/entropy, actor/loss, timing_s/gen, timing_s/train, perf/throughput (response tokens / s),
    fed/off_policy (swapped-in responses trained on), fed/swapped_in, fed/missing_donors
  per round (x = the round's last global step):
    val/pass@1, val/pass@1_se, val/format_rate, fed/participants, fed/drift_sq, fed/bytes_*,
    timing_s/round, timing_s/{gen,sync,train,eval,avg,other,wait,driver} (the round's time breakdown)

Resuming: the driver keeps the records of committed rounds only (metrics.jsonl is cut back to the
checkpoint), so the TensorBoard folder is rewritten from those records at start and then continues:
a resumed run's event files hold every step once.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

LOGGERS = ("console", "tensorboard", "wandb")
TB_DIR = "tensorboard"

_STEP_KEYS = {  # client step metric -> scalar name
    "reward_mean": "critic/rewards/mean",
    "reward_std": "critic/rewards/std",
    "zero_adv_frac": "critic/frac_reward_zero_std",
    "response_length_mean": "response_length/mean",
    "response_clip_ratio": "response_length/clip_ratio",
    "pg_loss": "actor/pg_loss",
    "kl": "actor/kl_loss",
    "clip_frac": "actor/pg_clipfrac",
    "grad_norm": "actor/grad_norm",
    "entropy": "actor/entropy",
    "loss": "actor/loss",
    "gen_s": "timing_s/gen",
    "train_s": "timing_s/train",
    "off_policy": "fed/off_policy",
    "inert_frac": "actor/inert_row_frac",
}


def step_scalars(step: dict) -> dict[str, float]:
    """One step of a round record -> {name: value}: the mean over its clients, and each client's own."""
    out: dict[str, float] = {}
    clients = step["clients"]
    for key, name in _STEP_KEYS.items():
        values = [c[key] for c in clients if key in c]
        if values:
            out[name] = sum(values) / len(values)
        for c in clients:
            if key in c:
                out[f"client_{c['client']}/{name}"] = c[key]
    tokens = sum(c.get("response_tokens", 0) for c in clients)
    wall = max((c.get("gen_s", 0.0) + c.get("train_s", 0.0) for c in clients), default=0.0)
    if wall > 0:
        out["perf/throughput"] = tokens / wall
    if step.get("public"):
        out["fed/swapped_in"] = sum(step.get("swapped_in", []))
        out["fed/missing_donors"] = float(sum(step.get("missing_donors") or []))  # per client in the record
    return out


def round_scalars(record: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, name in (("pass@1", "val/pass@1"), ("pass@1_se", "val/pass@1_se"), ("format_rate", "val/format_rate")):
        if record.get(key) is not None:
            out[name] = record[key]
    out["fed/participants"] = len(record.get("participants", []))
    drift = record.get("drift_sq") or []
    if drift:
        out["fed/drift_sq"] = sum(drift) / len(drift)
    for key, value in (record.get("bytes") or {}).items():  # upload / download: per participant, logged as the mean
        out[f"fed/bytes_{key}"] = sum(value) / len(value) if isinstance(value, list) else value
    t = record.get("time") or {}
    if "round_s" in t:
        out["timing_s/round"] = t["round_s"]
    for key in ("gen", "sync", "train", "eval", "avg", "other", "wait", "driver"):
        if f"{key}_s" in t:
            out[f"timing_s/round_{key}"] = t[f"{key}_s"]
    return out


class RunLogger:
    """The run's metric sinks; `log_round` after each committed round."""

    def __init__(
        self,
        run_dir: str | Path,
        names: Sequence[str],
        tau: int,
        config: dict | None = None,
        records: Sequence[dict] = (),
    ):
        """`records`: the committed rounds so far (a resumed run); they are written again from scratch."""
        self.tau = tau
        self.tb = self.wandb = None
        if "tensorboard" in names:
            from torch.utils.tensorboard import SummaryWriter

            folder = Path(run_dir) / TB_DIR
            shutil.rmtree(folder, ignore_errors=True)  # rebuilt from the committed records: no duplicate steps
            self.tb = SummaryWriter(str(folder))
        if "wandb" in names:
            import wandb

            self.wandb = wandb.init(
                project="pubswap",
                name=Path(run_dir).name,
                dir=str(run_dir),
                config=config,
                id=_wandb_id(run_dir),
                resume="allow",
            )
        for record in records:
            self.log_round(record, replay=True)

    def log_round(self, record: dict, replay: bool = False) -> None:
        base = (record["round"] - 1) * self.tau
        for step in record.get("steps", []):
            self._write(step_scalars(step), base + step["step"], replay)
        self._write(round_scalars(record), base + self.tau, replay)
        if self.tb is not None:
            self.tb.flush()

    def _write(self, scalars: dict[str, float], step: int, replay: bool) -> None:
        if self.tb is not None:
            for name, value in scalars.items():
                self.tb.add_scalar(name, value, step)
        if self.wandb is not None and not replay:  # W&B keeps its own history across a resume
            self.wandb.log(scalars, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _wandb_id(run_dir: str | Path) -> str:
    import hashlib

    return hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
