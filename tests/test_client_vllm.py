"""A ClientActor with a real vLLM engine serves the trainer's *current* adapter after every update.

Engine log-probs of a sampled response must match the trainer's for the same adapter, before and
after a change of adapter (a stale LoRA id would keep serving the old weights and fail this).
"""

import time

import psutil
import pytest
import ray
import torch
from ray_helpers import RAY_ENV, tiny_config

from actors import exit_note
from actors.client import ClientActor
from pubswap.data.rows import Row

pytest.importorskip("vllm")


@pytest.fixture(scope="module", params=["merged", "lora"])
def client(request, tiny_model_dir, tmp_path_factory):
    """One client actor per way of serving the adapter: merged into the weights (the CPU default) and
    vLLM's LoRA kernels (the GPU default)."""
    ray.init(num_cpus=2, include_dashboard=False, runtime_env=RAY_ENV)
    run_dir = tmp_path_factory.mktemp("vllm_client")
    cfg = tiny_config(
        tiny_model_dir,
        run_dir,
        "rollout.backend=vllm",
        "federation.num_clients=1",
        f"rollout.lora_mode={request.param}",
        "grpo.lr=0.05",
        "grpo.kl_coef=0.0",
        "grpo.tis_cap=2.0",
    )
    rows = [Row(f"Calculate {a} + {b}.", str(a + b), "add") for a in range(4) for b in range(4)]
    actor = ClientActor.options(num_cpus=0.5).remote(cfg.to_dict(), {0: rows}, str(tiny_model_dir))
    yield actor
    ray.kill(actor)
    ray.shutdown()


def engine_vs_trainer(actor, prompt="Calculate 2 + 3."):
    out = ray.get(actor.answer_public.remote([(prompt, "5")], 0, 0))
    response = list(out["responses"][0][0][0].token_ids)
    pids = list(ray.get(actor.prompt_ids.remote(prompt)))
    engine = ray.get(actor.engine_logprobs.remote(pids + response))[len(pids) - 1 :]
    trainer = ray.get(actor.trainer_logprobs.remote(pids, response))
    return torch.tensor(engine), torch.tensor(trainer)


def perturbed(adapter, scale, seed):
    gen = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=gen) for k, v in adapter.items()}


def test_engine_serves_current_adapter(client):
    e0, t0 = engine_vs_trainer(client)
    assert torch.allclose(e0, t0, atol=1e-3), (e0, t0)

    base = ray.get(client.get_adapter.remote())
    ray.get(client.set_global.remote(perturbed(base, 0.5, seed=1)))
    e1, t1 = engine_vs_trainer(client)
    assert torch.allclose(e1, t1, atol=1e-3), (e1, t1)

    ray.get(client.set_global.remote(perturbed(base, 0.5, seed=2)))
    e2, t2 = engine_vs_trainer(client)
    assert torch.allclose(e2, t2, atol=1e-3), (e2, t2)
    assert not torch.allclose(e1, e2, atol=1e-2)  # the new adapter, not a cached one, is being served


def test_engine_follows_trainer_updates(client):
    before = ray.get(client.get_adapter.remote())
    (metrics,) = ray.get(client.private_steps.remote(1, 1))
    assert metrics["gen_s"] > 0 and metrics["response_tokens"] > 0
    e, t = engine_vs_trainer(client, "Calculate 1 + 1.")
    assert torch.allclose(e, t, atol=1e-3), (e, t)
    after = ray.get(client.get_adapter.remote())
    assert set(after) == set(before)


def test_public_responses_carry_the_engines_sampling_logprobs(client):
    """With grpo.tis_cap > 0 a public response carries its engine's log-probs after temperature (the
    behaviour policy of truncated IS): they equal the trainer's at the rollout temperature."""
    prompt = "Calculate 3 + 1."
    out = ray.get(client.answer_public.remote([(prompt, "4")], 0, 1))
    temperature = 0.7
    pids = list(ray.get(client.prompt_ids.remote(prompt)))
    for r in out["responses"][0][0]:
        assert len(r.logprobs) == len(r.token_ids) > 0
        trainer = torch.tensor(ray.get(client.trainer_logprobs.remote(pids, list(r.token_ids), None, temperature)))
        assert torch.allclose(torch.tensor(r.logprobs), trainer, atol=1e-3), (r.logprobs, trainer)
        raw = torch.tensor(ray.get(client.trainer_logprobs.remote(pids, list(r.token_ids))))
        assert not torch.allclose(torch.tensor(r.logprobs), raw, atol=1e-2)  # not the raw (T=1) log-probs


def test_a_call_that_finds_its_engine_dead_ends_the_actor(client):
    """The engine core SIGKILLed while a call is generating: vLLM fails the call with EngineDeadError at
    once, before the watchdog's next poll. The caller must see the actor's death (RayActorError, from which
    the driver recovers by redoing the round), not that error as an ordinary one (which ended the run),
    and the actor's note saying why (actors/exit_note.py). Runs last: the actor is restarted after it."""
    pid = ray.get(client.ping.remote())[1]
    core = next(c for c in psutil.Process(pid).children(recursive=True) if "EngineCore" in c.name())
    batch = [(f"Calculate {a} + {b}.", str(a + b)) for a in range(20) for b in range(20)]
    call = client.answer_public.remote(batch, 0, 0)
    deadline = time.monotonic() + 30
    while core.cpu_percent(interval=0.05) < 50 and time.monotonic() < deadline:  # generating
        pass
    core.kill()
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(call)
    # why, told to the driver through the GCS (the printed line may never reach a console), read once
    actor_id = client._actor_id.hex()
    note = exit_note.take([actor_id])
    assert "vLLM engine" in note[actor_id] and f"(pid {pid})" in note[actor_id], note
    assert exit_note.take([actor_id]) == {}


def test_engine_dead_is_found_in_the_chain_of_a_calls_error():
    from vllm.v1.engine.exceptions import EngineDeadError

    from actors.engine_watchdog import engine_dead

    try:
        try:
            raise EngineDeadError()
        except EngineDeadError as e:
            raise RuntimeError("generate failed") from e
    except RuntimeError as outer:
        assert engine_dead(outer)
    assert not engine_dead(RuntimeError("a bad batch")) and not engine_dead(None)
