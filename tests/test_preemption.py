"""A whole-cluster preemption of a run whose run_dir is in object storage (a real S3 server on 127.0.0.1):
the driver and every Ray process of the cluster are SIGKILLed from outside after round 1, every local
folder of the run is deleted, and the same command on a fresh Ray resumes from the store to an adapter
bitwise equal to an uninterrupted run's."""

import shutil
import uuid

from ray_helpers import final_sha, ft_config, kill_cluster_when, metrics, run_driver, start_driver

from pubswap.run.checkpoint import list_rounds
from pubswap.run.storage import RunMirror


def test_whole_cluster_preemption_resumes_from_object_storage_bitwise(
    s3_server, ft_reference, digit_model_dir, tmp_path
):
    uri = f"s3://runs/{uuid.uuid4().hex[:8]}/preempted"
    cfg = ft_config(digit_model_dir, uri, "checkpoint.keep_last=1")
    node1, node2 = tmp_path / "node1", tmp_path / "node2"
    proc = start_driver(cfg, config_path=tmp_path / "run.yaml", env_extra={**s3_server, "PUBSWAP_SCRATCH": str(node1)})
    tree = kill_cluster_when(proc, "checkpoint round_0001")  # printed once round 1 is committed and pushed
    assert len(tree) > 3, "the driver's local Ray (GCS, raylet, workers) should have been running"
    shutil.rmtree(node1)  # every local file of the run is gone with the nodes

    done = run_driver(cfg, config_path=tmp_path / "run.yaml", env_extra={**s3_server, "PUBSWAP_SCRATCH": str(node2)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming after round 1" in done.stdout
    check = RunMirror(uri, tmp_path / "check")
    check.pull()
    assert final_sha(check.local) == final_sha(ft_reference)
    assert [r["round"] for r in metrics(check.local)] == [1, 2]
    # keep_last=1 keeps round 0, the best round and the newest: round 1 (pass@1 below round 2's) is pruned
    best = max(metrics(check.local), key=lambda r: r["pass@1"])["round"]
    assert list_rounds(check.local / "checkpoints") == sorted({0, best, 2})
    assert (check.local / "summary.json").is_file() and (check.local / "tensorboard").is_dir()
    assert not check.store.exists("LEASE")  # released at the end
