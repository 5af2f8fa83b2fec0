"""jobs.study: a grid of ordinary runs, the finished cells never rerun, a table over seeds."""

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ray_helpers import REPO, _driver_env, ft_config, write_config

from jobs.study import main, mean_se, parse_sets, read_study, set_pair
from pubswap.config import ConfigError


def grid(tmp_path, axes, **extra) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"base": "base.yaml", "axes": axes, **extra}, sort_keys=False))
    return path


def test_cells_are_every_combination_of_the_axes(tmp_path):
    path = grid(
        tmp_path,
        {
            "method": {"federation.method": ["fedavg-grpo", "pubswap-balanced"]},
            "schedule": {"short": {"federation.tau": 2, "federation.rounds": 6}, "long": {"federation.tau": 6}},
            "seed": {"seed": [0, 1, 2]},
        },
        overrides={"federation.rounds": 2},
        out=str(tmp_path / "out"),
    )
    cells = read_study(path).cells()
    assert len(cells) == 12 and len({c.name for c in cells}) == 12
    first = cells[0]
    assert first.name == "method=fedavg-grpo__schedule=short__seed=0"
    assert first.overrides == {
        "federation.rounds": 6,
        "federation.method": "fedavg-grpo",
        "federation.tau": 2,
        "seed": 0,
    }
    long = next(c for c in cells if c.labels["schedule"] == "long")
    assert long.overrides["federation.rounds"] == 2  # the common override where the axis sets none


@pytest.mark.parametrize(
    "axes,extra,message",
    [
        ({"seed": {"seed": [0]}}, {"seed_axis": "trial"}, "seed_axis 'trial'"),
        ({"seed": {"seed": []}}, {}, "axes.seed.seed has no values"),
        ({"seed": {"seed": [0]}}, {"compare_to": {"method": "x"}}, "compare_to method=x"),
        ({"seed": {"seed": [0]}}, {"bogus": 1}, "unknown key(s) ['bogus']"),
        ({"m": {"a": 1, "b": 2}}, {}, "axes.m must be"),
    ],
)
def test_a_bad_grid_names_what_is_wrong(tmp_path, axes, extra, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        read_study(grid(tmp_path, axes, **extra))


def test_a_bad_cell_stops_the_study_before_anything_runs(tmp_path, capsys):
    (tmp_path / "base.yaml").write_text((REPO / "configs/default.yaml").read_text())
    path = grid(tmp_path, {"seed": {"seed": [0]}, "k": {"federation.tau": [3, -1]}}, out=str(tmp_path / "out"))
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cell seed=0__k=-1") and "tau" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "bench,pair,message",
    [("fedsrd_reduced", "lr", "'lr' is not KEY=VALUE"), ("decentralized_reduced", "a=[1", "a: the value")],
)
def test_a_benchmarks_bad_set_pair_is_one_line_and_exit_2(tmp_path, bench, pair, message):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / f"{bench}.py"), "--out", str(out), "--set", "seed=1", pair],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith(f"{bench}.py: error:")
    assert not out.exists()


def test_set_pairs_read_values_as_yaml_and_a_later_pair_wins():
    for bad in ("lr", "=3", " =3", "a=[1"):
        with pytest.raises(argparse.ArgumentTypeError):
            set_pair(bad)
    assert parse_sets([set_pair("a.b=0.5"), set_pair("c=[1, 2]"), set_pair("a.b=x=y")]) == {"a.b": "x=y", "c": [1, 2]}


def test_mean_and_standard_error_over_seeds():
    mean, se = mean_se([0.2, 0.4, 0.6])
    assert mean == pytest.approx(0.4) and se == pytest.approx(0.2 / math.sqrt(3))
    assert math.isnan(mean_se([0.3])[1])


def test_a_study_runs_each_cell_once_and_reports_over_seeds(digit_model_dir, tmp_path):
    """FedAvg alone, then the grid grown by a method: only the new cell runs (the finished one is not
    touched); the table's values are the runs' own final pass@1, with the paired difference to FedAvg."""
    write_config(ft_config(digit_model_dir, tmp_path / "unused", "federation.rounds=1"), tmp_path / "base.yaml")
    out = tmp_path / "out"

    def study(methods):
        axes = {"method": {"federation.method": methods}, "seed": {"seed": [0]}}
        path = grid(tmp_path, axes, out=str(out), compare_to={"method": "fedavg-grpo"})
        proc = subprocess.run(
            [sys.executable, "-m", "jobs.study", str(path)],
            cwd=REPO,
            env=_driver_env(),
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    assert study(["fedavg-grpo"]).count(": done in") == 1
    fedavg_summary = out / "method=fedavg-grpo__seed=0" / "summary.json"
    mtime = fedavg_summary.stat().st_mtime_ns
    second = study(["fedavg-grpo", "pubswap-balanced"])
    assert second.count("finished earlier, not rerun") == 1 and second.count(": done in") == 1
    assert fedavg_summary.stat().st_mtime_ns == mtime  # the finished cell was not run again
    rows = {r["labels"]["method"]: r for r in json.loads((out / "study.json").read_text())}
    assert set(rows) == {"fedavg-grpo", "pubswap-balanced"}
    for method, r in rows.items():
        summary = json.loads((out / f"method={method}__seed=0" / "summary.json").read_text())
        assert r["seeds"] == ["0"] and r["per_seed"] == [summary["final_pass@1"]] == [r["final"][0]]
        assert r["gain"][0] == pytest.approx(summary["final_pass@1"] - summary["base_pass@1"])
        assert r["drift"] > 0
    diff = rows["pubswap-balanced"]["vs_ref"][0]
    assert diff == pytest.approx(rows["pubswap-balanced"]["final"][0] - rows["fedavg-grpo"]["final"][0])
    assert rows["fedavg-grpo"]["vs_ref"] is None
    assert (out / "study.png").stat().st_size > 0 and "| pubswap-balanced | 1 |" in (out / "study.md").read_text()
