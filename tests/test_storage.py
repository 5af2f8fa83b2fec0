"""run_dir on object storage (pubswap/run/storage.py) against a real S3 server on 127.0.0.1 (moto_server):
a pulled mirror is an exact copy of the store, a checkpoint survives the round trip bitwise, a folder
whose upload was cut before its state.json is never used, and the lease guards the URI."""

import os
import subprocess
import sys
import uuid

import pytest
import torch

from pubswap.lora import peft_lora_config
from pubswap.run.checkpoint import latest_checkpoint, save_checkpoint
from pubswap.run.lease import Lease, LeaseHeld
from pubswap.run.storage import ObjectStore, RunMirror, is_uri

LORA = peft_lora_config(2, 4, ["q_proj"])


def adapter(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "base_model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.randn(2, 8, generator=g),
        "base_model.model.layers.0.self_attn.q_proj.lora_B.weight": torch.randn(8, 2, generator=g),
    }


@pytest.fixture
def uri(s3_server):
    return f"s3://runs/{uuid.uuid4().hex[:8]}/exp"


def commit_round(mirror: RunMirror, r: int) -> str:
    path = save_checkpoint(mirror.local / "checkpoints", r, adapter(r), LORA, {"config": {}, "record": None})
    mirror.push([f"checkpoints/{path.name}", "checkpoints/LATEST"])
    return latest_checkpoint(mirror.local / "checkpoints").state["weights_sha256"]


def test_uris_and_paths():
    assert is_uri("s3://b/p") and is_uri("gs://b") and not is_uri("/abs/runs") and not is_uri("runs/x")


def test_a_checkpoint_pushed_from_one_node_is_pulled_bitwise_on_another(uri, tmp_path):
    a = RunMirror(uri, tmp_path / "node_a")
    commit_round(a, 0)
    sha = commit_round(a, 1)
    (a.local / "metrics.jsonl").write_text('{"round": 1}\n')
    a.push(["metrics.jsonl"])
    b = RunMirror(uri, tmp_path / "node_b")
    assert b.local != a.local and b.pull() == 8  # 2 rounds x (weights, adapter_config, state) + LATEST + metrics
    ck = latest_checkpoint(b.local / "checkpoints")
    assert ck.round == 1 and ck.state["weights_sha256"] == sha
    assert torch.equal(
        ck.adapter()["base_model.model.layers.0.self_attn.q_proj.lora_B.weight"],
        adapter(1)["base_model.model.layers.0.self_attn.q_proj.lora_B.weight"],
    )
    assert (b.local / "metrics.jsonl").read_text() == '{"round": 1}\n'


def test_the_store_is_the_truth_a_stale_mirror_is_overwritten(uri, tmp_path):
    a = RunMirror(uri, tmp_path / "n")
    commit_round(a, 0)
    save_checkpoint(a.local / "checkpoints", 1, adapter(1), LORA, {"config": {}, "record": None})  # never pushed
    assert latest_checkpoint(a.local / "checkpoints").round == 1
    a.pull()
    assert latest_checkpoint(a.local / "checkpoints").round == 0
    assert not (a.local / "checkpoints" / "round_0001").exists()


def test_a_round_whose_upload_was_cut_is_never_used(uri, tmp_path):
    a = RunMirror(uri, tmp_path / "a")
    commit_round(a, 0)
    commit_round(a, 1)
    # round 1 is redone (other weights) and the connection drops while its folder is uploaded: the
    # weights went up, state.json (uploaded last) did not
    redo = save_checkpoint(a.local / "checkpoints", 1, adapter(7), LORA, {"config": {}, "record": None})
    upload = a.store.upload

    def cut(local, rel):
        if rel.endswith("state.json"):
            raise ConnectionError("connection reset by peer")
        upload(local, rel)

    a.store.upload = cut
    with pytest.raises(ConnectionError):
        a.push([f"checkpoints/{redo.name}"])
    b = RunMirror(uri, tmp_path / "b")
    b.pull()
    with pytest.warns(UserWarning, match="round_0001 is unusable"):
        assert latest_checkpoint(b.local / "checkpoints").round == 0


def test_the_lease_on_a_uri_refuses_a_second_live_driver_and_takes_over_a_dead_one(uri):
    store = ObjectStore(uri)
    first = Lease(None, ttl_s=4, store=store).acquire(say=lambda _: None)
    with pytest.raises(LeaseHeld, match="in use by a live driver"):
        Lease(None, ttl_s=4, store=ObjectStore(uri)).acquire(say=lambda _: None)
    first.release()
    assert not store.exists("LEASE")
    # a driver on this host that died holding it (a real process, SIGKILLed): taken over at once
    code = (
        "import sys, os, signal; from pubswap.run.lease import Lease; from pubswap.run.storage import ObjectStore; "
        f"Lease(None, ttl_s=4, store=ObjectStore({uri!r})).acquire(say=print); os.kill(os.getpid(), signal.SIGKILL)"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=os.environ, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9 and store.exists("LEASE")
    said = []
    Lease(None, ttl_s=4, store=store).acquire(say=said.append).release()
    assert any("took over the lease" in s and "dead driver" in s for s in said)
