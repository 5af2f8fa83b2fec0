"""The federation's server protocol: PubSwap's public steps and the server-side aggregation.

A part of `jobs.federation.Federation` (which mixes it in): it uses the federation's client actors, the
ServerActor (actors/server.py), the aggregation strategy and the fail-fast `_call`.
pubswap/methods/federated.py drives it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ray

from pubswap import privacy
from pubswap.algorithms.aggregation.payload import payload_bytes
from pubswap.lora import Adapter, num_bytes


class ServerRounds:
    def public_step(self, round_idx: int, step: int, cids: Sequence[int]) -> dict:
        batch_ref = self.server.public_batch.remote(round_idx, step)
        busy = [(a, ids) for a, ids in zip(self.actors, self._by_actor(cids)) if ids]
        answers = [a.answer_public.remote(batch_ref, round_idx, step, ids) for a, ids in busy]
        swapped_ref = self.server.swap.remote(round_idx, step, batch_ref, [ids for _, ids in busy], *answers)
        swapped, *answered = self._call([swapped_ref, *answers])
        gen_s = {cid: a["gen_s"] for a in answered for cid in a["responses"]}
        results = self._per_client(
            self._call(
                [a.public_steps.remote(batch_ref, g, round_idx, step) for (a, _), g in zip(busy, swapped["groups"])]
            )
        )
        for r in results:
            r["gen_s"] = gen_s[r["client"]]
        return {
            "step": step,
            "public": True,
            "clients": results,
            "swapped_in": swapped["swapped_in"],
            "missing_donors": swapped["missing_donors"],
            "pool_bytes": swapped["pool_bytes"],
            "provenance": swapped["provenance"],
        }

    def average(self, round_idx: int, cids: Sequence[int], start: Adapter) -> tuple[Adapter, list[dict], dict]:
        """The round's aggregation; every hosted client then holds the new global adapter. Returns it, the
        participants' drift, and the bytes each participant sent and received ({"upload": [...],
        "download": [...]} in the order of `cids`, exact; "upload_board", "download_board" the same in
        the FedSRD leaderboard's convention: fp32 values only).

        A linear strategy is one allreduce of the sent tensors among all actors. Any other runs where it
        belongs: each actor uploads its participants' payloads, the ServerActor aggregates them (all
        through the object store, no copy via the driver), and every actor applies the one download."""
        w = self.weights(cids)
        order = sorted(cids)
        if self.strategy.linear:
            dp = self.dp_params(round_idx, len(order))
            secure = self.cfg.privacy.secure_aggregation
            # secure aggregation: each actor's fresh public key, by rank, relayed to all
            publics = self._call([a.secagg_key.remote(round_idx) for a in self.actors]) if secure else None
            results = self._call(
                [
                    a.allreduce_average.remote({c: w[c] for c in ids}, round_idx, dp, publics)
                    for a, ids in zip(self.actors, self._by_actor(cids))
                ]
            )
            averaged = next(r["averaged"] for r in results if r["averaged"] is not None)
            sent = {k: v for k, v in start.items() if self.strategy.trains(k)}
            exact, board = num_bytes(sent), payload_bytes(sent, board=True)
            if secure:  # int64 fixed point on the wire
                exact = 8 * sum(v.numel() for v in sent.values())
            comm = {
                "upload": [exact] * len(order),
                "download": [exact] * len(order),
                "upload_board": [board] * len(order),
                "download_board": [board] * len(order),
            }
        else:
            busy = [(a, ids) for a, ids in zip(self.actors, self._by_actor(cids)) if ids]
            uploads = [a.upload.remote(round_idx, ids) for a, ids in busy]
            download_ref, info_ref = self.server.aggregate.options(num_returns=2).remote(
                round_idx, ray.put(start), {c: w[c] for c in order}, *uploads
            )
            per_actor = self._call(
                [
                    a.apply_download.remote(download_ref, {c: w[c] for c in ids}, round_idx)
                    for a, ids in zip(self.actors, self._by_actor(cids))
                ]
            )
            results = [{"clients": drift} for drift in per_actor]
            info = self._call([info_ref])[0]
            averaged = info["adapter"]
            comm = {
                "upload": [info["upload_bytes"][c] for c in order],
                "download": [info["download_bytes"][c] for c in order],
                "upload_board": [info["upload_board"][c] for c in order],
                "download_board": [info["download_board"][c] for c in order],
            }
        drift = sorted((c for r in results for c in r["clients"]), key=lambda c: c["client"])
        if self.cfg.privacy.on:
            comm["privacy"] = self.dp_record(round_idx, len(order), sum(r["clipped"] for r in results))
        return averaged, drift, comm

    def dp_params(self, round_idx: int, participants: int) -> dict | None:
        """What the actors need for a DP-FedAvg aggregation (pubswap/privacy.py), or None when it is off."""
        p = self.cfg.privacy
        if not p.on:
            return None
        return {
            "clip_norm": p.clip_norm,
            "noise_std": p.noise_multiplier * p.clip_norm / participants,  # on the mean of m updates
            "seed": None if p.noise == "secure" else privacy.noise_seed(self.cfg.seed, round_idx, secure=False),
        }

    def dp_record(self, round_idx: int, participants: int, clipped: int) -> dict:
        """The round's privacy record: epsilon after rounds 1..round_idx at the configured delta."""
        p, n = self.cfg.privacy, self.cfg.federation.num_clients
        eps = privacy.epsilon(round_idx, participants / n, p.noise_multiplier, p.delta)
        return {
            "epsilon": eps if math.isfinite(eps) else None,  # None: no noise, no guarantee
            "delta": p.delta,
            "sample_rate": participants / n,
            "noise_multiplier": p.noise_multiplier,
            "clip_norm": p.clip_norm,
            "clipped": clipped,
            "participants": participants,
        }
