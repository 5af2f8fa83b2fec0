"""Integration on the actors themselves: collective averaging and what the server gets to see."""

import pytest
import ray
import torch
from ray_helpers import RAY_ENV, tiny_config

from jobs.federation import Federation
from jobs.train import build_split
from pubswap.lora import squared_distance


@pytest.fixture(scope="module")
def federation(tiny_model_dir, tmp_path_factory):
    ray.init(num_cpus=2, include_dashboard=False, runtime_env=RAY_ENV)
    run_dir = tmp_path_factory.mktemp("fed")
    cfg = tiny_config(
        tiny_model_dir, run_dir, "federation.num_clients=3", "federation.weighting=samples", "data.per_client=10"
    )
    split = build_split(cfg, str(tiny_model_dir))
    fed = Federation(cfg, split, str(tiny_model_dir), str(run_dir))
    yield fed, split
    fed.shutdown()
    ray.shutdown()


def test_allreduce_gives_every_client_the_weighted_mean(federation):
    fed, _ = federation
    base = fed.initial_adapter()
    gen = torch.Generator().manual_seed(0)
    distinct = [{k: v + torch.randn(v.shape, generator=gen) * (i + 1) for k, v in base.items()} for i in range(3)]
    ray.get([c.set_global.remote(a) for c, a in zip(fed.actors, distinct)])
    pre = ray.get([c.get_adapter.remote() for c in fed.actors])
    averaged, metrics, _ = fed.average(1, [0, 1, 2], base)
    post = ray.get([c.get_adapter.remote() for c in fed.actors])
    w = [fed.weights([0, 1, 2])[c] for c in range(3)]
    assert w == pytest.approx([1 / 3] * 3)  # equal client sizes -> equal sample weights
    for k in base:
        mean_k = sum(wi * p[k] for wi, p in zip(w, pre))
        assert torch.allclose(averaged[k], mean_k, atol=1e-5)
        assert torch.equal(post[0][k], post[1][k]) and torch.equal(post[1][k], post[2][k])
        assert torch.equal(post[0][k], averaged[k])
    for m, p in zip(metrics, pre):
        assert m["drift_sq"] == pytest.approx(squared_distance(p, averaged).item(), rel=1e-4)


def test_server_sees_only_public_prompts(federation):
    fed, split = federation
    fed.set_global(fed.initial_adapter())
    fed.private_step(1, 1, [0, 1, 2])
    out = fed.public_step(1, 2, [0, 1, 2])
    assert len(out["swapped_in"]) == 3
    seen = set(ray.get(fed.server.get_seen_prompts.remote()))
    public = {r.prompt for r in split.public}
    private = {r.prompt for c in split.clients for r in c}
    assert seen and seen <= public
    assert not seen & (private - public)
