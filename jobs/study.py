"""A study: a grid of ordinary runs, each resumable, the grid resumable as a whole, and one table and figure.

    python -m jobs.study configs/study/methods.yaml              # runs what is missing, then reports
    python -m jobs.study configs/study/methods.yaml --report     # the table and figure only

The grid file names a base config, overrides common to every cell, and axes:

    base: ../default.yaml              # relative to the grid file
    out: runs/study/methods            # the cells' run_dirs go under it (relative to the working directory)
    overrides: {federation.rounds: 4}
    seed_axis: seed                    # the axis the statistics are taken over (default: seed)
    compare_to: {method: fedavg-grpo}  # optional: paired differences against this value of one axis
    axes:
      method: {federation.method: [fedavg-grpo, pubswap-balanced]}   # one key, several values
      schedule:                                                       # coupled keys: one label each
        short: {federation.tau: 2, federation.rounds: 6}
        long: {federation.tau: 6, federation.rounds: 2}
      seed: {seed: [0, 1, 2]}

Every combination of the axes' values is a cell, run as `python -m jobs.train --config BASE run_dir=OUT/CELL
KEY=VALUE...` in its own process, one after another. A cell whose run finished all its rounds is not
run again; an unfinished one resumes from its last checkpoint (jobs.train's own resume), so a study
that was stopped goes on where it stopped, and adding a seed runs only the new cells. A cell that fails
is reported and the others still run; the exit status is then 1.

The report (OUT/study.md, OUT/study.json, OUT/study.png) has one row per combination of the axes other
than the seed axis: the final pass@1 as the mean over seeds with its standard error over seeds (and the
per-seed values), the gain over the base model (paired per seed), the clients' drift (the root mean of
the clients' squared distances to the average at aggregation, over the run's rounds), MiB per client
per round (adapter and public responses), and wall time. With compare_to, each row also gets its mean
paired difference to the row with the reference value (same other axes, same seed) and that
difference's standard error over seeds. The figure shows pass@1 per round per row (mean over seeds
with a band of one standard error) and the drift per round.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pubswap.config import ConfigError, load_config


@dataclass(frozen=True)
class Cell:
    name: str  # the run_dir's folder name
    labels: dict[str, str]  # axis -> value label
    overrides: dict[str, Any]  # config key -> value


@dataclass(frozen=True)
class Study:
    base: Path
    out: Path
    overrides: dict[str, Any]
    axes: dict[str, dict[str, dict[str, Any]]]  # axis -> label -> overrides
    seed_axis: str
    compare_to: tuple[str, str] | None

    def cells(self) -> list[Cell]:
        out = []
        names = list(self.axes)
        for combo in itertools.product(*(self.axes[a].items() for a in names)):
            labels = {a: label for a, (label, _) in zip(names, combo)}
            overrides = dict(self.overrides)
            for _, values in combo:
                overrides.update(values)
            out.append(Cell("__".join(f"{a}={_safe(labels[a])}" for a in names), labels, overrides))
        return out


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label)


def _axis(name: str, spec: Any, where: str) -> dict[str, dict[str, Any]]:
    """An axis as label -> overrides: {key: [v1, v2]} (one key, labelled by value) or {label: {key: v}}."""
    if not isinstance(spec, dict) or not spec:
        raise ConfigError(f"{where}: axes.{name} must be a non-empty mapping")
    if len(spec) == 1 and isinstance(next(iter(spec.values())), list):
        ((key, values),) = spec.items()
        if not values:
            raise ConfigError(f"{where}: axes.{name}.{key} has no values")
        return {str(v): {key: v} for v in values}
    if not all(isinstance(v, dict) and v for v in spec.values()):
        raise ConfigError(f"{where}: axes.{name} must be {{key: [values]}} or {{label: {{key: value, ...}}, ...}}")
    return {str(label): dict(v) for label, v in spec.items()}


def read_study(path: Path, out: Path | None = None) -> Study:
    if not path.is_file():
        raise ConfigError(f"study file not found: {path}")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    unknown = set(raw) - {"base", "out", "overrides", "axes", "seed_axis", "compare_to"}
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}")
    for key in ("base", "axes"):
        if key not in raw:
            raise ConfigError(f"{path}: missing key {key!r}")
    axes = raw["axes"]
    if not isinstance(axes, dict) or not axes:
        raise ConfigError(f"{path}: axes must be a non-empty mapping")
    parsed = {str(a): _axis(str(a), spec, str(path)) for a, spec in axes.items()}
    seed_axis = str(raw.get("seed_axis", "seed"))
    if seed_axis not in parsed:
        raise ConfigError(f"{path}: seed_axis {seed_axis!r} is not one of the axes {sorted(parsed)}")
    compare = raw.get("compare_to")
    if compare is not None:
        if not isinstance(compare, dict) or len(compare) != 1:
            raise ConfigError(f"{path}: compare_to must be one {{axis: value}}")
        ((axis, value),) = compare.items()
        if axis not in parsed or str(value) not in parsed[axis] or axis == seed_axis:
            raise ConfigError(f"{path}: compare_to {axis}={value} is not a value of a non-seed axis")
        compare = (str(axis), str(value))
    overrides = raw.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"{path}: overrides must be a mapping of config keys to values")
    out_dir = out or Path(raw.get("out") or Path("runs/study") / path.stem)
    return Study((path.parent / str(raw["base"])).resolve(), out_dir, overrides, parsed, seed_axis, compare)


def override_args(overrides: dict[str, Any]) -> list[str]:
    """`key=value` arguments for jobs.train, each value as JSON (YAML flow style, which its overrides
    parse: a string stays a string even where it reads as a number)."""
    return [f"{k}={json.dumps(v)}" for k, v in overrides.items()]


def set_pair(text: str) -> tuple[str, Any]:
    """One `key=value` override (a benchmark's --set, as argparse's type=): the value read as YAML. A pair
    without `=`, with an empty key or a value YAML cannot read is argparse's usage error (one line, exit 2)."""
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as e:
        raise argparse.ArgumentTypeError(f"{key}: the value is not YAML ({str(e).splitlines()[0]})") from None


