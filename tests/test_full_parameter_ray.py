"""The full-parameter decentralized methods through the Ray path: DSGD and CHOCO-SGD gossip every
weight of the digit model (no LoRA), SeedFlood trains zeroth-order and floods (seed, scalar) messages;
4 clients on a ring, 2 per actor, HF rollouts."""

import json

import pytest
import torch
from ray_helpers import ft_config, metrics, run_driver
from safetensors.torch import load_file

from jobs.train import train
from pubswap.algorithms.gossip import SeedMessage, apply_messages
from pubswap.config import ConfigError
from pubswap.learner.full_model import WEIGHTS_NAME
from pubswap.run.checkpoint import latest_checkpoint, round_dir, verify
from pubswap.run.faults import ENV as FAULT_ENV
from pubswap.seeding import derive_seed

RING4 = ["federation.num_clients=4", "resources.num_actors=2", "federation.topology=ring"]


def base_weights(model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_full_parameter_dsgd_gossips_every_weight(local_ray, digit_model_dir, tmp_path):
    cfg = ft_config(
        digit_model_dir,
        tmp_path / "run",
        "federation.method=dsgd",
        *RING4,
        "federation.rounds=1",
        "federation.tau=2",
        "grpo.lr=1e-2",
    )
    train(cfg)
    (rec,) = metrics(tmp_path / "run")
    ck = latest_checkpoint(tmp_path / "run" / "checkpoints")
    base = base_weights(digit_model_dir)
    x = ck.client_states()["x"]
    # every client holds every weight of the model, not LoRA tensors
    assert sorted(x) == [0, 1, 2, 3] and set(x[0]) == set(base)
    model_bytes = sum(v.numel() * 4 for v in base.values())
    assert rec["bytes"]["upload"] == [2 * 2 * model_bytes] * 4  # 2 gossips x 2 neighbours x the model
    assert rec["bytes"]["per_edge"] == [model_bytes, model_bytes]
    # the base weights moved (embeddings and layers alike), and the clients differ
    moved = [n for n in base if not torch.equal(x[0][n], base[n])]
    assert "model.embed_tokens.weight" in moved and any(".mlp." in n for n in moved)
    assert any(not torch.equal(x[0][k], x[1][k]) for k in base)
    # the checkpoint is a model folder: the clients' average, loadable by transformers
    from transformers import AutoModelForCausalLM

    assert (ck.path / WEIGHTS_NAME).is_file() and (ck.path / "config.json").is_file()
    avg = load_file(str(ck.path / WEIGHTS_NAME))
    for k in avg:
        assert torch.allclose(avg[k], sum(x[c][k] for c in range(4)) / 4, atol=1e-7)
    loaded = AutoModelForCausalLM.from_pretrained(ck.path, dtype=torch.float32)
    assert torch.equal(dict(loaded.named_parameters())["model.embed_tokens.weight"], avg["model.embed_tokens.weight"])
    assert "pass@1" in rec and len(rec["client_pass@1"]) == 2


def test_seedflood_clients_rebuild_identical_weights_from_seeds(local_ray, digit_model_dir, tmp_path):
    cfg = ft_config(
        digit_model_dir,
        tmp_path / "run",
        "federation.method=seedflood",
        *RING4,
        "federation.rounds=1",
        "federation.tau=2",
        "federation.zo_lr=1e-2",
        "federation.zo_eps=1e-2",
    )
    train(cfg)
    (rec,) = metrics(tmp_path / "run")
    ck = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert ck.client_states() is None  # every client holds the checkpoint's model
    # one flood per step; on a 4-ring every message reaches everyone after 2 hops (the diameter)
    assert rec["flood_hops"] == [2, 2] and rec["consensus"] == [0.0, 0.0]
    # each flood: 4 messages of 20 bytes, each forwarded once by every client to its 2 neighbours
    assert rec["bytes"]["upload"] == [2 * 4 * SeedMessage.NBYTES * 2] * 4
    assert rec["bytes"]["download"] == rec["bytes"]["upload"]
    zo = {(st["step"], c["client"]): c for st in rec["steps"] for c in st["clients"]}
    assert sorted(zo) == [(s, c) for s in (1, 2) for c in range(4)] and all(c["updates"] == 1 for c in zo.values())
    # the model is the base plus the mean over the 4 clients of each flood's messages, rebuilt here from
    # their seeds and scalars alone
    scalars = {k: c["zo_scalar"] for k, c in zo.items()}
    assert any(v != 0.0 for v in scalars.values())
    x = base_weights(digit_model_dir)
    for step in (1, 2):
        msgs = [
            SeedMessage(
                step,
                c,
                derive_seed(cfg.seed, "seedflood", 1, step, c),
                float(torch.tensor(scalars[(step, c)], dtype=torch.float32)),
            )
            for c in range(4)
        ]
        x = apply_messages(x, msgs, scale=1 / 4)
    saved = ck.adapter()
    assert all(torch.equal(saved[k], x[k]) for k in x)


def test_full_parameter_methods_need_the_hf_backend(digit_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="rollout.backend"):
        ft_config(digit_model_dir, tmp_path / "run", "federation.method=chocosgd", *RING4, "rollout.backend=vllm")


# A client killed mid-gossip is CI-tested for CHOCO-LoRA (tests/test_decentralized_ray.py); the full-parameter
# drills run in `make test-heavy`, and SeedFlood's resume in CI below.
@pytest.mark.heavy
@pytest.mark.parametrize("method", ["chocosgd", "seedflood"])
def test_full_parameter_restart_and_resume_are_bitwise(local_ray, digit_model_dir, tmp_path, method):
    """A client actor SIGKILLs itself in round 2's gossip (CHOCO's messages, SeedFlood's flood): the
    round is redone from the checkpointed states and every weight ends bitwise equal to a clean run;
    so does a run resumed after round 1."""
    args = [
        f"federation.method={method}",
        *RING4,
        "federation.tau=2",
        "federation.zo_lr=1e-2",
        "federation.zo_eps=1e-2",
    ]
    train(ft_config(digit_model_dir, tmp_path / "ref", *args))
    cfg = ft_config(digit_model_dir, tmp_path / "run", *args)
    fault = tmp_path / "fault.json"
    fault.write_text(json.dumps({"who": "client", "client": 3, "round": 2, "step": 2, "phase": "gossip"}))
    proc = run_driver(cfg, {FAULT_ENV: str(fault)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "fault.json.fired").exists()
    assert [r["recoveries"] for r in metrics(tmp_path / "run")] == [0, 1]
    ck = latest_checkpoint(tmp_path / "run" / "checkpoints")
    ref = latest_checkpoint(tmp_path / "ref" / "checkpoints")
    assert ck.round == ref.round == 2
    assert ck.state["weights_sha256"] == ref.state["weights_sha256"]
    assert ck.state.get("clients_sha256") == ref.state.get("clients_sha256")  # CHOCO: every client and copy
    # a run stopped after round 1 and resumed (raised federation.rounds) ends bitwise where the clean one did
    train(ft_config(digit_model_dir, tmp_path / "resumed", *args, "federation.rounds=1"))
    train(ft_config(digit_model_dir, tmp_path / "resumed", *args))
    resumed = latest_checkpoint(tmp_path / "resumed" / "checkpoints")
    assert resumed.round == 2 and resumed.state["weights_sha256"] == ref.state["weights_sha256"]
    assert resumed.state.get("clients_sha256") == ref.state.get("clients_sha256")


def test_seedflood_resumed_after_round_one_ends_where_a_clean_run_does(local_ray, digit_model_dir, tmp_path):
    args = [
        "federation.method=seedflood",
        *RING4,
        "federation.tau=2",
        "federation.zo_lr=1e-2",
        "federation.zo_eps=1e-2",
    ]
    train(ft_config(digit_model_dir, tmp_path / "ref", *args))
    train(ft_config(digit_model_dir, tmp_path / "resumed", *args, "federation.rounds=1"))
    train(ft_config(digit_model_dir, tmp_path / "resumed", *args))
    ref = latest_checkpoint(tmp_path / "ref" / "checkpoints")
    resumed = latest_checkpoint(tmp_path / "resumed" / "checkpoints")
    assert ref.round == resumed.round == 2 and resumed.state["weights_sha256"] == ref.state["weights_sha256"]
    # round 2 moved the model: the equality is not that of two untouched models
    round1, _ = verify(round_dir(tmp_path / "resumed" / "checkpoints", 1))
    assert round1["weights_sha256"] != ref.state["weights_sha256"]
