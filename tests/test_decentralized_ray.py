"""Serverless training through the Ray path: every client gossips its LoRA tensors with its ring
neighbours only (DSGD-LoRA, CHOCO-SGD-LoRA), hosted 2 per actor, the digit model, HF rollouts."""

import json

import pytest
import torch
from ray_helpers import ft_config, metrics, run_driver

from jobs.train import train
from pubswap.lora import read_adapter, squared_distance
from pubswap.run.checkpoint import latest_checkpoint
from pubswap.run.faults import ENV as FAULT_ENV

DECENTRAL = ["federation.num_clients=4", "resources.num_actors=2", "federation.tau=2", "federation.topology=ring"]


def states_of(run_dir, r):
    ck = latest_checkpoint(run_dir / "checkpoints")
    assert ck.round == r
    return ck, ck.client_states()


def test_dsgd_lora_gossips_with_ring_neighbours_and_keeps_every_client_state(local_ray, digit_model_dir, tmp_path):
    cfg = ft_config(digit_model_dir, tmp_path / "run", "federation.method=dsgd-lora", *DECENTRAL)
    train(cfg)
    records = metrics(cfg.run_dir)
    ck, states = states_of(tmp_path / "run", 2)
    x = states["x"]
    assert sorted(x) == [0, 1, 2, 3] and states["public"] == {}
    # no rounds to reset at: each client's AdamW counts every update of both rounds, and the checkpoint keeps it
    for c in range(4):
        done = sum(
            cl["updates"] - cl["skipped_updates"]
            for r in records
            for st in r["steps"]
            for cl in st["clients"]
            if cl["client"] == c
        )
        assert done > 0 and float(states["opt"][c]["0/step"]) == done
    adapter_bytes = sum(v.numel() * v.element_size() for v in x[0].values())
    for rec in records:
        assert [st["step"] for st in rec["steps"]] == [1, 2] and not any(st["public"] for st in rec["steps"])
        assert len(rec["consensus"]) == 2  # a gossip after each local step
        # each gossip: the whole adapter to each of 2 ring neighbours, and 2 received
        assert rec["bytes"]["upload"] == rec["bytes"]["download"] == [2 * 2 * adapter_bytes] * 4
    # no global model: the clients differ, and the checkpoint's adapter is their average
    assert any(not torch.equal(x[0][k], x[1][k]) for k in x[0])
    avg = read_adapter(ck.path)
    for k in avg:
        assert torch.allclose(avg[k], sum(x[c][k] for c in range(4)) / 4, atol=1e-7)
    # the last gossip ended the round: its consensus distance is the clients' mean squared distance to
    # their average, computed here from the checkpoint
    mean_sq = sum(squared_distance(x[c], avg).item() for c in range(4)) / 4
    assert records[-1]["consensus"][-1] == pytest.approx(mean_sq, rel=1e-3)
    assert "pass@1" in records[-1]
    sampled = records[-1]["client_pass@1"]  # and 2 sampled clients' own adapters
    assert len(sampled) == 2 and all(0.0 <= p <= 1.0 for p in sampled.values())


def test_chocosgd_with_the_identity_compressor_is_dsgd_through_the_actors(local_ray, digit_model_dir, tmp_path):
    """One local step and one gossip (later steps would sample from weights that differ by rounding, and
    sampling amplifies that): the actors' public copies, neighbour sets and messages reproduce DSGD."""
    one = [*DECENTRAL, "federation.rounds=1", "federation.tau=1"]
    train(ft_config(digit_model_dir, tmp_path / "dsgd", "federation.method=dsgd-lora", *one))
    train(
        ft_config(
            digit_model_dir,
            tmp_path / "choco",
            "federation.method=chocosgd-lora",
            *one,
            "federation.choco_compressor=identity",
            "federation.choco_gamma=1.0",
        )
    )
    _, d = states_of(tmp_path / "dsgd", 1)
    _, c = states_of(tmp_path / "choco", 1)
    assert any(not torch.equal(d["x"][0][k], d["x"][1][k]) for k in d["x"][0])  # they trained and mixed
    for i in range(4):
        for k in d["x"][i]:
            assert torch.allclose(c["x"][i][k], d["x"][i][k], atol=1e-6, rtol=0), (i, k)


def test_chocosgd_lora_client_killed_while_gossiping_is_restarted_bitwise(local_ray, digit_model_dir, tmp_path):
    ref_cfg = ft_config(digit_model_dir, tmp_path / "ref", "federation.method=chocosgd-lora", *DECENTRAL)
    train(ref_cfg)
    _, ref_states = states_of(tmp_path / "ref", 2)
    assert sorted(ref_states["public"]) == [0, 1, 2, 3]  # the public copies are checkpointed
    ref_bytes = metrics(ref_cfg.run_dir)[0]["bytes"]["upload"]
    dense = sum(v.numel() * 4 for v in ref_states["x"][0].values())
    assert all(0 < b < 0.5 * 2 * 2 * dense for b in ref_bytes)  # top-10% values + int32 positions

    cfg = ft_config(digit_model_dir, tmp_path / "run", "federation.method=chocosgd-lora", *DECENTRAL)
    fault = tmp_path / "fault.json"
    fault.write_text(json.dumps({"who": "client", "client": 2, "round": 2, "step": 2, "phase": "gossip"}))
    proc = run_driver(cfg, {FAULT_ENV: str(fault)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "topology: ring, 4 clients, 4 edges, degree 2-2, diameter 2, spectral gap 0.6667" in proc.stdout
    assert (tmp_path / "fault.json.fired").exists()
    assert [r["recoveries"] for r in metrics(cfg.run_dir)] == [0, 1]
    ck, states = states_of(tmp_path / "run", 2)
    ref_ck, _ = states_of(tmp_path / "ref", 2)
    assert ck.state["clients_sha256"] == ref_ck.state["clients_sha256"]  # every client's state, bitwise
    assert ck.state["weights_sha256"] == ref_ck.state["weights_sha256"]


def test_one_round_of_128_logical_clients_on_a_ring(local_ray, digit_model_dir, tmp_path):
    cfg = ft_config(
        digit_model_dir,
        tmp_path / "run",
        "federation.method=dsgd-lora",
        "federation.num_clients=128",
        "resources.num_actors=2",
        "federation.rounds=1",
        "federation.tau=1",
        "federation.topology=ring",
        "data.per_client=4",
        "grpo.b=1",
        "grpo.K=2",
        "data.public_size=4",
        "data.test_size=4",
    )
    train(cfg)
    (rec,) = metrics(cfg.run_dir)
    _, states = states_of(tmp_path / "run", 1)
    assert sorted(states["x"]) == list(range(128)) and len(rec["bytes"]["upload"]) == 128
    assert len(rec["consensus"]) == 1 and rec["consensus"][0] > 0