def parse_sets(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The --set pairs (set_pair's) as one overrides dict; a later pair wins."""
    return dict(pairs)


def check_cells(study: Study) -> None:
    """Every cell's config validates before anything runs (a bad key names the cell and exits 2)."""
    for cell in study.cells():
        try:
            load_config(study.base, [*override_args(cell.overrides), f"run_dir={study.out / cell.name}"])
        except ConfigError as e:
            raise ConfigError(f"cell {cell.name}: {e}") from None


def finished(run_dir: Path) -> bool:
    """The run finished every round its config asks for."""
    summary, config = run_dir / "summary.json", run_dir / "config.json"
    if not (summary.is_file() and config.is_file()):
        return False
    rounds = json.loads(config.read_text())["federation"]["rounds"]
    return json.loads(summary.read_text()).get("rounds") == rounds


def run_cells(study: Study, log=print) -> list[str]:
    """Run the cells that have not finished, one after another; the names of those that failed."""
    cells = study.cells()
    failed = []
    study.out.mkdir(parents=True, exist_ok=True)
    for i, cell in enumerate(cells, 1):
        run_dir = study.out / cell.name
        if finished(run_dir):
            log(f"[{i}/{len(cells)}] {cell.name}: finished earlier, not rerun")
            continue
        log(f"[{i}/{len(cells)}] {cell.name}: {'resuming' if run_dir.exists() else 'running'}")
        t = time.perf_counter()
        cmd = [sys.executable, "-m", "jobs.train", "--config", str(study.base), *override_args(cell.overrides)]
        with open(study.out / f"{cell.name}.log", "a") as out:
            rc = subprocess.run([*cmd, f"run_dir={run_dir}"], stdout=out, stderr=subprocess.STDOUT).returncode
        if rc != 0 or not finished(run_dir):
            failed.append(cell.name)
            log(f"[{i}/{len(cells)}] {cell.name}: FAILED (exit {rc}; {study.out / cell.name}.log)")
        else:
            log(f"[{i}/{len(cells)}] {cell.name}: done in {time.perf_counter() - t:.0f}s")
    return failed


# --- statistics over seeds ---------------------------------------------------------------------------


def mean_se(xs: list[float]) -> tuple[float, float]:
    """The mean and its standard error over the values (sample std / sqrt(n); nan for one value)."""
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1) / n)


def read_cell(run_dir: Path) -> dict:
    from jobs.report import comm_mb

    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    drift = [(r["round"], math.sqrt(sum(r["drift_sq"]) / len(r["drift_sq"]))) for r in records if r.get("drift_sq")]
    curve = [(0, summary["base_pass@1"])] + [(r["round"], r["pass@1"]) for r in records if "pass@1" in r]
    mb = comm_mb(run_dir)
    return {
        "final": summary["final_pass@1"],
        "base": summary["base_pass@1"],
        "wall_s": summary.get("wall_s"),
        "drift": sum(d for _, d in drift) / len(drift) if drift else None,
        "drift_by_round": drift,
        "curve": curve,
        "mb": (mb["adapter_mb"] or 0.0) + (mb["public_mb"] or 0.0) if mb["adapter_mb"] is not None else None,
    }


