"""SeedFlood (a reconstruction of Kim & Lee 2026): zeroth-order GRPO steps on every weight, sent as
(step, origin, seed, scalar) messages flooded over the graph.

A client's step perturbs all weights along a Gaussian direction z(seed) and sends the loss difference
along it; every client applies every message, in canonical order, so after each flood all clients hold
bitwise the same weights (checked here by comparing them). The flood also runs at the round's end, so
the checkpoint holds one model, the same on every client: no per-client states.

Two deliberate choices. (1) A flood applies the mean of the period's steps over the clients
(pubswap.algorithms.gossip.seedflood_scale: 1/n), so `zo_lr` is one client's step at any n; the sum
would be an n times larger step (16x to 128x on the board). (2) No per-hop delay: a period's messages
are applied when its flood is complete (after `flood_hops` = at most the diameter hops, reported per
flood), on every client at once. A message is 20 bytes, so on a real network a flood of a few dozen
hops takes far less than one local step's forward passes; a delay of one gossip per hop is modelled
only in the pure test of flooding (tests/test_topology_gossip.py), not here.
"""

from __future__ import annotations

import math

import torch

from pubswap.algorithms.cross_entropy import token_nll
from pubswap.algorithms.gossip import SeedMessage, apply_messages, direction
from pubswap.algorithms.grpo import off_policy
from pubswap.lora import Adapter
from pubswap.methods.gossip import Gossip


@torch.no_grad()
def zo_step(
    trainer, samples, seed: int, eps: float, lr: float, owner: int | None = None, objective: str = "grpo"
) -> tuple[float, dict]:
    """A client's local step: one zeroth-order step of `trainer` (pubswap/learner/trainer.py, full
    policy), MeZO-style. Along the Gaussian direction z(seed) over the trained tensors,
    g = (L(x + eps z) - L(x - eps z)) / (2 eps) with L the step's loss, and x <- x - (lr g) z. Forward
    passes only. L is the objective's: the GRPO loss (old log-probs: the current policy), or with
    objective label-words or sft the target tokens' mean NLL (pubswap/algorithms/cross_entropy.py).

    Returns the fp32 scalar lr * g (the message: with the seed it rebuilds the update anywhere, by
    pubswap.algorithms.gossip.apply_messages, which this step itself uses) and the step's metrics."""
    g = trainer.grpo
    mbs = trainer.micro_batches(samples, budget=trainer.nograd_tokens)  # forward passes only
    n_tokens = float(sum(mb.tokens for mb in mbs))
    if objective != "grpo":  # label-words, sft: the targets' token cross-entropy
        metrics: dict[str, float] = {}

        def mb_loss(mb, i: int) -> float:
            return float(token_nll(trainer.logprobs(mb, 1.0), n_tokens).loss)

    else:
        old, ref = trainer.old_logprobs(mbs), trainer.ref_logprobs(mbs)
        metrics = trainer.nll(mbs, old, off_policy(samples, owner))

        def mb_loss(mb, i: int) -> float:
            return float(trainer.loss(trainer.logprobs(mb, g.temperature), old[i], ref[i], mb, n_tokens).loss)

    x = trainer.adapter()
    z = direction(seed, x)

    def loss_at(sign: float) -> float:
        trainer.load_weights({k: x[k] + sign * eps * z[k] for k in x})
        return sum(mb_loss(mb, i) for i, mb in enumerate(mbs))

    plus, minus = loss_at(1.0), loss_at(-1.0)
    grad = (plus - minus) / (2 * eps)
    scalar = float(torch.tensor(lr * grad, dtype=torch.float32)) if math.isfinite(grad) else 0.0
    trainer.load_weights(apply_messages(x, [SeedMessage(0, 0, seed, scalar)]))
    metrics.update(
        loss=(plus + minus) / 2,
        projected_grad=grad,
        zo_scalar=scalar,
        micro_batches=len(mbs),
        updates=1,
        skipped_updates=int(not math.isfinite(grad)),
    )
    if objective != "grpo":
        metrics["nll"] = metrics["loss"]
    return scalar, metrics


class SeedFlood(Gossip):
    names = ("seedflood",)

    @property
    def full_parameter(self) -> bool:
        return True

    @property
    def gossip_rule(self) -> str | None:
        return "seedflood"

    def exchange_due(self, f, s: int) -> bool:
        return s % f.gossip_every == 0 or s == f.tau

    def exchange(self, fed, r: int, s: int) -> tuple[dict, str]:
        g = fed.flood(r, s)
        return g, f", gossip: consensus distance {g['consensus']:.3e}, flood delivered in {g['hops']} hops"

    def settle(self, states: dict, parts: list[int]) -> tuple[Adapter, dict | None]:
        average = states["x"][0]
        differ = [c for c in parts if any(not torch.equal(states["x"][c][k], average[k]) for k in average)]
        if differ:
            raise RuntimeError(f"seedflood: clients {differ[:5]} hold other weights than client 0 after the flood")
        return average, None

    def annotate(self, record: dict, exchanges: list[dict]) -> None:
        record["flood_hops"] = [g["hops"] for g in exchanges]
