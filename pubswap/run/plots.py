"""PNG plots of runs: pass@1 per round with its standard error (error bars; round 0 is the base model)
and the clients' mean training reward per round, one line per run. The driver draws its own run into
run_dir/progress.png after every round; `python -m jobs.report RUN_DIR... --plot out.png` draws several
side by side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class RunCurve:
    label: str
    rounds: list[int]  # evaluated rounds (0 = base model)
    pass_at_1: list[float]
    se: list[float]
    reward_rounds: list[int]
    reward: list[float]  # mean training reward over the round's clients and steps


def curve(label: str, base: dict | None, records: Sequence[dict]) -> RunCurve:
    """A run's curve from its base-model evaluation and its round records (metrics.jsonl)."""
    evals = ([(0, base)] if base and base.get("pass@1") is not None else []) + [
        (r["round"], r) for r in records if r.get("pass@1") is not None
    ]
    rewards = [(r["round"], sum(r["reward_mean"]) / len(r["reward_mean"])) for r in records if r.get("reward_mean")]
    return RunCurve(
        label,
        [x for x, _ in evals],
        [e["pass@1"] for _, e in evals],
        [e.get("pass@1_se") or 0.0 for _, e in evals],
        [x for x, _ in rewards],
        [y for _, y in rewards],
    )


def label_of(cfg: dict, name: str = "") -> str:
    """'pubswap-balanced tau=4' (+ the run's folder name when given)."""
    f = cfg["federation"]
    text = f"{f['method']} tau={f['tau']}"
    return f"{name}: {text}" if name else text


def plot(curves: Sequence[RunCurve], path: str | Path, title: str = "") -> Path:
    """Write the PNG (atomically: a temp file renamed into place) and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for c in curves:
        ax1.errorbar(c.rounds, c.pass_at_1, yerr=c.se, marker="o", capsize=3, label=c.label)
        ax2.plot(c.reward_rounds, c.reward, marker="o", label=c.label)
    ax1.set(xlabel="round (0 = base model)", ylabel="pass@1 on the test prompts (± SE)", title="evaluation")
    ax2.set(xlabel="round", ylabel="mean training reward", title="training reward (clients' mean)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)
    return path
