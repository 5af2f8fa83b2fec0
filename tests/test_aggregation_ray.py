"""Every aggregation strategy through the Ray path: 2 clients, 2 rounds of PubSwap Balanced (tau=3), the
digit model, HF rollouts. Linear strategies allreduce among the client actors; the others upload to the
ServerActor and every client applies its download. A client SIGKILLed while uploading in round 2 of a
FedSRD run (non-linear, sparse both ways, alternating factors) is restarted and the final adapter is
bitwise that of the uninterrupted run."""

import json

import pytest
import torch
from ray_helpers import final_sha, ft_config, metrics, run_driver

from jobs.train import train
from pubswap.lora import read_adapter
from pubswap.run.faults import ENV as FAULT_ENV

NEW = ["ffa-lora", "flexlora", "fed-dare", "fedsrd", "fedsrd-e", "fedicu"]
SHAS: dict[str, str] = {}


def adapters(run_dir):
    ck = run_dir / "checkpoints"
    return [read_adapter(ck / f"round_{r:04d}") for r in range(3)]


def changed(a, b, part):
    return any(not torch.equal(a[k], b[k]) for k in a if part in k)


@pytest.mark.parametrize("name", NEW)
def test_strategy_runs_two_rounds_through_ray(name, local_ray, digit_model_dir, tmp_path):
    cfg = ft_config(digit_model_dir, tmp_path / name, f"federation.aggregation={name}")
    train(cfg)
    records = metrics(cfg.run_dir)
    assert [r["round"] for r in records] == [1, 2]
    g0, g1, g2 = adapters(tmp_path / name)
    dense = sum(v.numel() * 4 for v in g0.values())  # every LoRA tensor, fp32
    b_only = sum(v.numel() * 4 for k, v in g0.items() if "lora_B" in k)
    a_only = dense - b_only
    up = [r["bytes"]["upload"] for r in records]
    down = [r["bytes"]["download"] for r in records]
    assert all(len(u) == 2 for u in up)
    if name == "ffa-lora":  # A never moves, B is all that travels
        assert not changed(g0, g2, "lora_A") and changed(g0, g2, "lora_B")
        assert up == down == [[b_only] * 2] * 2
    elif name == "flexlora":  # dense factors both ways, in the even gauge the server's SVD gives
        assert up == down == [[dense] * 2] * 2
        for k in g1:
            if "lora_A" in k:
                kb = k.replace("lora_A", "lora_B")
                assert torch.allclose(g1[kb].norm(dim=0), g1[k].norm(dim=1), atol=1e-5)
    elif name in ("fedsrd", "fedsrd-e"):  # round 1 moves B only, round 2 A only; sparse both ways
        assert changed(g0, g1, "lora_B") and not changed(g0, g1, "lora_A")
        assert changed(g1, g2, "lora_A") and not changed(g1, g2, "lora_B")
        assert all(0 < u < 0.2 * dense for r in up for u in r)
        assert down[0][0] < b_only and down[1][0] < a_only
    elif name == "fed-dare":  # sparse deltas up, their sparse mean down (the union of 2 masks: ~19%)
        assert changed(g0, g2, "lora_A") and changed(g0, g2, "lora_B")
        assert all(0 < u < 0.2 * dense for r in up for u in r) and all(0 < d < 0.3 * dense for r in down for d in r)
    else:  # fedicu: sparse deltas up, the dense adapter down
        assert changed(g0, g2, "lora_A") and changed(g0, g2, "lora_B")
        assert all(0 < u < 0.6 * dense for r in up for u in r) and down == [[dense] * 2] * 2
    # the leaderboard's convention beside the exact bytes: fp32 values only, never more than exact
    # here (fp32 everywhere) and equal where nothing is sparse
    for r in records:
        b = r["bytes"]
        for exact, board in ((b["upload"], b["upload_board"]), (b["download"], b["download_board"])):
            assert all(0 < x <= e for x, e in zip(board, exact))
            dense_here = name in ("ffa-lora", "flexlora") or (name == "fedicu" and exact is b["download"])
            assert (board == exact) == dense_here
    # every client holds what the checkpoint holds: the clients' evaluation used it, and the
    # driver's copy came from the server (non-linear) or the allreduce (linear)
    SHAS[name] = final_sha(cfg.run_dir)


def test_flexlora_with_per_client_ranks_through_ray(local_ray, digit_model_dir, tmp_path):
    """lora.r = [4, 8]: client 0 trains, sends and keeps 4 of the 8 components; the global stays rank 8."""
    cfg = ft_config(digit_model_dir, tmp_path / "run", "federation.aggregation=flexlora", "lora.r=[4, 8]")
    train(cfg)
    records = metrics(cfg.run_dir)
    g0, g1, g2 = adapters(tmp_path / "run")
    dense = sum(v.numel() * 4 for v in g0.values())
    for r in records:
        assert r["bytes"]["upload"] == r["bytes"]["download"] == [dense // 2, dense]
    assert all(v.shape[0] == 8 for k, v in g2.items() if "lora_A" in k)
    assert any(g2[k][4:].abs().sum() > 0 for k in g2 if "lora_A" in k)  # the server's global uses all 8


@pytest.fixture
def fedsrd_sha(local_ray, digit_model_dir, tmp_path):
    """The final adapter's sha of an uninterrupted FedSRD run: the one test_strategy_runs_two_rounds_through_ray
    made, or a new one when that test did not run (`-m heavy`, `-k`)."""
    if "fedsrd" not in SHAS:
        cfg = ft_config(digit_model_dir, tmp_path / "reference", "federation.aggregation=fedsrd")
        train(cfg)
        SHAS["fedsrd"] = final_sha(cfg.run_dir)
    return SHAS["fedsrd"]


@pytest.mark.heavy  # ~29 s
def test_a_client_killed_while_uploading_to_the_server_is_restarted_bitwise(fedsrd_sha, digit_model_dir, tmp_path):
    cfg = ft_config(digit_model_dir, tmp_path / "run", "federation.aggregation=fedsrd")
    fault = tmp_path / "fault.json"
    fault.write_text(json.dumps({"who": "client", "client": 1, "round": 2, "step": 0, "phase": "average"}))
    proc = run_driver(cfg, {FAULT_ENV: str(fault)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "fault.json.fired").exists()
    assert [r["recoveries"] for r in metrics(cfg.run_dir)] == [0, 1]
    assert final_sha(cfg.run_dir) == fedsrd_sha
