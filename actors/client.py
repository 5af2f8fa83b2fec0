"""ClientActor: one rollout engine (vLLM) + one PEFT GRPO trainer, shared by the logical clients it hosts.

A logical client is a federated client: its private rows (which no other client is sent; the driver
loaded them, and clients hosted on one actor share its process: docs/privacy.md), its LoRA adapter and
its optimizer moments. With one client per actor this is "one client, one GPU-pinned actor"; with many,
16-128 clients fit on a few GPUs or one CPU box. Per local step the actor

  * takes the next b private prompts of each hosted participant (shuffled epochs, pubswap.data.order)
    and rolls all of them out in ONE engine call,
    each prompt answered with its own client's current adapter (multi-LoRA), then
  * trains one GRPO step per client, switching the trainer to that client's adapter and optimizer.

On a public step each hosted participant answers the server's prompts (text, tokens and reward go to
the server) and later trains on the group the server swapped together for it. After every update the
engine is pointed at the client's new adapter (saved as a PEFT folder, served under a fresh LoRA id).
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import ray
import torch

from actors.card_share import card_turn, card_uuid, wait_for_engine_share
from actors.collective import tensor_device
from actors.engine_watchdog import EngineWatchdog, engine_dead, engine_processes, exit_actor
from actors.gossip_peer import GossipPeer
from actors.rollout import adapter_root, make_engine, private_adapter_dir
from pubswap import privacy, secagg
from pubswap.algorithms.aggregation import Context, make_strategy
from pubswap.algorithms.grpo import group_advantages, zero_advantage_fraction
from pubswap.algorithms.label_words import accuracy_rewards, label_text
from pubswap.algorithms.swap import CORRECT_THRESHOLD, Response
from pubswap.config import RunConfig, from_dict
from pubswap.data.client_rows import load_client_rows
from pubswap.data.order import private_batch, private_steps_before
from pubswap.data.prompt_length import prompt_ids, uses_chat_template
from pubswap.data.rewards import in_format, make_benchmark_reward, make_row_reward
from pubswap.data.rows import DataError, Row
from pubswap.data.split import rows_sha256
from pubswap.learner.trainer import DTYPES, GRPOTrainer, Sample
from pubswap.lora import Adapter, flatten, save_adapter, squared_distance, truncate_rank, unflatten
from pubswap.run.faults import maybe_crash
from pubswap.run.step_checkpoint import load_optimizer_state, optimizer_state
from pubswap.run.timing import PhaseTimer
from pubswap.seeding import derive_seed


def make_deterministic() -> None:
    """GPU determinism where torch and vLLM allow it (config `deterministic`): cuBLAS with a fixed
    workspace, deterministic torch kernels where they exist (others warn), and vLLM's batch-invariant
    kernels (the engine process inherits the environment). No effect on CPU runs, which are bitwise
    reproducible already."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    os.environ["VLLM_BATCH_INVARIANT"] = "1"
    torch.use_deterministic_algorithms(True, warn_only=True)  # an op without a deterministic kernel warns
    torch.backends.cudnn.benchmark = False


def bind_engine_cores(slot: int, cpus: float) -> None:
    """On CPU, vLLM's engine binds its threads to cores; with its default ("auto") every engine on a node
    takes the same first core, so two actors' engines share one core while the others idle. Give actor
    `slot` its own int(cpus) cores (wrapping around the cores this process may use), unless the user set
    VLLM_CPU_OMP_THREADS_BIND."""
    if "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    n = max(1, min(int(cpus), len(allowed)))
    start = slot * n
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(allowed[(start + k) % len(allowed)]) for k in range(n))


