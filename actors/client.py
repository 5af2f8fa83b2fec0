"""ClientActor: one federated client = a rollout engine (vLLM) + a PEFT GRPO trainer on the same base.

Its private rows never leave it. Per local step it samples b private prompts, rolls out K responses
with its *current* adapter, scores them and trains one GRPO step; on a public step it answers the
server's public prompts (text, tokens and reward go to the server) and later trains on the group the
server swapped together for it. After every trainer update the engine is pointed at the new adapter
(saved as a PEFT folder, served under a fresh LoRA id).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import ray
import torch

from actors.rollout import make_engine
from pubswap.aggregation import make_strategy
from pubswap.config import RunConfig, from_dict
from pubswap.data.rows import Row
from pubswap.faults import maybe_crash
from pubswap.grpo import group_advantages, zero_advantage_fraction
from pubswap.lora import Adapter, flatten, save_adapter, squared_distance, unflatten
from pubswap.rewards import make_reward
from pubswap.seeding import derive_seed, rng
from pubswap.swap import Response
from pubswap.trainer import LoraGRPOTrainer, Sample

CORRECT_THRESHOLD = 0.5  # rewards are 0/1; a response is "correct" above this


class ClientCore:
    """The client's logic without Ray, so it reads (and can be driven) as plain Python."""

    def __init__(self, cfg: dict, client_id: int, rows: Sequence[Row], model_dir: str, work_dir: str):
        self.cfg: RunConfig = from_dict(cfg)
        self.id = client_id
        self.rows = list(rows)
        self.work_dir = Path(work_dir) / f"client_{client_id}"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        c = self.cfg
        self.trainer = LoraGRPOTrainer(model_dir, c.lora, c.grpo, dtype=self._train_dtype(),
                                       strategy=make_strategy(c.federation), seed=c.seed)
        self.tokenizer = self.trainer.tokenizer
        self.engine = make_engine(c.rollout.backend, model_dir, lora_rank=c.lora.r,
                                  max_model_len=c.model.max_prompt_len + c.model.max_response_len,
                                  dtype=c.model.dtype, seed=c.seed, tokenizer=self.tokenizer,
                                  kv_cache_gib=c.rollout.kv_cache_gib,
                                  gpu_memory_utilization=c.rollout.gpu_memory_utilization,
                                  max_num_seqs=max(16, c.grpo.b * c.grpo.K))
        self.reward_fn = make_reward(c.data.reward)
        self._version = 0
        self._engine_dir: Path | None = None
        self.pre_average: Adapter | None = None
        self._sync_engine()

    def _train_dtype(self) -> str:
        return self.cfg.model.dtype if torch.cuda.is_available() else "float32"

    # --- adapter plumbing --------------------------------------------------------------------

    def _sync_engine(self) -> None:
        """Serve the trainer's current adapter from the engine (new folder, new LoRA id)."""
        self._version += 1
        path = save_adapter(self.work_dir / f"adapter_v{self._version}", self.trainer.adapter(),
                            self.trainer.lora_config)
        self.engine.set_adapter(str(path))
        if self._engine_dir is not None:
            shutil.rmtree(self._engine_dir, ignore_errors=True)
        self._engine_dir = path

    def set_global(self, adapter: Adapter) -> None:
        """Round start: load the global adapter; the optimizer is reset (paper: per round)."""
        self.trainer.set_adapter(adapter, reset_optimizer=True)
        self._sync_engine()

    def get_adapter(self) -> Adapter:
        return self.trainer.adapter()

    def lora_config(self):
        """The resolved PEFT LoraConfig (target modules expanded), for adapter folders written elsewhere."""
        return self.trainer.lora_config

    # --- rollouts ----------------------------------------------------------------------------

    def prompt_ids(self, prompt: str) -> tuple[int, ...]:
        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                 tokenize=True, return_dict=False)
        ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
        return tuple(ids[-self.cfg.model.max_prompt_len:])

    def _rollout(self, prompts: Sequence[str], answers: Sequence[str], n: int, temperature: float,
                 seed_keys: tuple) -> tuple[list[tuple[int, ...]], list[list[Response]]]:
        pids = [self.prompt_ids(p) for p in prompts]
        seeds = [derive_seed(self.cfg.seed, *seed_keys, self.id, i) for i in range(len(prompts))]
        outs = self.engine.generate(pids, n=n, temperature=temperature, max_tokens=self.cfg.model.max_response_len,
                                    seeds=seeds)
        groups = []
        for completions, answer in zip(outs, answers):
            group = []
            for c in completions:
                text = self.tokenizer.decode(list(c.token_ids), skip_special_tokens=True)
                reward = self.reward_fn(text, answer)
                group.append(Response(text=text, reward=reward, correct=reward > CORRECT_THRESHOLD, origin=self.id,
                                      token_ids=tuple(c.token_ids)))
            groups.append(group)
        return pids, groups

    def _train(self, pids: Sequence[tuple[int, ...]], groups: Sequence[Sequence[Response]]) -> dict:
        rewards = torch.tensor([[r.reward for r in g] for g in groups], dtype=torch.float32)
        adv = group_advantages(rewards, self.cfg.grpo.adv_eps)
        samples = [Sample(pid, r.token_ids if r.token_ids else (self.tokenizer.eos_token_id,), float(a), r.origin)
                   for pid, g, row in zip(pids, groups, adv) for r, a in zip(g, row.tolist())]
        t = time.perf_counter()
        metrics = self.trainer.step(samples)
        self._sync_engine()
        metrics.update(train_s=time.perf_counter() - t, reward_mean=rewards.mean().item(),
                       zero_adv_frac=zero_advantage_fraction(rewards),
                       off_policy=sum(s.origin != self.id for s in samples),
                       response_tokens=sum(len(s.response_ids) for s in samples))
        return metrics

    # --- the steps ---------------------------------------------------------------------------

    def private_step(self, round_idx: int, step: int) -> dict:
        g = self.cfg.grpo
        gen = rng(self.cfg.seed, "private", round_idx, step, self.id)
        idx = gen.choice(len(self.rows), size=g.b, replace=len(self.rows) < g.b)
        batch = [self.rows[int(i)] for i in idx]
        t = time.perf_counter()
        pids, groups = self._rollout([r.prompt for r in batch], [r.answer for r in batch], g.K, g.temperature,
                                     ("rollout", round_idx, step))
        gen_s = time.perf_counter() - t
        maybe_crash("client", round_idx, step, "private_train", self.id)
        return {"client": self.id, "step": step, "public": False, "gen_s": gen_s, **self._train(pids, groups)}

    def answer_public(self, batch: Sequence[tuple[str, str]], round_idx: int, step: int) -> dict:
        g = self.cfg.grpo
        t = time.perf_counter()
        _, groups = self._rollout([p for p, _ in batch], [a for _, a in batch], g.K, g.temperature,
                                  ("public", round_idx, step))
        maybe_crash("client", round_idx, step, "public_answer", self.id)
        return {"responses": groups, "gen_s": time.perf_counter() - t}

    def public_step(self, batch: Sequence[tuple[str, str]], groups: Sequence[Sequence[Response]], round_idx: int,
                    step: int) -> dict:
        maybe_crash("client", round_idx, step, "public_train", self.id)
        pids = [self.prompt_ids(p) for p, _ in batch]
        return {"client": self.id, "step": step, "public": True, **self._train(pids, groups)}

    def weighted_adapter(self, weight: float) -> tuple[torch.Tensor, object]:
        flat, spec = flatten(self.trainer.adapter())
        return flat * weight, spec

    def finish_average(self, averaged: Adapter) -> dict:
        pre = self.trainer.adapter()
        self.pre_average = pre
        drift = squared_distance(pre, averaged).item()
        self.set_global(averaged)
        return {"client": self.id, "drift_sq": drift}

    def evaluate(self, rows: Sequence[tuple[str, str]], round_idx: int) -> list[float]:
        if not rows:
            return []
        _, groups = self._rollout([p for p, _ in rows], [a for _, a in rows], 1,
                                  self.cfg.grpo.val_temperature, ("eval", round_idx))
        return [g[0].reward for g in groups]

    def engine_logprobs(self, token_ids: Sequence[int]) -> list[float]:
        return self.engine.prompt_logprobs(token_ids)

    def trainer_logprobs(self, prompt_ids: Sequence[int], response_ids: Sequence[int]) -> list[float]:
        return self.trainer.response_logprobs([Sample(tuple(prompt_ids), tuple(response_ids), 0.0)])[0].tolist()


