"""PubSwap response swapping on a public step (paper 3.4), as pure functions.

Input for one public step: `pool[n][p]` = the K responses client n generated for public prompt p.
Output: `groups[n][p]` = the K responses client n trains on for prompt p. Every Response keeps the
id of the client that generated it (`origin`), so the trainer knows which ones are off-policy.

Balanced, per client n and prompt p, with c_n = number of n's own correct responses:
    c_n >= K/2  ->  keep own K responses
    c_n <  K/2  ->  replace up to floor(K/2) - c_n of n's incorrect responses by correct responses
                    drawn (without replacement) from the OTHER clients' responses to p;
                    fewer donors available -> fewer replacements.
Random, per prompt p: draw K of the N*K pooled responses uniformly without replacement; every client
gets the same K.

With partial participation the pool holds the participants only: `client_ids[j]` names the client of
`pool[j]`, and responses carry that id as their origin.

Randomness: Balanced uses rng(seed, "balanced", round, step, client id, p); Random uses
rng(seed, "random", round, step, p). Same inputs and keys -> same groups, in any process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pubswap.seeding import rng

Pool = Sequence[Sequence[Sequence["Response"]]]  # [client][prompt][k]
Groups = list[list[list["Response"]]]  # [client][prompt][k]


@dataclass(frozen=True)
class Response:
    text: str
    reward: float
    correct: bool
    origin: int  # client id that generated this response
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()  # its generator's sampling log-probs (only with grpo.tis_cap > 0)


CORRECT_THRESHOLD = 0.5  # rewards are 0/1; a response is "correct" above this


def rescored(groups: Sequence[Sequence[Response]], rows: Sequence, reward_fn) -> list[list[Response]]:
    """One client's public groups (group i answers rows[i]) with the reward and correctness the
    verifier `reward_fn(text, row)` gives them, whatever the client reported."""
    if len(groups) != len(rows):
        raise ValueError(f"{len(groups)} groups for {len(rows)} public prompts")
    out = []
    for g, row in zip(groups, rows):
        scored = [(r, float(reward_fn(r.text, row))) for r in g]
        out.append([replace(r, reward=x, correct=x > CORRECT_THRESHOLD) for r, x in scored])
    return out


@dataclass(frozen=True)
class SwapStats:
    swapped_in: list[int]  # per client: responses replaced by another client's correct one
    missing_donors: list[int]  # per client: replacements wanted but no donor left


def _check_pool(pool: Pool, client_ids: Sequence[int]) -> tuple[int, int, int]:
    n_clients = len(pool)
    if n_clients == 0:
        raise ValueError("pool is empty")
    if len(client_ids) != n_clients or len(set(client_ids)) != n_clients:
        raise ValueError(f"client_ids {list(client_ids)} must name the pool's {n_clients} clients, once each")
    n_prompts = len(pool[0])
    if n_prompts == 0:
        raise ValueError("pool has no prompts")
    k = len(pool[0][0])
    for n, per_client in enumerate(pool):
        if len(per_client) != n_prompts:
            raise ValueError(f"client {n} answered {len(per_client)} prompts, expected {n_prompts}")
        for p, group in enumerate(per_client):
            if len(group) != k:
                raise ValueError(f"client {n}, prompt {p}: {len(group)} responses, expected K={k}")
            if any(r.origin != client_ids[n] for r in group):
                raise ValueError(f"client {client_ids[n]}, prompt {p}: responses must carry origin={client_ids[n]}")
    return n_clients, n_prompts, k


def balanced_group(own: Sequence[Response], donors: Sequence[Response], gen) -> tuple[list[Response], int, int]:
    """One client's Balanced group for one prompt.

    `own` = the client's K responses; `donors` = the other clients' responses to the same prompt.
    Returns (group, number swapped in, number of replacements that found no donor).
    """
    k = len(own)
    correct_own = sum(r.correct for r in own)
    if correct_own >= k / 2:
        return list(own), 0, 0
    wanted = k // 2 - correct_own
    donor_pool = [r for r in donors if r.correct]
    n_swap = min(wanted, len(donor_pool))
    group = list(own)
    if n_swap > 0:
        incorrect_slots = [i for i, r in enumerate(own) if not r.correct]
        slots = gen.choice(len(incorrect_slots), size=n_swap, replace=False)
        picks = gen.choice(len(donor_pool), size=n_swap, replace=False)
        for slot, pick in zip(sorted(int(s) for s in slots), (int(p) for p in picks)):
            group[incorrect_slots[slot]] = donor_pool[pick]
    return group, n_swap, wanted - n_swap


def balanced_swap(
    pool: Pool, seed: int, round_idx: int, step: int, client_ids: Sequence[int] | None = None
) -> tuple[Groups, SwapStats]:
    ids = list(range(len(pool))) if client_ids is None else list(client_ids)
    n_clients, n_prompts, _ = _check_pool(pool, ids)
    groups: Groups = []
    swapped = [0] * n_clients
    missing = [0] * n_clients
    for n in range(n_clients):
        per_prompt = []
        for p in range(n_prompts):
            donors = [r for m in range(n_clients) if m != n for r in pool[m][p]]
            gen = rng(seed, "balanced", round_idx, step, ids[n], p)
            group, s, miss = balanced_group(pool[n][p], donors, gen)
            per_prompt.append(group)
            swapped[n] += s
            missing[n] += miss
        groups.append(per_prompt)
    return groups, SwapStats(swapped_in=swapped, missing_donors=missing)


def random_swap(
    pool: Pool, seed: int, round_idx: int, step: int, client_ids: Sequence[int] | None = None
) -> tuple[Groups, SwapStats]:
    ids = list(range(len(pool))) if client_ids is None else list(client_ids)
    n_clients, n_prompts, k = _check_pool(pool, ids)
    shared: list[list[Response]] = []
    for p in range(n_prompts):
        everyone = [r for n in range(n_clients) for r in pool[n][p]]
        picks = rng(seed, "random", round_idx, step, p).choice(len(everyone), size=k, replace=False)
        shared.append([everyone[int(i)] for i in picks])
    groups = [[list(g) for g in shared] for _ in range(n_clients)]
    swapped = [sum(r.origin != ids[n] for g in shared for r in g) for n in range(n_clients)]
    return groups, SwapStats(swapped_in=swapped, missing_donors=[0] * n_clients)


SWAP_RULES = {"balanced": balanced_swap, "random": random_swap}


def swap(
    rule: str, pool: Pool, seed: int, round_idx: int, step: int, client_ids: Sequence[int] | None = None
) -> tuple[Groups, SwapStats]:
    """`pool[j]` holds the responses of client `client_ids[j]` (default: client j); so do the groups."""
    try:
        fn = SWAP_RULES[rule]
    except KeyError:
        raise ValueError(f"unknown swap rule {rule!r}; known: {sorted(SWAP_RULES)}") from None
    return fn(pool, seed, round_idx, step, client_ids)