def timed_call(method):
    """An actor entry point: its wall time is busy time of the actor's PhaseTimer (pubswap/run/timing.py)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self.timer.call():
            try:
                return method(self, *args, **kwargs)
            except Exception as e:
                self._on_call_error(e)
                raise

    return wrapper


def as_row(item: Row | tuple[str, str]) -> Row:
    """A work item: a Row, or a bare (prompt, answer) pair (tests, tools)."""
    return item if isinstance(item, Row) else Row(prompt=item[0], answer=item[1], topic="")


@dataclass
class LogicalClient:
    id: int
    rows: list[Row]
    adapter: Adapter
    optimizer: torch.optim.Optimizer
    engine_dir: Path | None = None  # the adapter folder the engine serves for this client
    rank: int | None = None  # below the adapters' rank: this client holds only its first `rank` components
    pre_average: Adapter | None = None  # the adapter it had trained when the round's average began


class ClientCore:
    """The actor's logic without Ray, so it reads (and can be driven) as plain Python.

    `shards` maps each hosted client id to its private rows, or (data.client_paths) to the file this actor
    reads them from.
    """

    def __init__(
        self,
        cfg: dict,
        shards: Mapping[int, Sequence[Row] | str],
        model_dir: str,
        engine_gpu_fraction: float | None = None,
        slot: int = 0,
    ):
        """`engine_gpu_fraction`: vLLM's share of the whole card, from the driver's GPU budget
        (pubswap/learner/gpu_budget.py); None on CPU. `slot`: this actor's index, which picks the CPU cores its
        engine binds to on a CPU-only node."""
        self.timer = PhaseTimer()  # where this actor's time goes (pubswap/run/timing.py); the driver takes it
        if not shards:
            raise ValueError("a client actor must host at least one client")
        self.cfg: RunConfig = from_dict(cfg)
        c = self.cfg
        if c.deterministic:
            make_deterministic()
        # adapters reach the engine through node-local RAM, in the engine's dtype (not the shared run_dir)
        self.adapter_dir = private_adapter_dir(adapter_root(c.rollout.adapter_dir))
        full = c.federation.full_parameter  # dsgd, chocosgd, seedflood: every weight, no LoRA
        policy, strategy = ("full", None) if full else ("lora", make_strategy(c.federation))
        # actors sharing a card load one at a time, and the engine waits for its share of the card
        # (a restarted actor's predecessor may still hold it): actors/card_share.py
        with card_turn(card_uuid()):
            self.trainer = GRPOTrainer.load(
                model_dir, c.lora, c.grpo, dtype=self._train_dtype(), strategy=strategy, seed=c.seed, policy=policy
            )
            self.tokenizer = self.trainer.tokenizer
            r = c.rollout
            if not torch.cuda.is_available():
                bind_engine_cores(slot, c.resources.cpus_per_client)
            else:
                wait_for_engine_share(engine_gpu_fraction or r.gpu_memory_utilization)
            self.engine = make_engine(
                r.backend,
                model_dir,
                lora_rank=c.lora.max_r,
                max_model_len=c.max_model_len,
                dtype=c.model.dtype,
                seed=c.seed,
                tokenizer=self.tokenizer,
                kv_cache_gib=r.kv_cache_gib,
                gpu_memory_utilization=engine_gpu_fraction or r.gpu_memory_utilization,
                max_num_seqs=r.max_num_seqs or self._default_max_num_seqs(len(shards)),
                max_loras=len(shards),
                enforce_eager=r.enforce_eager,
                max_num_batched_tokens=r.max_num_batched_tokens,
                sleep_mode=r.sleep_mode,
                lora_mode=r.lora_mode,
                lora_scale=c.lora.alpha / c.lora.max_r,
                full=full,
            )
        self._engine_dtype = DTYPES[c.model.dtype]
        self.reward_fn = make_row_reward(c.data, c.seed)
        initial = self.trainer.adapter()
        self.global_adapter = initial  # what the server holds; a client of lower rank holds a truncation
        self.clients = {}
        self._data_error: str | None = None
        for cid, rows in sorted(shards.items()):
            client = LogicalClient(
                cid, self._own_rows(cid, rows), initial, self.trainer.new_optimizer(), rank=c.lora.reduced_rank(cid)
            )
            client.adapter = self._held_by(client, initial)
            self.clients[cid] = client
        self._version = 0
        self._active: int | None = None  # whose weights the trainer holds
        for cid in self.clients:
            self._sync_engine(cid)
        self.peer = GossipPeer(self)  # the serverless methods' side of this actor (actors/gossip_peer.py)

    def _on_call_error(self, error: Exception) -> None:
        """A failed call, before its error goes to the caller (the Ray actor ends itself when its engine died)."""

    def _own_rows(self, cid: int, rows: Sequence[Row] | str) -> list[Row]:
        """The rows the driver sent, or (data.client_paths) the rows read here from this client's file;
        a file that cannot be used leaves the client empty and is reported by `client_data`."""
        if not isinstance(rows, str):
            return list(rows)
        c = self.cfg
        fmt = c.model.prompt_format
        try:
            own, _ = load_client_rows(
                c.data,
                rows,
                cid,
                c.seed,
                lambda r: len(prompt_ids(self.tokenizer, r.prompt, r.context, fmt)),
                c.model.max_prompt_len,
            )
        except DataError as e:
            self._data_error = self._data_error or str(e)
            return []
        return own

    def client_data(self) -> dict:
        """{"error": the first client file this actor could not use (or None), "clients": {client:
        (rows, sha256 of its rows)}}: all the driver learns of rows it did not send."""
        return {
            "error": self._data_error,
            "clients": {cid: (len(cl.rows), rows_sha256(cl.rows)) for cid, cl in self.clients.items()},
        }

    def _default_max_num_seqs(self, hosted: int) -> int:
        """Every sequence of one engine call at once: a step's rollouts of all hosted clients, or this
        actor's share of an evaluation (test prompts / actors x eval_n), whichever is larger."""
        c = self.cfg
        actors = c.resources.num_actors or c.federation.num_clients
        return max(16, hosted * c.grpo.b * c.grpo.K, -(-c.data.test_size // actors) * c.eval_n)

    def _train_dtype(self) -> str:
        return self.cfg.model.dtype if torch.cuda.is_available() else "float32"

    @property
    def ids(self) -> list[int]:
        return list(self.clients)

    def _hosted(self, cids: Sequence[int] | None) -> list[int]:
        if cids is None:
            return self.ids
        unknown = [c for c in cids if c not in self.clients]
        if unknown:
            raise ValueError(f"clients {unknown} are not hosted here (hosted: {self.ids})")
        return list(cids)

    # --- adapter plumbing --------------------------------------------------------------------

    def _sync_engine(self, cid: int) -> None:
        """Serve client `cid`'s current adapter from the engine (new folder, new LoRA id)."""
        with self.timer.phase("sync"):
            self._sync_engine_now(cid)

    def _sync_engine_now(self, cid: int) -> None:
        client = self.clients[cid]
        if getattr(self.engine, "wants_tensors", False):  # a merged engine takes the tensors, no folder
            self.engine.set_adapter(None, key=cid, tensors=client.adapter)  # merged at its next rollout
            return
        self._version += 1
        path = save_adapter(
            self.adapter_dir / f"client_{cid}" / f"adapter_v{self._version}",
            {k: v.to(self._engine_dtype) for k, v in client.adapter.items()},
            self.trainer.lora_config,
        )
        self.engine.set_adapter(str(path), key=cid)
        if client.engine_dir is not None:
            shutil.rmtree(client.engine_dir, ignore_errors=True)
        client.engine_dir = path

    def _activate(self, cid: int) -> None:
        if self._active != cid:
            client = self.clients[cid]
            self.trainer.activate(client.adapter, client.optimizer)
            self.trainer.rank = client.rank
            self._active = cid

    @staticmethod
    def _held_by(client: LogicalClient, adapter: Adapter) -> Adapter:
        return adapter if client.rank is None else truncate_rank(adapter, client.rank)

    @timed_call
    def set_global(self, adapter: Adapter) -> None:
        """Round start: every hosted client takes the global adapter and a fresh optimizer (paper: per round)."""
        self.trainer.set_adapter(adapter, reset_optimizer=True)  # also the anchor of the client penalty
        global_adapter = self.trainer.adapter()
        self.global_adapter = global_adapter
        for cid, client in self.clients.items():
            # shared until the client trains (tensors are replaced, not mutated)
            client.adapter = self._held_by(client, global_adapter)
            client.optimizer = self.trainer.new_optimizer()
            self._sync_engine(cid)
        self._active = None
        self.peer.new_period()  # SeedFlood: the period starts from the global weights

    # --- the gossip peer's host (actors/gossip_peer.py: PeerHost) and its calls from the driver ---

    def serve(self, cid: int) -> None:
        self._sync_engine(cid)

    def release_trainer(self) -> None:
        self._active = None

    def gossip_payload(self, round_idx: int, step: int, cids: Sequence[int]):
        return self.peer.gossip_payload(round_idx, step, cids)

    def gossip_apply(self, round_idx: int, step: int, rows, need: Sequence[int], *payloads) -> dict:
        return self.peer.gossip_apply(round_idx, step, rows, need, *payloads)

    def flood_messages(self, round_idx: int, step: int) -> dict:
        return self.peer.flood_messages(round_idx, step)

    def flood_apply(self, round_idx: int, step: int, messages) -> dict:
        return self.peer.flood_apply(round_idx, step, messages)

    def hosted_states(self) -> dict:
        return self.peer.hosted_states()

    def load_states(self, states) -> None:
        self.peer.load_states(states)

    def train_states(self, cids: Sequence[int]) -> dict[int, dict]:
        """Each client's adapter and optimizer state (moments, step count) as CPU tensors, for an
        in-round checkpoint (pubswap/run/step_checkpoint.py)."""
        return {
            cid: {"adapter": dict(self.clients[cid].adapter), "opt": optimizer_state(self.clients[cid].optimizer)}
            for cid in self._hosted(cids)
        }

    @timed_call
    def load_train_states(self, states: Mapping[int, dict]) -> None:
        """Continue a round from an in-round checkpoint: these clients take their saved adapter and
        optimizer state (call after set_global, which set the round's anchor)."""
        for cid, st in states.items():
            client = self.clients[self._hosted([cid])[0]]
            client.adapter = {k: v.float() for k, v in st["adapter"].items()}
            client.optimizer = self.trainer.new_optimizer()
            load_optimizer_state(client.optimizer, st["opt"])
            self._sync_engine(cid)
        self._active = None  # the trainer's live weights are no client's now

    def get_adapter(self, cid: int | None = None) -> Adapter:
        return self.clients[self.ids[0] if cid is None else cid].adapter

    def get_pre_average(self, cid: int) -> Adapter | None:
        return self.clients[cid].pre_average

    def lora_config(self):
        """The resolved PEFT LoraConfig (target modules expanded), for adapter folders written elsewhere."""
        return self.trainer.lora_config

    # --- rollouts ----------------------------------------------------------------------------

    def prompt_ids(self, row: Row | str, limit: int | None = None) -> tuple[int, ...]:
        """The prompt's token ids; over `limit` (default model.max_prompt_len; a benchmark's: the suite's
        budget) is an error, since the driver drops such rows before they reach an actor."""
        row = Row(row, "", "") if isinstance(row, str) else row
        ids = prompt_ids(self.tokenizer, row.prompt, row.context, self.cfg.model.prompt_format)
        limit = limit or self.cfg.model.max_prompt_len
        if len(ids) > limit:
            raise ValueError(f"a prompt of {len(ids)} tokens exceeds its budget of {limit}: {row.prompt[:80]!r}...")
        return tuple(ids)

    def _rollout(
        self,
        requests: Sequence[tuple[int, Sequence[Row]]],
        n: int,
        temperature: float,
        seed_keys: tuple,
        phase: str = "gen",
        seed_index: Sequence[int] | None = None,
        reward_fn=None,
        prompt_limit: int | None = None,
    ) -> list[tuple[list[tuple[int, ...]], list[list[Response]]]]:
        """One engine call for every (client id, [row, ...]) request; per request the prompt ids and the
        scored groups. Prompt i of client c is seeded by (seed_keys, c, i), or with `seed_index` (one
        request) by (seed_keys, seed_index[i]): the same seed wherever the prompt is answered. `reward_fn`
        (response, row) scores them instead of the run's reward (a benchmark's own verifier), and
        `prompt_limit` is then the benchmark prompts' token budget."""
        reward_fn = reward_fn or self.reward_fn
        pids, seeds, keys, answers = [], [], [], []
        for cid, batch in requests:
            for i, row in enumerate(batch):
                row = as_row(row)
                pids.append(self.prompt_ids(row, prompt_limit))
                seeds.append(
                    derive_seed(self.cfg.seed, *seed_keys, cid, i)
                    if seed_index is None
                    else derive_seed(self.cfg.seed, *seed_keys, seed_index[i])
                )
                keys.append(cid)
                answers.append(row)
        if self.engine.asleep:
            torch.cuda.empty_cache()  # what the trainer cached goes back to the card before the engine wakes
        # the behaviour log-probs travel with public responses only when truncated IS will use them
        want_logprobs = self.cfg.grpo.tis_cap > 0 and seed_keys[0] == "public"
        merge_before = getattr(self.engine, "merge_s", 0.0)
        with self.timer.phase(phase):
            outs = self.engine.generate(
                pids,
                n=n,
                temperature=temperature,
                max_tokens=self.cfg.model.max_response_len,
                seeds=seeds,
                keys=keys,
                logprobs=want_logprobs,
            )
        # a merged engine rebuilds its weights for each adapter inside generate: that is adapter sync
        self.timer.move(getattr(self.engine, "merge_s", 0.0) - merge_before, phase, "sync")
        results, at = [], 0
        for cid, batch in requests:
            groups = []
            for completions, row in zip(outs[at : at + len(batch)], answers[at : at + len(batch)]):
                group = []
                for c in completions:
                    text = self.tokenizer.decode(list(c.token_ids), skip_special_tokens=True)
                    reward = reward_fn(text, row)
                    group.append(
                        Response(
                            text=text,
                            reward=reward,
                            correct=reward > CORRECT_THRESHOLD,
                            origin=cid,
                            token_ids=tuple(c.token_ids),
                            logprobs=tuple(c.logprobs),
                        )
                    )
                groups.append(group)
            results.append((pids[at : at + len(batch)], groups))
            at += len(batch)
        return results

    def _train(
        self, cid: int, pids: Sequence[tuple[int, ...]], groups: Sequence[Sequence[Response]], round_idx: int, step: int
    ) -> dict:
        rewards = torch.tensor([[r.reward for r in g] for g in groups], dtype=torch.float32)
        adv = group_advantages(rewards, self.cfg.grpo.adv_eps)
        samples = [
            Sample(
                pid,
                r.token_ids if r.token_ids else (self.tokenizer.eos_token_id,),
                float(a),
                r.origin,
                r.logprobs if r.token_ids else (),
            )
            for pid, g, row in zip(pids, groups, adv)
            for r, a in zip(g, row.tolist())
        ]
        t = time.perf_counter()
        with self.timer.phase("train"):
            self.engine.sleep()  # sleep mode (GPU): the engine's memory is the trainer's until the next rollout
            self._activate(cid)
            if self.cfg.federation.gossip_rule == "seedflood":  # a zeroth-order step, sent as (seed, scalar)
                metrics = self.peer.zo_train(cid, samples, round_idx, step)
            else:
                metrics = self.trainer.step(samples, owner=cid)
            self.clients[cid].adapter = self.trainer.adapter()
        self._sync_engine(cid)
        lengths = [len(r.token_ids) for g in groups for r in g]
        eos = self.tokenizer.eos_token_id
        clipped = [
            n >= self.cfg.model.max_response_len and r.token_ids[-1:] != (eos,)
            for g in groups
            for r, n in zip(g, (len(x.token_ids) for x in g))
        ]
        metrics.update(
            client=cid,
            train_s=time.perf_counter() - t,
            reward_mean=rewards.mean().item(),
            reward_std=rewards.std(unbiased=False).item(),
            response_length_mean=sum(lengths) / max(1, len(lengths)),
            response_clip_ratio=sum(clipped) / max(1, len(clipped)),
            zero_adv_frac=zero_advantage_fraction(rewards),
            off_policy=sum(s.origin != cid for s in samples),
            response_tokens=sum(len(s.response_ids) for s in samples),
        )
        return metrics

    def label_ids(self, word: str) -> tuple[int, ...]:
        """The tokens of a label word as it follows this client's prompts (objective label-words)."""
        fmt = self.cfg.model.prompt_format
        plain = fmt != "alpaca" and not uses_chat_template(self.tokenizer, fmt)  # Alpaca's prompt ends in a space
        return tuple(self.tokenizer(label_text(word, plain), add_special_tokens=False)["input_ids"])

    def target_ids(self, row: Row) -> tuple[int, ...]:
        """What a cross-entropy objective scores after the prompt: the label word (label-words), or the
        reference answer and the end-of-sequence token, so the model learns to stop (sft), cut at
        model.max_response_len tokens as the reference cuts its sequences (and as the GPU budget assumes)."""
        if self.cfg.objective == "label-words":
            return self.label_ids(row.answer)
        ids = tuple(self.tokenizer(row.answer, add_special_tokens=False)["input_ids"])
        eos = self.tokenizer.eos_token_id
        return (ids + ((eos,) if eos is not None else ()))[: self.cfg.model.max_response_len]

    def _train_targets(self, cid: int, rows: Sequence[Row], round_idx: int, step: int) -> dict:
        """One cross-entropy step of client `cid` on its rows' targets (first-order; SeedFlood: one
        zeroth-order step on the same loss)."""
        samples = [Sample(self.prompt_ids(row), self.target_ids(row), 1.0, cid) for row in rows]
        t = time.perf_counter()
        with self.timer.phase("train"):
            self._activate(cid)
            maybe_crash("client", round_idx, step, "private_train", cid)
            if self.cfg.federation.gossip_rule == "seedflood":
                metrics = self.peer.zo_train(cid, samples, round_idx, step)
            else:
                metrics = self.trainer.ce_step(samples)
            self.clients[cid].adapter = self.trainer.adapter()
        if self.cfg.objective == "sft":  # sft evaluates by sampling: the engine serves what was trained
            self._sync_engine(cid)
        nll = metrics.get("nll", metrics["loss"])
        metrics.update(
            client=cid,
            train_s=time.perf_counter() - t,
            reward_mean=math.exp(-nll),  # the target tokens' geometric-mean probability
            reward_std=0.0,
            response_tokens=sum(len(s.response_ids) for s in samples),
        )
        return metrics

    def _label_accuracy(self, rows: Sequence[Row], prompt_limit: int | None = None) -> list[list[float]]:
        """Per row [1.0] when its most likely label word (under the trainer's live weights) is its label."""
        for row in rows:
            if not row.choices or row.answer not in row.choices:
                raise ValueError(f"objective label-words: a test row has no label words or its label is not one: {row}")
        samples = [
            Sample(self.prompt_ids(row, prompt_limit), self.label_ids(c), 0.0) for row in rows for c in row.choices
        ]
        logp, scores, at = self.trainer.sequence_logprobs(samples), [], 0
        for row in rows:
            scores.append(logp[at : at + len(row.choices)])
            at += len(row.choices)
        return accuracy_rewards(scores, [r.choices for r in rows], [r.answer for r in rows])

    # --- the steps ---------------------------------------------------------------------------

    @timed_call
    def private_steps(self, round_idx: int, step: int, cids: Sequence[int] | None = None) -> list[dict]:
        """One private GRPO step for each client in `cids` (default: all hosted), rolled out together."""
        g = self.cfg.grpo
        requests = []
        for cid in self._hosted(cids):
            rows = self.clients[cid].rows
            index = private_steps_before(self.cfg.federation, self.cfg.seed, cid, round_idx, step)
            idx = private_batch(self.cfg.seed, cid, len(rows), g.b, index)  # shuffled epochs, no replacement
            requests.append((cid, [rows[i] for i in idx]))
        if self.cfg.objective != "grpo":  # no rollouts: the label words / reference answers are the targets
            return [
                {"step": step, "public": False, "gen_s": 0.0, **self._train_targets(cid, rows, round_idx, step)}
                for cid, rows in requests
            ]
        t = time.perf_counter()
        rolled = self._rollout(requests, g.K, g.temperature, ("rollout", round_idx, step))
        gen_s = time.perf_counter() - t
        out = []
        for (cid, _), (pids, groups) in zip(requests, rolled):
            maybe_crash("client", round_idx, step, "private_train", cid)
            out.append(
                {"step": step, "public": False, "gen_s": gen_s, **self._train(cid, pids, groups, round_idx, step)}
            )
        return out

    @timed_call
    def answer_public(self, batch: Sequence[Row], round_idx: int, step: int, cids: Sequence[int] | None = None) -> dict:
        """K responses per public prompt from each client in `cids`: {"responses": {cid: groups}, "gen_s"}."""
        g = self.cfg.grpo
        hosted = self._hosted(cids)
        t = time.perf_counter()
        rolled = self._rollout([(cid, batch) for cid in hosted], g.K, g.temperature, ("public", round_idx, step))
        for cid in hosted:
            maybe_crash("client", round_idx, step, "public_answer", cid)
        return {
            "responses": {cid: groups for cid, (_, groups) in zip(hosted, rolled)},
            "gen_s": time.perf_counter() - t,
        }

    @timed_call
    def public_steps(
        self, batch: Sequence[Row], groups: Mapping[int, Sequence[Sequence[Response]]], round_idx: int, step: int
    ) -> list[dict]:
        """One GRPO step per client id in `groups` on the group the server swapped together for it."""
        pids = [self.prompt_ids(as_row(row)) for row in batch]
        out = []
        for cid in self._hosted(list(groups)):
            maybe_crash("client", round_idx, step, "public_train", cid)
            out.append({"step": step, "public": True, **self._train(cid, pids, groups[cid], round_idx, step)})
        return out

    def _sent(self, adapter: Adapter) -> Adapter:
        """The tensors a linear strategy averages (FFA-LoRA: the B's only; the rest never changes)."""
        return {k: v for k, v in adapter.items() if self.trainer.strategy.trains(k)}

    def weighted_sum(self, weights: Mapping[int, float]) -> tuple[torch.Tensor, object]:
        """sum over hosted clients c in `weights` of weights[c] * (what c sends), as one flat vector."""
        flat, spec = flatten(self._sent(self.get_adapter()))
        total = torch.zeros_like(flat)
        for cid, w in sorted(weights.items()):
            client = self.clients[cid]
            client.pre_average = client.adapter
            total += w * flatten(self._sent(client.adapter))[0]
        return total, spec

    @timed_call
    def upload(self, round_idx: int, cids: Sequence[int]) -> dict[int, dict]:
        """A non-linear strategy's client step: what each hosted participant sends the server."""
        strategy, start = self.trainer.strategy, self.trainer.anchor
        out = {}
        with self.timer.phase("avg"):
            for cid in self._hosted(cids):
                maybe_crash("client", round_idx, 0, "average", cid)
                client = self.clients[cid]
                client.pre_average = client.adapter
                out[cid] = strategy.upload(start, client.adapter, Context(self.cfg.seed, round_idx, cid, client.rank))
        return out

    @timed_call
    def apply_download(self, download: dict, weights: Mapping[int, float], round_idx: int) -> list[dict]:
        """Every hosted client applies the server's download to the round-start adapter (the same for all)."""
        with self.timer.phase("avg"):
            new = self.trainer.strategy.apply_download(
                self.trainer.anchor, download, Context(self.cfg.seed, round_idx, None)
            )
        return self.finish_average(new, weights)

    def finish_average(self, averaged: Adapter, weights: Mapping[int, float]) -> list[dict]:
        drift = [
            {"client": cid, "drift_sq": squared_distance(self.clients[cid].adapter, averaged).item()}
            for cid in sorted(weights)
        ]
        self.set_global(averaged)
        return drift

    @timed_call
    def evaluate(
        self,
        rows: Sequence[Row],
        round_idx: int,
        adapter: Adapter | None = None,
        index: Sequence[int] | None = None,
        scoring: str | None = None,
    ) -> dict:
        """The global adapter's (or `adapter`'s: the decentralized clients' average) `eval_n` responses per
        test prompt: {"rewards": per prompt, "in_format": per prompt}. `index`: the rows' positions in the
        test set, which seed their sampling, so a score does not depend on how many actors share the test
        set or which clients they host. `scoring` (a benchmark's, pubswap/data/board_evals.py): choice
        (the most likely of the row's choices), code or math; None: the run's own objective and reward."""
        if not rows:
            return {"rewards": [], "in_format": []}
        client = self.clients[self.ids[0]]
        maybe_crash("client", round_idx, 0, "evaluate", client.id)
        own, target = client.adapter, (self.global_adapter if adapter is None else adapter)
        verifier, reward_fn = self.cfg.data.verifier, None
        limit = self.cfg.suite_prompt_len if scoring else None
        if scoring in ("code", "math"):
            verifier, reward_fn = scoring, make_benchmark_reward(scoring)
        if scoring == "choice" or (scoring is None and self.cfg.objective == "label-words"):  # by the trainer
            with self.timer.phase("eval"):
                self.trainer.load_weights(target)
                self._active = None  # the trainer holds `target`, no client's weights
                rewards = self._label_accuracy([as_row(r) for r in rows], limit)
            return {"rewards": rewards, "in_format": [[True] for _ in rewards]}
        if own is not target:  # a client of lower rank, or a decentralized client: serve `target` meanwhile
            client.adapter = target
            self._sync_engine(client.id)
        try:
            ((_, groups),) = self._rollout(
                [(client.id, rows)],
                self.cfg.eval_n,
                self.cfg.grpo.val_temperature,
                ("eval", round_idx),
                phase="eval",
                seed_index=index,
                reward_fn=reward_fn,
                prompt_limit=limit,
            )
        finally:
            if own is not target:
                client.adapter = own
                self._sync_engine(client.id)
        return {
            "rewards": [[r.reward for r in g] for g in groups],
            "in_format": [[in_format(r.text, verifier) for r in g] for g in groups],
        }

    def engine_logprobs(self, token_ids: Sequence[int], cid: int | None = None) -> list[float]:
        return self.engine.prompt_logprobs(token_ids, key=self.ids[0] if cid is None else cid)

    def trainer_logprobs(
        self, prompt_ids: Sequence[int], response_ids: Sequence[int], cid: int | None = None, temperature: float = 1.0
    ) -> list[float]:
        self._activate(self.ids[0] if cid is None else cid)
        return self.trainer.response_logprobs([Sample(tuple(prompt_ids), tuple(response_ids), 0.0)], temperature)[
            0
        ].tolist()


# A client actor that dies (killed process, lost node) is restarted by Ray: its constructor runs again with
# the same arguments. Calls in flight fail instead of being retried on the fresh actor (max_task_retries=0):
# the driver then restarts every client actor and redoes the round from its start (jobs.federation).
@ray.remote(max_restarts=-1, max_task_retries=0)
class ClientActor(ClientCore):
    """Ray actor around ClientCore; adds the collective averaging among client actors."""

    def __init__(self, *args, **kwargs):
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        super().__init__(*args, **kwargs)
        self._group: str | None = None
        self._secagg_keys: secagg.KeyPair | None = None  # this aggregation's, used once
        # a dead engine would leave generate() hanging: end the actor instead (actors/engine_watchdog.py)
        self._watchdog = EngineWatchdog(engine_processes())

    def _on_call_error(self, error: Exception) -> None:
        """A call that failed because the engine died ends the actor, as the watchdog does: the driver then
        sees a lost actor and redoes the round. Without this, a call that reaches the dead engine before the
        watchdog's next poll (EngineDeadError) would reach the driver as an ordinary error and end the run."""
        if engine_dead(error) or self._watchdog.engine_gone():
            self._watchdog.stop()
            exit_actor(
                f"the vLLM engine of this client actor (pid {os.getpid()}) died during a call "
                f"({type(error).__name__}); the actor exits too, so that it is restarted with a fresh engine "
                "and the round is redone"
            )

    def close(self) -> None:
        """Remove this actor's node-local adapter folders (called before the actor is killed)."""
        self._watchdog.stop()
        shutil.rmtree(self.adapter_dir, ignore_errors=True)

    def take_timing(self) -> dict[str, float]:
        """Seconds per phase since the last take (pubswap/run/timing.py), then reset."""
        return self.timer.take()

    def ping(self) -> tuple[list[int], int]:
        """(hosted client ids, process id): a new pid means the actor was restarted."""
        return self.ids, os.getpid()

    def init_collective(self, world_size: int, rank: int, backend: str, group_name: str) -> None:
        import ray.util.collective as col

        col.init_collective_group(world_size, rank, backend=backend, group_name=group_name)
        self._group = group_name
        self._flat_device = tensor_device(backend)
        # a warm-up allreduce: a backend that cannot run here fails when the group forms, not after a round
        ones = torch.ones(1, device=self._flat_device)
        col.allreduce(ones, group_name=group_name)
        if ones.item() != world_size:
            raise RuntimeError(
                f"the {backend} group's warm-up allreduce of ones over {world_size} actors gave {ones.item()}"
            )

    @timed_call
    def allreduce_average(
        self,
        weights: Mapping[int, float],
        round_idx: int = 0,
        dp: Mapping | None = None,
        publics: Sequence[bytes] | None = None,
    ) -> dict:
        """The weighted mean of the participants' adapters, via one allreduce among the client actors.

        `weights` holds this actor's participants (possibly none) and their weights; the weights of all
        participants on all actors sum to 1. Every hosted client then holds the mean.
        `dp` ({"clip_norm", "noise_std", "seed"}: DP-FedAvg, pubswap/privacy.py): each participant's update
        is clipped here, rank 0 adds the noise of the mean (seed None: from the OS's entropy), and the
        allreduce sums updates, not adapters. `publics` (every actor's public key for this aggregation, by
        rank): secure aggregation, each actor's vector masked (pubswap/secagg.py).
        """
        import ray.util.collective as col

        for cid in weights:
            maybe_crash("client", round_idx, 0, "average", cid)
        clipped = 0
        with self.timer.phase("avg"):
            start = None  # DP: the round's global, flat; the allreduce sums updates from it
            if dp is None:
                flat, spec = self.weighted_sum(weights)
            else:
                start, spec = flatten(self._sent(self.trainer.anchor))
                flat, clipped = self.clipped_update_sum(weights, start, dp["clip_norm"])
                if col.get_rank(self._group) == 0 and dp["noise_std"] > 0:
                    secure = dp["seed"] is None
                    seed = privacy.noise_seed(self.cfg.seed, round_idx, secure) if secure else dp["seed"]
                    flat += privacy.gaussian(flat.numel(), dp["noise_std"], seed)
            if publics is None:
                flat = flat.to(self._flat_device)  # NCCL: the actor's GPU; gloo: the CPU
                col.allreduce(flat, group_name=self._group)
                flat = flat.cpu()
            else:
                flat = self._masked_allreduce(flat, round_idx, publics)
            if start is not None:  # the mean update, onto the round's global
                flat = start + flat
            averaged = {**self.trainer.anchor, **unflatten(flat, spec)}  # unsent tensors: unchanged
        return {
            "clients": self.finish_average(averaged, weights),
            "averaged": averaged if col.get_rank(self._group) == 0 else None,
            "clipped": clipped,
        }

    def secagg_key(self, round_idx: int) -> bytes:
        """A fresh key pair for this round's secure aggregation (pubswap/secagg.py); its public key."""
        self._secagg_keys = secagg.KeyPair()
        return self._secagg_keys.public

    def _masked_allreduce(self, flat: torch.Tensor, round_idx: int, publics: Sequence[bytes]) -> torch.Tensor:
        """The allreduce's sum of `flat` over the actors, each actor's vector masked (fixed point, int64)."""
        import ray.util.collective as col

        keys, self._secagg_keys = self._secagg_keys, None  # a key pair is used once
        if keys is None:
            raise RuntimeError("secure aggregation: this actor has no key pair for the round (restarted since?)")
        rank = col.get_rank(self._group)
        context = f"{self._group}/{round_idx}".encode()
        up = torch.from_numpy(secagg.masked(flat, rank, list(publics), keys, context).view(np.int64))
        up = up.to(self._flat_device)
        col.allreduce(up, group_name=self._group)
        return secagg.decode(up.cpu().numpy())

    def clipped_update_sum(
        self, weights: Mapping[int, float], start: torch.Tensor, clip_norm: float
    ) -> tuple[torch.Tensor, int]:
        """sum over hosted clients c in `weights` of weights[c] * (c's update clipped to `clip_norm`): an
        update is what c sends minus `start` (the round's global, flat). Also how many were clipped."""
        total, clipped = torch.zeros_like(start), 0
        for cid, w in sorted(weights.items()):
            client = self.clients[cid]
            client.pre_average = client.adapter
            update, was = privacy.clip(flatten(self._sent(client.adapter))[0] - start, clip_norm)
            total += w * update
            clipped += was
        return total, clipped