# A client that dies (killed process, lost node) is restarted by Ray: its constructor runs again with the
# same arguments. Calls in flight fail instead of being retried on the fresh actor (max_task_retries=0):
# the driver then restarts every client and redoes the round from its start (jobs.federation).
@ray.remote(max_restarts=-1, max_task_retries=0)
class ClientActor(ClientCore):
    """Ray actor around ClientCore; adds the collective averaging among client actors."""

    def __init__(self, *args, **kwargs):
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        super().__init__(*args, **kwargs)
        self._group: str | None = None

    def ping(self) -> tuple[int, int]:
        """(client id, process id): a new pid means the actor was restarted."""
        return self.id, os.getpid()

    def init_collective(self, world_size: int, rank: int, backend: str, group_name: str) -> None:
        import ray.util.collective as col

        col.init_collective_group(world_size, rank, backend=backend, group_name=group_name)
        self._group = group_name

    def allreduce_average(self, weight: float, round_idx: int = 0) -> dict:
        """Weighted sum of all clients' adapters via allreduce (weights sum to 1 across clients)."""
        import ray.util.collective as col

        maybe_crash("client", round_idx, 0, "average", self.id)
        flat, spec = self.weighted_adapter(weight)
        col.allreduce(flat, group_name=self._group)
        averaged = unflatten(flat, spec)
        metrics = self.finish_average(averaged)
        metrics["averaged"] = averaged if col.get_rank(self._group) == 0 else None
        return metrics
