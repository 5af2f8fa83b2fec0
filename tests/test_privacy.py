"""Client-level DP (DP-FedAvg, pubswap/privacy.py): clipping, the noise, the accountant, the config's
rules, and one real run through the client actors' allreduce, resumed to the same bits."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from pubswap import privacy
from pubswap.config import ConfigError, from_dict
from pubswap.lora import flatten, read_adapter


def test_an_update_over_the_bound_is_scaled_onto_it_and_one_within_is_untouched():
    g = torch.Generator().manual_seed(0)
    big = torch.randn(10_000, generator=g) * 3
    out, was = privacy.clip(big, 0.5)
    assert was
    assert float(torch.linalg.vector_norm(out.double())) == pytest.approx(0.5, rel=1e-6)
    assert torch.allclose(out / out.norm(), big / big.norm(), atol=1e-6)  # same direction
    small = big * (0.4 / float(big.norm()))
    out, was = privacy.clip(small, 0.5)
    assert not was and torch.equal(out, small)


def test_the_noise_has_the_stated_scale_and_is_a_function_of_seed_and_round():
    std = 0.3
    draws = privacy.gaussian(400_000, std, privacy.noise_seed(7, 1, secure=False))
    assert float(draws.double().std()) == pytest.approx(std, rel=0.01)
    assert abs(float(draws.double().mean())) < 5 * std / math.sqrt(draws.numel())
    again = privacy.gaussian(400_000, std, privacy.noise_seed(7, 1, secure=False))
    assert torch.equal(draws, again)  # a redone or resumed round adds the same noise
    other = privacy.gaussian(400_000, std, privacy.noise_seed(7, 2, secure=False))
    assert not torch.equal(draws, other)
    assert privacy.noise_seed(7, 1, secure=True) != privacy.noise_seed(7, 1, secure=True)


def test_epsilon_is_opacus_rdp_accountants_for_the_same_rounds():
    from opacus.accountants import RDPAccountant

    q, z, delta = 0.25, 1.1, 1e-5
    acc = RDPAccountant()
    for r in range(1, 31):
        acc.step(noise_multiplier=z, sample_rate=q)
        assert privacy.epsilon(r, q, z, delta) == pytest.approx(acc.get_epsilon(delta), rel=1e-9)
    # more noise, fewer rounds or a smaller sample spend less; no noise: no guarantee
    assert privacy.epsilon(30, q, 2.0, delta) < privacy.epsilon(30, q, z, delta)
    assert privacy.epsilon(10, q, z, delta) < privacy.epsilon(30, q, z, delta)
    assert privacy.epsilon(30, 0.1, z, delta) < privacy.epsilon(30, q, z, delta)
    assert privacy.epsilon(30, q, 0.0, delta) == math.inf


@pytest.mark.parametrize(
    "privacy_cfg, federation, key",
    [
        ({"noise_multiplier": 1.0}, {}, "privacy.noise_multiplier"),
        ({"clip_norm": 0.1}, {"aggregation": "fedsrd"}, "privacy.clip_norm"),
        ({"clip_norm": 0.1}, {"weighting": "samples"}, "privacy.clip_norm"),
        ({"clip_norm": 0.1}, {"method": "dsgd-lora"}, "privacy.clip_norm"),
        ({"delta": 1.0}, {}, "privacy.delta"),
        ({"secure_aggregation": True}, {"aggregation": "flexlora"}, "privacy.secure_aggregation"),
        ({"secure_aggregation": True}, {"method": "chocosgd-lora"}, "privacy.secure_aggregation"),
    ],
)
def test_a_dp_config_that_cannot_hold_its_bound_is_refused_naming_the_key(privacy_cfg, federation, key):
    with pytest.raises(ConfigError, match=f"^{key.replace('.', '[.]')}"):
        from_dict({"privacy": privacy_cfg, "federation": federation})


def test_secure_aggregation_sums_exactly_what_the_masks_hide():
    import numpy as np

    from pubswap import secagg

    actors, n = 4, 50_000
    g = torch.Generator().manual_seed(1)
    vectors = [torch.randn(n, generator=g) * 0.05 for _ in range(actors)]
    keys = [secagg.KeyPair() for _ in range(actors)]
    publics = [k.public for k in keys]
    sent = [secagg.masked(v, i, publics, keys[i], b"group/1") for i, v in enumerate(vectors)]
    total = sum(sent[1:], sent[0])  # what the allreduce computes (modulo 2^64)
    assert np.array_equal(total, sum((secagg.encode(v) for v in vectors[1:]), secagg.encode(vectors[0])))
    exact = sum(v.double() for v in vectors)
    assert float((secagg.decode(total).double() - exact).abs().max()) < 1e-7  # fixed point + float32
    # a pair derives the same secret from either side; the context makes another round's different
    assert keys[0].shared_secret(publics[1], b"group/1") == keys[1].shared_secret(publics[0], b"group/1")
    assert keys[0].shared_secret(publics[1], b"group/2") != keys[0].shared_secret(publics[1], b"group/1")


def test_a_masked_upload_looks_the_same_whatever_it_hides():
    """Actor 0's upload for a zero vector and for a large one: both uniform on Z_2^64 (their top bytes'
    histograms pass a chi-square test) and uncorrelated with the values hidden."""
    import numpy as np
    from scipy.stats import chisquare, pearsonr

    from pubswap import secagg

    n = 200_000
    g = torch.Generator().manual_seed(2)
    for hidden in (torch.zeros(n), torch.randn(n, generator=g) * 100):
        keys = [secagg.KeyPair(), secagg.KeyPair()]
        up = secagg.masked(hidden, 0, [k.public for k in keys], keys[0], b"group/1")
        top = (up >> np.uint64(56)).astype(np.int64)
        assert chisquare(np.bincount(top, minlength=256)).pvalue > 1e-4
        if hidden.any():
            assert abs(pearsonr(up.view(np.int64).astype(np.float64), hidden.double().numpy()).statistic) < 0.02
        # without the masks it is plainly the values (to the fixed point's 2^-33)
        assert float((secagg.decode(secagg.encode(hidden)) - hidden).abs().max()) <= 2.0**-33


def test_a_value_outside_the_fixed_point_range_is_refused():
    from pubswap import secagg

    with pytest.raises(ValueError, match="fixed-point range"):
        secagg.encode(torch.tensor([0.0, 2.0**40]))


CLIP, Z = 1e-4, 1.0  # a bound far below the tiny model's updates: every update is clipped
DP = [
    "federation.method=fedavg-grpo",
    "federation.tau=2",
    f"privacy.clip_norm={CLIP}",
    f"privacy.noise_multiplier={Z}",
    "privacy.secure_aggregation=true",
]


def test_a_private_run_sends_masked_clipped_updates_plus_the_seeded_noise_through_a_resume_and_a_dropout(
    digit_model_dir, tmp_path
):
    """Round 1 in one driver; round 2 resumed by another, with a client killed in its masked allreduce
    (after the keys were agreed), so the round is redone with fresh keys. Each round's new global minus
    the old, less that round's seeded noise on the mean, is the mean of n clipped updates: inside the
    bound (an unclipped update of this model is ~100x larger). Wrong noise on a resumed or redone
    round, masks that do not cancel, or an unclipped update would each break it."""
    import json

    from ray_helpers import FAULT_ENV, ft_config, metrics, run_driver

    first = ft_config(digit_model_dir, tmp_path / "run", *DP, "federation.rounds=1")
    proc = run_driver(first)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DP epsilon" in proc.stdout and "(2/2 updates clipped)" in proc.stdout
    fault = tmp_path / "fault.json"
    fault.write_text(json.dumps({"who": "client", "client": 1, "round": 2, "step": 0, "phase": "average"}))
    cfg = ft_config(digit_model_dir, tmp_path / "run", *DP)
    resumed = run_driver(cfg, {FAULT_ENV: str(fault)})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming after round 1" in resumed.stdout
    assert (tmp_path / "fault.json.fired").exists()
    records = metrics(cfg.run_dir)
    assert [r["round"] for r in records] == [1, 2] and records[-1]["recoveries"] == 1
    n = cfg.federation.num_clients
    for rec in records:
        r, p = rec["round"], rec["privacy"]
        assert p["clipped"] == n and p["participants"] == n
        assert p["epsilon"] == pytest.approx(privacy.epsilon(r, 1.0, Z, 1e-5), rel=1e-12)
        assert rec["bytes"]["upload"] == [2 * rec["bytes"]["adapter"]] * n  # int64 fixed point on the wire
        ck = Path(cfg.run_dir) / "checkpoints"
        before, after = (flatten(read_adapter(ck / f"round_{i:04d}"))[0] for i in (r - 1, r))
        noise = privacy.gaussian(before.numel(), Z * CLIP / n, privacy.noise_seed(cfg.seed, r, secure=False))
        mean_update = (after.double() - before.double()) - noise.double()
        assert float(mean_update.norm()) <= CLIP * 1.01
        assert float((after - before).norm()) > 10 * CLIP  # the noise is there, at its scale
