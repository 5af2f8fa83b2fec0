"""ServerActor: the public and test sets, public batches, the response pool and swap, the global adapter.

The server never receives private prompts: it is sent only its own public prompts' responses (and the
global adapter). Swapped groups are put into the object store, one object per client, so each client
fetches only its own group.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import ray

from pubswap.config import from_dict
from pubswap.data.rows import Row
from pubswap.lora import Adapter, save_adapter
from pubswap.seeding import rng
from pubswap.swap import swap


@ray.remote(max_restarts=0)
class ServerActor:
    def __init__(self, cfg: dict, public: Sequence[Row], test: Sequence[Row], run_dir: str):
        self.cfg = from_dict(cfg)
        self.public = list(public)
        self.test = list(test)
        self.run_dir = Path(run_dir)
        self.global_adapter: Adapter | None = None
        self.seen_prompts: set[str] = set()

    def public_batch(self, round_idx: int, step: int) -> list[tuple[str, str]]:
        b = self.cfg.grpo.b
        idx = rng(self.cfg.seed, "public_batch", round_idx, step).choice(len(self.public), size=b,
                                                                          replace=len(self.public) < b)
        return [(self.public[int(i)].prompt, self.public[int(i)].answer) for i in idx]

    def swap(self, round_idx: int, step: int, batch: list[tuple[str, str]], *answers: dict) -> dict:
        """Pool the clients' public responses, apply the method's rule, put each client's groups."""
        pool = [a["responses"] for a in answers]
        public_prompts = {r.prompt for r in self.public}
        for prompt, _ in batch:
            if prompt not in public_prompts:
                raise ValueError("swap() was given a prompt that is not in the public set")
            self.seen_prompts.add(prompt)
        groups, stats = swap(self.cfg.federation.swap_rule, pool, self.cfg.seed, round_idx, step)
        # who generated each response a client will train on, and whether it was correct
        provenance = [[[(r.origin, r.correct) for r in g] for g in per_client] for per_client in groups]
        text_bytes = sum(len(r.text.encode()) + 4 * len(r.token_ids) for c in pool for g in c for r in g)
        return {"groups": [ray.put(g) for g in groups], "swapped_in": stats.swapped_in,
                "missing_donors": stats.missing_donors, "pool_bytes": text_bytes, "provenance": provenance}

    def set_global(self, adapter: Adapter, round_idx: int, lora_config) -> str:
        self.global_adapter = adapter
        path = save_adapter(self.run_dir / "adapters" / f"round_{round_idx:04d}", adapter, lora_config)
        return str(path)

    def test_shards(self, n: int) -> list[list[tuple[str, str]]]:
        rows = [(r.prompt, r.answer) for r in self.test]
        return [rows[i::n] for i in range(n)]

    def get_seen_prompts(self) -> list[str]:
        return sorted(self.seen_prompts)
