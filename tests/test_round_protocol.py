"""Integration: the four methods on a local Ray cluster, 2 clients, 2 rounds, tiny model (HF rollouts).

Asserts the protocol really happened: public steps at the right step numbers, swapped-in responses
came from other clients (and, for Balanced, were correct), the trainer saw exactly those off-policy
responses, and per-round metrics and adapters were written.
"""

import json
import time

import pytest
import torch
from ray_helpers import tiny_config

from jobs.train import train
from pubswap.lora import read_adapter
from pubswap.methods.federated import Federated


def public_steps(record):
    return [st["step"] for st in record["steps"] if st["public"]]


def check_time_accounting(record: dict, measured_s: float) -> None:
    """Each actor's phases + its waiting + the driver's own time add up to the round's wall time,
    measured from outside the driver (within 1%); no part is negative."""
    t = record["time"]
    assert len(t["actors"]) == 2 and t["driver_s"] >= 0 and t["calls_s"] > 0
    for parts in t["actors"]:
        assert set(parts) == {"gen", "sync", "train", "eval", "avg", "other", "wait"}
        assert all(v >= 0 for v in parts.values()), parts
        assert parts["gen"] > 0 and parts["train"] > 0 and parts["avg"] > 0 and parts["eval"] > 0
        assert sum(parts.values()) + t["driver_s"] == pytest.approx(measured_s, rel=0.01)


@pytest.mark.parametrize("method", ["fedavg-grpo", "fedprox-grpo", "pubswap-balanced", "pubswap-random"])
def test_round_protocol(method, local_ray, digit_model_dir, tmp_path, monkeypatch):
    measured, started = [], []
    real_round, real_eval = Federated.run_round, Federated.evaluate

    def timed_round(*args, **kwargs):  # the round's wall time, from outside: run_round's start ...
        started.append(time.perf_counter())
        return real_round(*args, **kwargs)

    def timed_eval(*args, **kwargs):  # ... to the end of its evaluation (after the commit of the average)
        out = real_eval(*args, **kwargs)
        measured.append(time.perf_counter() - started[-1])
        return out

    monkeypatch.setattr(Federated, "run_round", timed_round)
    monkeypatch.setattr(Federated, "evaluate", timed_eval)
    cfg = tiny_config(
        digit_model_dir,
        tmp_path / method,
        f"federation.method={method}",
        "federation.fedprox_mu=0.5",
        "model.max_response_len=1",
    )
    summary = train(cfg)
    records = [json.loads(line) for line in (tmp_path / method / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [1, 2]
    expected_public = [2, 4] if method.startswith("pubswap") else []
    total_swapped = 0
    for rec, wall in zip(records, measured, strict=True):
        check_time_accounting(rec, wall)
        assert public_steps(rec) == expected_public
        assert [st["step"] for st in rec["steps"]] == [1, 2, 3, 4]
        assert "pass@1" in rec and 0.0 <= rec["pass@1"] <= 1.0
        p, n = rec["pass@1"], rec["eval_prompts"]
        assert n == 8 and rec["eval_n"] == 1 and rec["pass@1_se"] == pytest.approx((p * (1 - p) / n) ** 0.5)
        assert len(rec["drift_sq"]) == 2 and rec["bytes"]["adapter"] > 0
        for st in rec["steps"]:
            for c in st["clients"]:
                assert c["response_tokens"] > 0 and 0.0 <= c["zero_adv_frac"] <= 1.0
                assert c["updates"] == 2 and c["entropy"] > 0 and c["nll_own"] > 0
                assert (c["nll_swapped"] > 0) == (c["off_policy"] > 0)  # measured on swapped-in responses only
            if not st["public"]:
                assert all(c["off_policy"] == 0 for c in st["clients"])  # private steps are on-policy
                continue
            prov = st["provenance"]  # [client][prompt][k] = (origin, correct)
            for n, client in enumerate(st["clients"]):
                foreign = [(o, ok) for group in prov[n] for (o, ok) in group if o != n]
                assert client["off_policy"] == len(foreign) == st["swapped_in"][n]
                assert all(len(group) == 8 for group in prov[n])
                if method == "pubswap-balanced":
                    assert all(ok for _, ok in foreign)  # only correct responses are swapped in
                total_swapped += len(foreign)
            if method == "pubswap-random":
                assert prov[0] == prov[1]  # every client trains on the same K per prompt
        # the round's global adapter is on disk and loadable
        adapter = read_adapter(tmp_path / method / "checkpoints" / f"round_{rec['round']:04d}")
        assert all(torch.isfinite(t).all() for t in adapter.values())
    if method.startswith("pubswap"):
        assert total_swapped > 0
    assert summary["final_pass@1"] == records[-1]["pass@1"]
    assert summary["final_pass@1_se"] == records[-1]["pass@1_se"] and summary["base_pass@1_se"] is not None
