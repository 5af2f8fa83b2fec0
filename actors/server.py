"""ServerActor: the public and test sets, public batches, the response pool and swap.

The server is sent its own public prompts' responses (not the clients' private prompts, though the
responses, their rewards and their skew tell it something of each client's topics). It scores every
public response again with the run's verifier against the public answers it holds, and swaps and
hands out rewards by its own scores only. Swapped groups are put into the object store, one object
per client, so each client fetches only its own group.
"""

from __future__ import annotations

from collections.abc import Sequence

import ray

from pubswap.algorithms.aggregation import Context, make_strategy, payload_bytes
from pubswap.algorithms.swap import rescored, swap
from pubswap.config import from_dict
from pubswap.data.rewards import make_row_reward
from pubswap.data.rows import Row
from pubswap.seeding import rng


# The server's state is its constructor's arguments (public and test sets) plus what one step puts in
# flight, so a restarted server (same arguments) serves the redone round exactly as before.
@ray.remote(max_restarts=-1, max_task_retries=0)
class ServerActor:
    def __init__(self, cfg: dict, public: Sequence[Row], test: Sequence[Row]):
        self.cfg = from_dict(cfg)
        self.public = list(public)
        self.test = list(test)
        self.seen_prompts: set[str] = set()
        self._reward_fn = None

    def reward_fn(self):
        """The run's verifier (the clients' own), made on first use."""
        if self._reward_fn is None:
            self._reward_fn = make_row_reward(self.cfg.data, self.cfg.seed)
        return self._reward_fn

    def aggregate(self, round_idx: int, start: dict, weights: dict[int, float], *uploads: dict) -> tuple:
        """A non-linear strategy's server step (pubswap/algorithms/aggregation/base.py): `uploads[a]` is the a-th
        actor's {client id: payload}; `weights` the participants' weights. Returns two objects (call it
        with num_returns=2): the download, which every client actor fetches, and for the driver the new
        global adapter and the bytes each client sent and receives."""
        strategy = make_strategy(self.cfg.federation)
        by_client = {cid: payload for up in uploads for cid, payload in up.items()}
        cids = sorted(by_client)
        if cids != sorted(weights):
            raise ValueError(f"uploads from clients {cids} do not match the participants {sorted(weights)}")
        ctx = Context(self.cfg.seed, round_idx, None)
        download = strategy.server_aggregate(start, [by_client[c] for c in cids], [weights[c] for c in cids], ctx)
        return download, {
            "adapter": strategy.apply_download(start, download, ctx),
            "upload_bytes": {c: payload_bytes(by_client[c]) for c in cids},
            "download_bytes": {c: strategy.download_bytes(download, self.cfg.lora.reduced_rank(c)) for c in cids},
            "upload_board": {c: payload_bytes(by_client[c], board=True) for c in cids},
            "download_board": {
                c: strategy.download_bytes(download, self.cfg.lora.reduced_rank(c), board=True) for c in cids
            },
        }

    def public_batch(self, round_idx: int, step: int) -> list[Row]:
        b = self.cfg.grpo.b
        idx = rng(self.cfg.seed, "public_batch", round_idx, step).choice(
            len(self.public), size=b, replace=len(self.public) < b
        )
        return [self.public[int(i)] for i in idx]

    def swap(self, round_idx: int, step: int, batch: list[Row], by_actor: list[list[int]], *answers: dict) -> dict:
        """Pool the participants' public responses, apply the method's rule, put each actor's groups.

        `by_actor[a]` lists the participants hosted by the a-th actor that answered; `answers[a]` is its
        reply, {"responses": {client id: groups}}. One object per actor goes into the object store.
        """
        # the server's own verdicts, from the public answers it holds: what a client reports about its
        # responses (reward, correct) is never used, so no client can label wrong answers correct
        reward_fn = self.reward_fn()
        responses = {cid: rescored(groups, batch, reward_fn) for a in answers for cid, groups in a["responses"].items()}
        cids = sorted(responses)
        if cids != sorted(c for ids in by_actor for c in ids):
            raise ValueError(f"answers from clients {cids} do not match the participants {by_actor}")
        public_prompts = {r.prompt for r in self.public}
        for row in batch:
            if row.prompt not in public_prompts:
                raise ValueError("swap() was given a prompt that is not in the public set")
            self.seen_prompts.add(row.prompt)
        pool = [responses[c] for c in cids]
        groups, stats = swap(self.cfg.federation.swap_rule, pool, self.cfg.seed, round_idx, step, client_ids=cids)
        by_client = dict(zip(cids, groups))
        # who generated each response a client will train on, and whether it was correct
        provenance = [[[(r.origin, r.correct) for r in g] for g in per_client] for per_client in groups]
        text_bytes = sum(
            len(r.text.encode()) + 4 * len(r.token_ids) + 8 * len(r.logprobs) for c in pool for g in c for r in g
        )
        return {
            "groups": [ray.put({c: by_client[c] for c in ids}) for ids in by_actor],
            "clients": cids,
            "swapped_in": stats.swapped_in,
            "missing_donors": stats.missing_donors,
            "pool_bytes": text_bytes,
            "provenance": provenance,
        }

    def test_shards(self, n: int) -> list[list[Row]]:
        return [self.test[i::n] for i in range(n)]

    def get_seen_prompts(self) -> list[str]:
        return sorted(self.seen_prompts)
