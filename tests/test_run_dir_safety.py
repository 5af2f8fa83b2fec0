"""Nothing of a run is lost silently: a run_dir whose run has no verifiable checkpoint is refused untouched
(exit 2, one line per folder) until --start-over, which also collects the temp files of killed writers;
a full disk during a checkpoint leaves the previous one and no temp folder; old rounds are pruned; a
relative run_dir under `ray job submit` is a config error."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ray_helpers import REPO, final_sha, ft_config, run_driver, write_config

from jobs import train as train_mod
from pubswap.lora import peft_lora_config
from pubswap.run.checkpoint import latest_checkpoint, list_rounds, prune, save_checkpoint

LORA = peft_lora_config(2, 4, ["q_proj"])


def adapter(value: float, n: int = 4) -> dict:
    return {
        "base_model.model.layers.0.q_proj.lora_A.weight": torch.full((2, n), value),
        "base_model.model.layers.0.q_proj.lora_B.weight": torch.full((n, 2), -value),
    }


def snapshot(folder: Path) -> dict:
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def broken_run(digit_model_dir, tmp_path):
    """A run_dir of two rounds whose weights were both damaged (bad storage), with metrics and a stale temp
    folder, lease temp file and metrics temp file of a killed writer."""
    cfg = ft_config(digit_model_dir, tmp_path / "run")
    ckpts = Path(cfg.run_dir) / "checkpoints"
    for r in (0, 1):
        path = save_checkpoint(ckpts, r, adapter(float(r)), LORA, {"config": cfg.to_dict(), "record": None})
        weights = path / "adapter_model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
    (Path(cfg.run_dir) / "metrics.jsonl").write_text('{"round": 1}\n')
    (ckpts / ".round_0002.k1ll3d").mkdir()
    (ckpts / ".round_0002.k1ll3d" / "adapter_model.safetensors").write_bytes(b"half")
    (Path(cfg.run_dir) / ".metrics.jsonl.x9").write_text("torn")
    (Path(cfg.run_dir) / ".LEASE.deadbeef.1").write_text("{}")
    return cfg


def test_a_run_that_cannot_be_resumed_is_refused_untouched(broken_run, capsys):
    before = snapshot(Path(broken_run.run_dir))
    assert train_mod.main(["--config", str(write_config(broken_run))]) == 2
    err = capsys.readouterr().err
    assert "holds a run (2 round folders, metrics.jsonl of 1 rounds) but no checkpoint of it verifies" in err
    assert "round_0001: adapter_model.safetensors does not match its sha256" in err
    assert "round_0000: adapter_model.safetensors does not match its sha256" in err
    assert "--start-over" in err
    assert snapshot(Path(broken_run.run_dir)) == before  # not a byte, not a timestamp


def test_start_over_discards_it_collects_stale_temp_and_trains_to_the_reference(broken_run, ft_reference):
    done = run_driver(broken_run, args=("--start-over",))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "removed .round_0002.k1ll3d, left by a killed writer" in done.stdout
    assert "--start-over: removed the previous run's files" in done.stdout
    run_dir = Path(broken_run.run_dir)
    leftovers = [p.name for d in (run_dir, run_dir / "checkpoints") for p in d.iterdir() if p.name.startswith(".")]
    assert leftovers == []
    assert final_sha(run_dir) == final_sha(ft_reference)


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
import torch
sys.path.insert(0, {tests!r})
from test_run_dir_safety import LORA, adapter
from pubswap.run.checkpoint import StorageFull, save_checkpoint
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as a full disk does
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
try:
    save_checkpoint(Path({ckpts!r}), 1, adapter(1.0, n=8192), LORA, {{"record": None}})
except StorageFull as e:
    print("StorageFull:", e)
"""


def test_a_full_disk_during_a_checkpoint_leaves_the_previous_one_and_no_temp_folder(tmp_path):
    ckpts = tmp_path / "checkpoints"
    save_checkpoint(ckpts, 0, adapter(0.0), LORA, {"record": None})
    proc = subprocess.run(
        [sys.executable, "-c", FULL_DISK.format(tests=str(REPO / "tests"), ckpts=str(ckpts))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "StorageFull: no space left to write checkpoint" in proc.stdout, proc.stderr[-2000:]
    assert latest_checkpoint(ckpts).round == 0 and (ckpts / "LATEST").read_text() == "round_0000\n"
    assert sorted(p.name for p in ckpts.iterdir()) == ["LATEST", "round_0000"]


def test_the_driver_exits_4_on_a_full_disk_and_the_supervisor_does_not_retry_it():
    from jobs.supervise import FINAL_EXIT_CODES

    assert train_mod.EXIT_STORAGE_FULL == 4 and 4 in FINAL_EXIT_CODES
    e = OSError(28, "No space left on device")
    wrapped = RuntimeError("round 2 failed")
    wrapped.__cause__ = e
    from pubswap.run.checkpoint import storage_full

    assert storage_full(wrapped) and not storage_full(OSError(13, "Permission denied"))
    from safetensors import SafetensorError

    assert storage_full(SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"))


def test_prune_keeps_round_0_the_best_and_the_newest(tmp_path):
    for r in range(7):
        save_checkpoint(tmp_path, r, adapter(float(r)), LORA, {"record": None})
    (tmp_path / "round_0003" / "keep").write_text("")  # the best round: kept whatever its age
    assert prune(tmp_path, 2, {3}) == ["round_0001", "round_0002", "round_0004"]
    assert list_rounds(tmp_path) == [0, 3, 5, 6]
    assert prune(tmp_path, 0, set()) == [] and list_rounds(tmp_path) == [0, 3, 5, 6]  # 0 keeps all


def test_a_relative_run_dir_under_ray_job_submit_is_a_config_error(digit_model_dir, tmp_path, monkeypatch, capsys):
    cfg = ft_config(digit_model_dir, tmp_path / "run")
    path = write_config(cfg)
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")  # what Ray's job supervisor sets for the driver
    monkeypatch.chdir(tmp_path)
    assert train_mod.main(["--config", str(path), "run_dir=runs/x"]) == 2
    assert "config error: run_dir=runs/x is relative: under `ray job submit`" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR")
    train_mod.check_run_dir_for_jobs("runs/x")  # outside a job a relative run_dir is fine
    os.environ["RAY_JOB_CONFIG_JSON_ENV_VAR"] = "{}"
    try:
        train_mod.check_run_dir_for_jobs("s3://bucket/runs/x")
        train_mod.check_run_dir_for_jobs("/shared/runs/x")
    finally:
        del os.environ["RAY_JOB_CONFIG_JSON_ENV_VAR"]