def summarize(study: Study) -> list[dict]:
    """One row per combination of the non-seed axes, over the seeds whose cells finished."""
    groups: dict[tuple, dict[str, dict]] = {}
    for cell in study.cells():
        run_dir = study.out / cell.name
        if not finished(run_dir):
            continue
        key = tuple((a, cell.labels[a]) for a in study.axes if a != study.seed_axis)
        groups.setdefault(key, {})[cell.labels[study.seed_axis]] = read_cell(run_dir)
    rows = []
    for key, by_seed in groups.items():
        seeds = sorted(by_seed)
        finals = [by_seed[s]["final"] for s in seeds]
        gains = [by_seed[s]["final"] - by_seed[s]["base"] for s in seeds]

        def mean_of(field: str, seeds=seeds, by_seed=by_seed) -> float | None:
            xs = [by_seed[s][field] for s in seeds if by_seed[s][field] is not None]
            return sum(xs) / len(xs) if xs else None

        rows.append(
            {
                "labels": dict(key),
                "seeds": seeds,
                "final": mean_se(finals),
                "per_seed": finals,
                "gain": mean_se(gains),
                "drift": mean_of("drift"),
                "mb": mean_of("mb"),
                "wall_s": mean_of("wall_s"),
                "by_seed": by_seed,
            }
        )
    if study.compare_to:
        axis, value = study.compare_to
        for row in rows:
            ref = next(
                (
                    r
                    for r in rows
                    if r["labels"][axis] == value
                    and all(r["labels"][a] == row["labels"][a] for a in row["labels"] if a != axis)
                ),
                None,
            )
            common = sorted(set(row["by_seed"]) & set(ref["by_seed"])) if ref is not None else []
            diffs = [row["by_seed"][s]["final"] - ref["by_seed"][s]["final"] for s in common]
            row["vs_ref"] = mean_se(diffs) if diffs and row is not ref else None
    return rows


def pm(x: tuple[float, float] | None, signed: bool = False, scale: float = 100.0) -> str:
    """ "36.9 ± 1.2" (percentage points); the mean alone with one seed; signed for differences."""
    if x is None:
        return "-"
    mean, se = x
    text = f"{scale * mean:+.1f}" if signed else f"{scale * mean:.1f}"
    return text if math.isnan(se) else f"{text} ± {scale * se:.1f}"


def table(study: Study, rows: list[dict]) -> str:
    axes = [a for a in study.axes if a != study.seed_axis]
    head = [*axes, "seeds", "final pass@1 (%)", "per seed", "gain over base", "drift", "MiB/client/round", "wall s"]
    if study.compare_to:
        head.append(f"vs {study.compare_to[0]}={study.compare_to[1]} (paired)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cols = [r["labels"][a] for a in axes] + [
            str(len(r["seeds"])),
            pm(r["final"]),
            " ".join(f"{100 * x:.1f}" for x in r["per_seed"]),
            pm(r["gain"], signed=True),
            "-" if r["drift"] is None else f"{r['drift']:.3g}",
            "-" if r["mb"] is None else f"{r['mb']:.2f}",
            "-" if r["wall_s"] is None else f"{r['wall_s']:.0f}",
        ]
        if study.compare_to:
            cols.append(pm(r.get("vs_ref"), signed=True))
        lines.append("| " + " | ".join(cols) + " |")
    lines.append(
        f"\nMeans over the seeds (axis {study.seed_axis}) with their standard errors over seeds; gain and "
        "paired differences are taken per seed, then averaged. Drift: root mean squared distance of the "
        "clients' adapters to their average at aggregation, averaged over rounds."
    )
    return "\n".join(lines)


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in rows:
        label = " ".join(f"{v}" for v in r["labels"].values()) or "all"
        curves = [dict(c["curve"]) for c in r["by_seed"].values()]
        rounds = sorted(set.intersection(*(set(c) for c in curves)))
        stats = [mean_se([c[x] for c in curves]) for x in rounds]
        means = [100 * m for m, _ in stats]
        ses = [0.0 if math.isnan(s) else 100 * s for _, s in stats]
        ax1.plot(rounds, means, marker="o", label=label)
        ax1.fill_between(rounds, [m - s for m, s in zip(means, ses)], [m + s for m, s in zip(means, ses)], alpha=0.2)
        drifts = [dict(c["drift_by_round"]) for c in r["by_seed"].values()]
        d_rounds = sorted(set.intersection(*(set(d) for d in drifts))) if drifts else []
        if d_rounds:
            ax2.plot(d_rounds, [sum(d[x] for d in drifts) / len(drifts) for x in d_rounds], marker="o", label=label)
    ax1.set(xlabel="round (0 = base model)", ylabel="pass@1 (%)", title="pass@1, mean over seeds ± SE")
    ax2.set(xlabel="round", ylabel="client drift (RMS distance)", title="drift at aggregation")
    ax1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(study: Study) -> str:
    rows = summarize(study)
    text = table(study, rows)
    study.out.mkdir(parents=True, exist_ok=True)
    (study.out / "study.md").write_text(text + "\n")
    plain = [{k: v for k, v in r.items() if k != "by_seed"} for r in rows]
    (study.out / "study.json").write_text(json.dumps(plain, indent=1) + "\n")
    if rows:
        figure(rows, study.out / "study.png")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", type=Path, help="the grid file (YAML)")
    ap.add_argument("--out", type=Path, help="where the cells' run_dirs go (default: the file's `out`)")
    ap.add_argument("--report", action="store_true", help="only write the table and figure of finished cells")
    args = ap.parse_args(argv)
    try:
        study = read_study(args.study, args.out)
        check_cells(study)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cells = study.cells()
    print(f"study {args.study}: {len(cells)} cells in {study.out}", flush=True)
    failed = [] if args.report else run_cells(study, log=lambda m: print(m, flush=True))
    print(report(study))
    print(f"wrote {study.out / 'study.md'}, study.json, study.png")
    if failed:
        print(f"{len(failed)} cell(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
