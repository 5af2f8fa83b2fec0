"""One typed config for a run: a pydantic schema, loaded from YAML with dotted command-line overrides.

Defaults are the paper's Table 9 (Qwen3-1.7B on MATH): K=8, b=8, LoRA r=32/alpha=64 on all linear
layers, AdamW lr 1e-5 wd 0.01, clip 0.2/0.25, KL coef 1e-4, temperature 0.7, FedIT aggregation.

    cfg = load_config("configs/default.yaml", ["federation.tau=4", "grpo.lr=3e-5"])

Each field carries its type (choices as Literal), its bounds, its description and whether a resumed run
may change it (`resume=True`); a rule between fields is a validator beside them (between sections: on
RunConfig). Building a config checks all of that, wherever it happens (the driver, an actor). What
depends on the machine (the model folder exists, reasoning-gym knows the tasks, wandb is installed)
is checked by `load_config` only, on the driver. Every error is one ConfigError naming the dotted key.
docs/config.md is generated from this schema (`python -m jobs.config_doc`).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from pubswap import methods
from pubswap.data.sources import PATHS_PER_SOURCE, SOURCES
from pubswap.hub import is_hub_id
from pubswap.models import BUILTIN_PREFIX, BUILTINS, is_builtin
from pubswap.run.loggers import LOGGERS


class ConfigError(ValueError):
    """A config key is unknown or its value is invalid; the message names the dotted key."""


# federation.method: the names registered in pubswap/methods/ (a test checks they are the same)
MethodName = Literal[
    "fedavg-grpo",
    "fedprox-grpo",
    "pubswap-balanced",
    "pubswap-random",
    "dsgd-lora",
    "chocosgd-lora",
    "dsgd",
    "chocosgd",
    "seedflood",
    "centralized",
    "centralized-full",
]
CLASSIFICATION_SOURCES = ("sst2", "rte", "boolq")  # rows with label words (pubswap/data/classification.py)
Aggregation = Literal["fedit", "ffa-lora", "flexlora", "fed-dare", "fedsrd", "fedsrd-e", "fedicu"]
SOURCE_REWARDS = {
    "reasoning_gym": "reasoning_gym",
    "math": "math",
    "deepmath": "math",
    "medical": "choice",
    "sst2": "exact",
    "rte": "exact",
    "boolq": "exact",
    "humaneval": "code",
    "mbpp": "code",
    "instruct": "exact",  # free-text references: in-run pass@1 is exact match; the board scores its eight benchmarks
}


def fail(key: str, why: str) -> PydanticCustomError:
    """The error of a rule: `key` is the dotted key it names, whichever model raises it."""
    return PydanticCustomError("config", "{why}", {"key": key, "why": why})


def need(ok: bool, key: str, why: str) -> None:
    if not ok:
        raise fail(key, why)


def _yaml_float(value: Any) -> Any:
    """YAML 1.1 reads `1e-5` (no dot) as a string: a user writing it still means a number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _one_or_more(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _names_to_sources(value: Any) -> Any:
    """A list of names (or one name) is each name from its default source ('')."""
    if isinstance(value, (str, list)):
        return {name: "" for name in _one_or_more(value)}
    return value


Float = Annotated[float, BeforeValidator(_yaml_float)]
Names = Annotated[list[str], BeforeValidator(_one_or_more)]
NamedSources = Annotated[dict[str, str], BeforeValidator(_names_to_sources)]


def setting(default: Any = None, about: str = "", *, resume: bool = False, factory=None, **bounds) -> Any:
    """A field: its default (or factory), what it does, whether a resumed run may change it, its bounds."""
    extra = {"resume": resume}
    if factory is not None:
        return Field(default_factory=factory, description=about, json_schema_extra=extra, **bounds)
    return Field(default, description=about, json_schema_extra=extra, **bounds)


class Section(BaseModel):
    # strict: no silent conversions (true is not 1, 2.5 is not 2); ints are accepted for floats
    model_config = ConfigDict(extra="forbid", strict=True)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


class ModelConfig(Section):
    path: str = setting("", "local folder (or hub id on a cluster with hub access)")
    gguf_file: str | None = setting(None, "file inside `path` when the checkpoint is a GGUF")
    dtype: Literal["float32", "bfloat16", "float16"] = setting("bfloat16", "the base weights in trainer and engine")
    prompt_format: Literal["auto", "chat", "plain", "alpaca"] = setting(
        "auto",
        "chat: the tokenizer's chat template; plain: the one-shot example and the prompt as text (base models"
        " such as OPT have no template); alpaca: the FedSRD reference's Alpaca template (instruction tuning);"
        " auto: chat if the tokenizer has a template, else plain",
    )
    max_prompt_len: int = setting(1024, "tokens, chat template included; longer prompts are dropped, never cut", gt=0)
    max_response_len: int = setting(2048, "tokens generated per response at most", gt=0)


class LoraConfig(Section):
    r: int | list[int] = setting(
        32,
        "one rank for every client, or one per client (FlexLoRA's heterogeneous ranks): the adapters are "
        "then rank max(r) for everyone (engine, trainer, checkpoint), and client i trains and holds only its "
        "first r[i] components (the others stay zero, their gradients are zeroed); scale alpha / max(r)",
    )
    alpha: int = setting(64, "LoRA scale alpha / r", gt=0)
    dropout: Float = setting(0.0, "LoRA dropout while training (log-probs for the ratio and KL use none)", ge=0, lt=1)
    target_modules: Names = setting(
        about="PEFT target_modules: all-linear, or module names such as q_proj",
        factory=lambda: ["all-linear"],
        min_length=1,
    )

    @model_validator(mode="after")
    def _positive_ranks(self) -> LoraConfig:
        ranks = self.r if isinstance(self.r, list) else [self.r]
        need(bool(ranks) and all(r > 0 for r in ranks), "lora.r", f"every rank must be > 0, got {self.r}")
        return self

    @property
    def max_r(self) -> int:
        return max(self.r) if isinstance(self.r, list) else self.r

    def client_rank(self, cid: int) -> int:
        return self.r[cid] if isinstance(self.r, list) else self.r

    def reduced_rank(self, cid: int) -> int | None:
        """Client `cid`'s rank when below the adapters' (it holds only its first components); else None."""
        r = self.client_rank(cid)
        return r if r < self.max_r else None


class GRPOConfig(Section):
    K: int = setting(8, "responses per prompt (group size); a group needs two for an advantage", ge=2)
    b: int = setting(8, "prompts per step", ge=1)
    grad_epochs: int = setting(2, "passes over the step's batch (VERL: ppo_epochs)", ge=1)
    mini_batch_size: int = setting(
        0,
        "prompts per optimizer update (VERL: ppo_mini_batch_size); 0: the whole step's batch (b), so a step "
        "makes grad_epochs x (b / mini_batch_size) AdamW updates",
        ge=0,
    )
    lr: Float = setting(1e-5, "AdamW learning rate", gt=0)
    weight_decay: Float = setting(0.01, "AdamW weight decay", ge=0)
    grad_clip: Float = setting(1.0, "max gradient norm per update", gt=0)
    clip_low: Float = setting(0.2, "PPO ratio clip below 1 - clip_low", gt=0, lt=1)
    clip_high: Float = setting(0.25, "and above 1 + clip_high (clip-higher)", gt=0)
    clip_ratio_c: Float = setting(3.0, "dual-clip bound for negative advantages (VERL's default)", gt=1)
    log_ratio_clamp: Float = setting(20.0, "|log ratio| clamped before exp, for numerical safety", gt=0)
    kl_coef: Float = setting(1e-4, "weight of the k3 KL to the base model (adapter disabled)", ge=0)
    entropy_coef: Float = setting(0.0, "bonus on the policy's token entropy (logged as `entropy` either way)", ge=0)
    tis_cap: Float = setting(
        0.0,
        "truncated importance sampling for swapped-in (off-policy) public responses: per-token weight "
        "min(pi_local / pi_donor, tis_cap) with the donor engine's sampling log-probs; 0 = off (the paper)",
        ge=0,
    )
    adv_eps: Float = setting(1e-6, "added to a group's reward std when normalising advantages", gt=0)
    temperature: Float = setting(0.7, "sampling temperature of training rollouts", gt=0)
    val_temperature: Float = setting(0.7, "sampling temperature of evaluation", ge=0)
    # memory bounds of one step: they change the order of floating-point sums, not the update
    micro_batch_tokens: int = setting(
        16384, "padded tokens per forward pass (VERL: ppo_max_token_len_per_gpu)", resume=True, ge=1
    )
    nograd_micro_batch_tokens: int = setting(
        0,
        "tokens per forward of the no-grad passes (old policy, reference): they keep one layer's "
        "activations, not every layer's; 0: the tokens whose activations fit a training micro-batch's, "
        "1-8 x micro_batch_tokens (pubswap/learner/gpu_budget.py)",
        resume=True,
        ge=0,
    )
    logprob_chunk: int = setting(
        1024, "positions per LM-head chunk: [chunk, vocab] fp32 logits at a time", resume=True, ge=1
    )
    gradient_checkpointing: bool | None = setting(None, "None: on when training on a GPU, off on CPU", resume=True)
    lora_autocast: bool | None = setting(
        None,
        "LoRA's matmuls in the model dtype (bf16/fp16) under torch.autocast, its weights, gradients and AdamW "
        "state kept in fp32 (PEFT otherwise computes them, and keeps their activations, in fp32); None: on for a "
        "bf16/fp16 model on a GPU, off on CPU; never for float32 models or the full-parameter policy",
        resume=True,
    )
    shared_prefix: bool = setting(
        True,
        "GRPO passes compute each group's prompt once, its K responses attending to it (same loss and "
        "gradients; pubswap/learner/shared_prefix.py); models without SDPA attention keep one row per response",
        resume=True,
    )

    @model_validator(mode="after")
    def _mini_batches_divide_the_batch(self) -> GRPOConfig:
        need(
            self.mini_batch_size == 0 or self.b % self.mini_batch_size == 0,
            "grpo.mini_batch_size",
            f"must divide grpo.b ({self.b}), got {self.mini_batch_size}",
        )
        return self


class FederationConfig(Section):
    method: MethodName = setting("pubswap-balanced", "what the clients run (docs/methods.md)")
    num_clients: int = setting(4, "logical clients (resources.num_actors places them on actors)", ge=1)
    rounds: int = setting(10, "communication rounds", resume=True, ge=1)
    tau: int = setting(10, "local steps per round", ge=1)
    swap_period: int = setting(2, "every swap_period-th local step is a public step", ge=1)
    aggregation: Aggregation = setting("fedit", "how the clients' adapters become the next global one")
    aggregation_kwargs: dict[str, float] = setting(
        about="the strategy's own parameters, e.g. {p: 0.9} for fed-dare, {download_p: 0.8} for fedsrd",
        factory=dict,
    )
    weighting: Literal["uniform", "samples"] = setting(
        "uniform", "client weights in the average (samples: by private rows)"
    )
    fedprox_mu: Float = setting(0.01, "fedprox-grpo: weight of the proximal term mu/2 ||w - w_global||^2", ge=0)
    participation: Float = setting(
        1.0, "fraction of clients per round, a seeded subset (rounded, at least 1)", gt=0, le=1
    )
    clients_per_round: int = setting(0, "if > 0, this many clients per round (overrides participation)", ge=0)
    topology: Literal["ring", "meshgrid", "torus", "complete", "edges"] = setting(
        "ring", "decentralized methods' graph: meshgrid is a 2-D grid that does not wrap"
    )
    edges: list[list[int]] = setting(about="topology: edges, as [[0, 1], ...]", factory=list)
    gossip_every: int = setting(1, "decentralized: local steps between two gossip steps", ge=1)
    choco_gamma: Float | None = setting(
        None,
        "CHOCO-SGD's consensus step size; None: choco_fraction (1 with the identity compressor), which shrinks"
        " the consensus distance on ring and meshgrid graphs of 16-128 clients (0.5 diverges with top-k 10%)",
        gt=0,
        le=1,
    )
    choco_compressor: Literal["top-k", "rand-k", "identity"] = setting("top-k", "what CHOCO-SGD sends of a difference")
    choco_fraction: Float = setting(0.1, "the fraction of entries CHOCO's top-k / rand-k compressor sends", gt=0, le=1)
    eval_clients: int = setting(2, "decentralized: also the pass@1 of this many sampled clients' own adapters", ge=0)
    # seedflood's zeroth-order step x <- x - zo_lr * g * z, g the loss difference along z over 2 zo_eps
    # (MeZO's full-parameter OPT values)
    zo_eps: Float = setting(1e-3, "seedflood: the perturbation size", gt=0)
    zo_lr: Float = setting(1e-6, "seedflood: the zeroth-order step size", gt=0)

    @property
    def choco_step(self) -> float:
        """CHOCO's gamma: the configured one, else the compressor's fraction of entries sent (1 for the
        identity, where CHOCO is DSGD). Top-k and rand-k at 10% diverge at 0.5 and at 0.2 (rand-k) and
        shrink at 0.1 on ring-16/128 and meshgrid 4x4/8x16 (tests/test_topology_gossip.py)."""
        if self.choco_gamma is not None:
            return self.choco_gamma
        return 1.0 if self.choco_compressor == "identity" else self.choco_fraction

    @model_validator(mode="after")
    def _rules(self) -> FederationConfig:
        self._check_aggregation_kwargs()
        return self

    def _check_aggregation_kwargs(self) -> None:
        """The strategy validates its own parameters (pubswap/algorithms/aggregation/)."""
        from pubswap.algorithms.aggregation import STRATEGIES, strategy_params

        known = strategy_params(self.aggregation)
        for key in self.aggregation_kwargs:
            need(
                key in known,
                f"federation.aggregation_kwargs.{key}",
                f"not a parameter of {self.aggregation} (it takes {known or 'none'})",
            )
        try:
            STRATEGIES[self.aggregation](**self.aggregation_kwargs)
        except ValueError as e:
            raise fail("federation.aggregation_kwargs", str(e)) from None

    # what the method is, from its module (pubswap/methods/)

    @property
    def family(self) -> methods.Method:
        return methods.method_of(self.method)

    @property
    def decentralized(self) -> bool:
        return self.family.decentralized

    @property
    def full_parameter(self) -> bool:
        return self.family.full_parameter

    @property
    def gossip_rule(self) -> str | None:
        return self.family.gossip_rule

    @property
    def swap_rule(self) -> str | None:
        return self.family.swap_rule

    @property
    def uses_prox(self) -> bool:
        return self.family.uses_prox

    def is_public_step(self, step: int) -> bool:
        return self.family.is_public_step(self, step)

    def clients_in_round(self) -> int:
        if self.clients_per_round > 0:
            return min(self.clients_per_round, self.num_clients)
        return max(1, min(self.num_clients, round(self.participation * self.num_clients)))


def _no_null_settings(value: Any) -> Any:
    """`tasks: {count_bits: }` in YAML: a task with its default settings."""
    if isinstance(value, dict):
        return {k: {} if v is None else v for k, v in value.items()}
    return _one_or_more(value)


class DataConfig(Section):
    source: str = setting("reasoning_gym", f"{' | '.join(SOURCES)} (pubswap/data/sources.py)")
    paths: Names = setting(about="local files/folders (or hub ids); [] = the hub defaults", factory=list)
    client_paths: Names = setting(
        about="one file or folder per client, in data.source's format, read by the actor hosting that client "
        "(the path must exist on its node); the driver never reads them, and data.paths then gives only the "
        "public and test rows. Each client keeps data.per_client rows of its file, seeded. [] = every "
        "client's rows come from data.paths through the driver's Dirichlet split",
        factory=list,
    )
    subsample: int = setting(
        0, "keep this many rows of the source before splitting (DeepMath in the paper: 20000); 0: all", ge=0
    )
    tasks: Annotated[dict[str, dict] | list[str], BeforeValidator(_no_null_settings)] = setting(
        about="reasoning-gym tasks: a list of names (their default settings) or {name: {setting: value}}",
        factory=lambda: ["chain_sum", "basic_arithmetic"],
        min_length=1,
    )
    per_client: int = setting(2500, "private prompts per client", ge=1)
    public_size: int = setting(1250, "the shared public pool (PubSwap's public batches are drawn from it)", ge=0)
    test_size: int = setting(1250, "held-out test prompts for pass@1", ge=1)
    dirichlet_alpha: Float = setting(0.3, "topics per client ~ Dirichlet(alpha): smaller is more heterogeneous", gt=0)
    reward: Literal["auto", "math", "exact", "choice", "reasoning_gym", "code"] = setting(
        "auto",
        "the verifier: auto is the source's own (reasoning_gym: each task's score_answer; math, deepmath: "
        "math-verify; medical: choice; humaneval, mbpp: code, run in pubswap/sandbox.py)",
    )
    reward_mode: Literal["strict", "lenient"] = setting(
        "strict", "strict: only the answer in the asked format (\\boxed{}) counts; lenient"
    )

    @model_validator(mode="after")
    def _rules(self) -> DataConfig:
        need(self.source in SOURCES, "data.source", f"must be one of {SOURCES}, got {self.source!r}")
        takes = PATHS_PER_SOURCE.get(self.source, 0)
        need(
            len(self.paths) in (0, takes),
            "data.paths",
            f"{self.source} takes {takes} path(s) (or none for the hub), got {len(self.paths)}",
        )
        need(
            not self.client_paths or PATHS_PER_SOURCE.get(self.source, 0) == 1,
            "data.client_paths",
            f"needs a source read from one file or folder per client (one of "
            f"{', '.join(s for s, n in PATHS_PER_SOURCE.items() if n == 1)}), got data.source={self.source}",
        )
        need(
            self.reward != "reasoning_gym" or self.source == "reasoning_gym",
            "data.reward",
            f"reasoning_gym scores reasoning-gym rows only (data.source is {self.source!r})",
        )
        return self

    @property
    def verifier(self) -> str:
        """The reward actually used: `reward`, with auto resolved from the source."""
        return SOURCE_REWARDS.get(self.source, "math") if self.reward == "auto" else self.reward


class RolloutConfig(Section):
    backend: Literal["vllm", "hf"] = setting(
        "vllm", "vllm (the real engine) or hf (transformers.generate; toy models, full-parameter methods)"
    )
    kv_cache_gib: Float = setting(1.0, "VLLM_CPU_KVCACHE_SPACE on CPU", resume=True, gt=0)
    gpu_memory_utilization: Float = setting(
        0.5,
        "on GPU: the engine's fraction of its actor's GPU share, the trainer gets the rest; vLLM is handed "
        "this x resources.gpus_per_client, so actors sharing a card split it (pubswap/learner/gpu_budget.py)",
        resume=True,
        gt=0,
        lt=1,
    )
    sleep_mode: bool = setting(
        False, "GPU only: the engine frees its weights and KV cache while the trainer runs", resume=True
    )
    enforce_eager: bool | None = setting(None, "None: CUDA graphs on GPU, eager on CPU", resume=True)
    max_num_seqs: int = setting(0, "0: every sequence of one rollout call at once (clients x b x K)", resume=True, ge=0)
    max_num_batched_tokens: int = setting(
        0, "0: vLLM's default on GPU; max(2048, prompt + response) on CPU", resume=True, ge=0
    )
    lora_mode: Literal["auto", "merged", "lora"] = setting(
        "auto",
        "how the engine serves a client's adapter: merged into the weights (fast on CPU, where vLLM's LoRA "
        "kernels are slow), vLLM's LoRA kernels (fast on GPUs, several adapters per batch), or auto: merged "
        "on CPU, lora on GPU (actors/merged_lora.py)",
    )
    adapter_dir: str = setting(
        "", "node-local folder for the adapters handed to the engine; empty: /dev/shm, else tmp", resume=True
    )

    @model_validator(mode="after")
    def _absolute_adapter_dir(self) -> RolloutConfig:
        need(
            not self.adapter_dir or Path(self.adapter_dir).is_absolute(),
            "rollout.adapter_dir",
            f"must be an absolute node-local path (or empty for /dev/shm), got {self.adapter_dir!r}",
        )
        return self


class ResourcesConfig(Section):
    num_actors: int = setting(
        0, "client actors; 0: one per client (the GPU default). Fewer: clients share actors", resume=True, ge=0
    )
    cpus_per_client: Float = setting(1.0, "per client actor (the name predates multiplexing)", resume=True, gt=0)
    gpus_per_client: Float | None = setting(
        None, "per client actor; None: 1 if the cluster has GPUs, else 0", resume=True, ge=0
    )
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = setting(
        "PACK", "PACK (one node if possible) or SPREAD (across nodes)", resume=True
    )
    placement_timeout_s: Float = setting(
        1800.0, "cold GPU nodes of an autoscaler take minutes to join", resume=True, gt=0
    )
    collective_backend: Literal["gloo", "nccl"] = setting(
        "gloo", "gloo (CPU tensor, any cluster) or nccl (GPU tensor; needs cupy)", resume=True
    )

    @model_validator(mode="after")
    def _nccl_needs_whole_gpus(self) -> ResourcesConfig:
        g = self.gpus_per_client
        if self.collective_backend == "nccl" and g is not None:
            need(
                g > 0,
                "resources.collective_backend",
                "nccl needs GPUs (resources.gpus_per_client > 0); use gloo on CPUs",
            )
            need(
                g >= 1,
                "resources.collective_backend",
                f"nccl cannot place two ranks on one GPU, and gpus_per_client={g:g} shares a card between "
                "client actors; use gloo, or gpus_per_client >= 1",
            )
        return self


class FaultToleranceConfig(Section):
    max_round_retries: int = setting(
        3, "a round whose client or server died is redone at most this often", resume=True, ge=0
    )
    restart_timeout_s: Float = setting(
        900.0, "wait this long for restarted actors (a lost node may need a new one)", resume=True, gt=0
    )
    step_timeout_s: Float = setting(
        1800.0,
        "a client call (a step, the average, an evaluation) that takes longer is a hung client: its actors "
        "are restarted and the round redone, as for a dead one; 0 waits forever",
        resume=True,
        ge=0,
    )
    lease_ttl_s: Float = setting(
        60.0,
        "run_dir's lease (one writer per run): a driver whose heartbeat has not moved this long is dead; "
        "seconds, at least 4 (the heartbeat is every ttl/4)",
        resume=True,
        ge=4,
    )


class CheckpointConfig(Section):
    keep_last: int = setting(
        3,
        "per-round checkpoints kept besides round 0 (the base model) and the best-evaluated round; older ones "
        "are deleted after each commit (locally and in an object-store run_dir). 0 keeps every round",
        resume=True,
        ge=0,
    )
    every_steps: int = setting(
        10,
        "in-round checkpoints of a federated round every this many local steps (each client's adapter and "
        "AdamW state): a preemption loses at most this many steps. 0: per round only. See docs/faults.md",
        resume=True,
        ge=0,
    )


class PrivacyConfig(Section):
    """Client-level differential privacy for the adapter updates (DP-FedAvg; pubswap/privacy.py)."""

    clip_norm: Float = setting(
        0.0,
        "DP-FedAvg: each participant's update (the tensors it sends minus the round's global) is clipped to "
        "this L2 norm on its client; 0: off. Needs a linear aggregation and uniform weighting",
        ge=0,
    )
    noise_multiplier: Float = setting(
        0.0,
        "DP-FedAvg: Gaussian noise of std noise_multiplier * clip_norm is added to the sum of the clipped "
        "updates; epsilon is reported per round (Opacus's RDP accountant). 0: clipping only, no guarantee",
        ge=0,
    )
    delta: Float = setting(1e-5, "the delta at which epsilon is reported", gt=0, lt=1)
    noise: Literal["seeded", "secure"] = setting(
        "seeded",
        "seeded: from (seed, round), reproducible and resumed bitwise, but removable by anyone who knows the "
        "seed (research); secure: from the OS's entropy, drawn by the allreduce's rank 0 (a redone round "
        "draws new noise)",
    )

    secure_aggregation: bool = setting(
        False,
        "pairwise-masked allreduce (Bonawitz et al. 2017; pubswap/secagg.py): each actor's upload looks "
        "uniformly random to the others, only the sum is learned. Needs a linear aggregation",
    )

    @property
    def on(self) -> bool:
        return self.clip_norm > 0


class RunConfig(Section):
    seed: int = setting(0, "every random choice derives from (seed, purpose, round, step, client)")
    run_dir: str = setting(
        "runs/default",
        "local folder, or s3:// / gs:// URI (a node-local mirror is kept; docs/cluster.md)",
        resume=True,
    )
    model: ModelConfig = Field(default_factory=ModelConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    federation: FederationConfig = Field(default_factory=FederationConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    fault_tolerance: FaultToleranceConfig = Field(default_factory=FaultToleranceConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    objective: Literal["grpo", "label-words", "sft"] = setting(
        "grpo",
        "what a local step minimises: grpo (rewarded rollouts, pass@1) | label-words (cross-entropy of the "
        "label word after the prompt, accuracy by the label words' likelihood; sst2, rte, boolq; "
        "pubswap/algorithms/label_words.py) | sft (cross-entropy of the row's reference answer after the "
        "prompt; evaluated by sampling, as grpo)",
    )
    eval_every: int = setting(
        1, "evaluate the global adapter every this many rounds (and before round 1)", resume=True, ge=1
    )
    eval_n: int = setting(1, "responses per test prompt: pass@1 is their mean (mean@n), with its standard error", ge=1)
    eval_suite: NamedSources = setting(
        about="benchmarks scored after the last round besides the test set, {name: local file or folder, or '' "
        "for the hub} or a list of names (each from the hub): the FedSRD board's humaneval, mbpp, medqa, "
        "medmcqa, fineval, financeiq, gsm8k, math with its shot counts; their plain mean is the board's "
        "average (pubswap/data/board_evals.py)",
        resume=True,
        factory=dict,
    )
    eval_suite_limit: int = setting(
        0, "score the first this many rows of each eval_suite benchmark (0: all)", resume=True, ge=0
    )
    eval_suite_max_prompt_len: int = setting(
        0,
        "the eval_suite prompts' token budget, shots included (longer ones are dropped and counted); the "
        "engines are sized for it; 0: model.max_prompt_len",
        ge=0,
    )
    deterministic: bool = setting(
        False,
        "GPU: deterministic CUDA kernels in the trainer and vLLM's batch-invariant mode (slower; see docs/gpu.md)",
        resume=True,
    )
    logger: Names = setting(
        about="where metrics go besides metrics.jsonl: console, tensorboard (run_dir/tensorboard), wandb "
        "(optional, needs `pip install wandb`); pubswap/run/loggers.py",
        resume=True,
        factory=lambda: ["console", "tensorboard"],
    )

    @property
    def suite_prompt_len(self) -> int:
        """The eval_suite prompts' token budget."""
        return self.eval_suite_max_prompt_len or self.model.max_prompt_len

    @property
    def max_model_len(self) -> int:
        """The longest sequence an engine serves: the longest prompt budget and a response."""
        prompts = max(self.model.max_prompt_len, self.suite_prompt_len if self.eval_suite else 0)
        return prompts + self.model.max_response_len

    def evaluation_due(self, r: int) -> bool:
        """Round r is evaluated: every eval_every rounds, and always the last one."""
        return r % self.eval_every == 0 or r == self.federation.rounds

    def _check_privacy(self) -> None:
        p, f = self.privacy, self.federation
        need(
            p.on or p.noise_multiplier == 0,
            "privacy.noise_multiplier",
            "needs privacy.clip_norm > 0 (the noise is scaled to it)",
        )
        from pubswap.algorithms.aggregation import STRATEGIES

        for key, what, used in (
            ("privacy.clip_norm", "DP-FedAvg", p.on),
            ("privacy.secure_aggregation", "secure aggregation", p.secure_aggregation),
        ):
            if not used:
                continue
            need(not f.decentralized, key, f"{what} needs a server-coordinated method, got {f.method}")
            need(
                STRATEGIES[f.aggregation].linear,
                key,
                f"{what} needs a linear aggregation (fedit, fedprox, ffa-lora), "
                f"got federation.aggregation={f.aggregation}",
            )
        if not p.on:
            return
        need(
            f.weighting == "uniform",
            "privacy.clip_norm",
            "DP-FedAvg needs federation.weighting=uniform (weights by data size would leak it and break the bound)",
        )

    @model_validator(mode="after")
    def _rules_across_sections(self) -> RunConfig:
        lo, f = self.lora, self.federation
        if isinstance(lo.r, list):
            need(
                len(lo.r) == f.num_clients,
                "lora.r",
                f"a list of per-client ranks needs one per client (federation.num_clients={f.num_clients}), "
                f"got {len(lo.r)}",
            )
            need(
                f.aggregation == "flexlora" or len(set(lo.r)) == 1,
                "lora.r",
                "per-client ranks need federation.aggregation=flexlora (its SVD orders the components, so a "
                f"client's first r[i] are its best rank-r[i] part), got {f.aggregation}",
            )
        if self.objective == "label-words":
            need(
                self.data.source in CLASSIFICATION_SOURCES,
                "objective",
                f"label-words needs a classification source with label words ({', '.join(CLASSIFICATION_SOURCES)}), "
                f"got data.source={self.data.source}",
            )
        need(
            self.data.source != "instruct" or self.objective == "sft",
            "objective",
            f"data.source instruct has free-text reference responses and no verifier to reward: use sft, "
            f"got {self.objective}",
        )
        if self.objective != "grpo":
            need(
                f.family.swap_rule is None,
                "objective",
                f"{self.objective} has no responses to swap: federation.method {f.method} has public steps "
                "(use fedavg-grpo, fedprox-grpo or a decentralized method)",
            )
        self._check_privacy()
        if self.eval_suite:
            from pubswap.data.board_evals import BENCHMARKS

            unknown = sorted(set(self.eval_suite) - set(BENCHMARKS))
            need(not unknown, "eval_suite", f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}")
            need(
                not f.decentralized,
                "eval_suite",
                f"scores the server's global adapter: needs a server-coordinated method, got {f.method}",
            )
        if self.data.client_paths:
            need(
                len(self.data.client_paths) == f.num_clients,
                "data.client_paths",
                f"needs one path per client (federation.num_clients={f.num_clients}), "
                f"got {len(self.data.client_paths)}",
            )
            need(
                not f.method.startswith("centralized"),
                "data.client_paths",
                f"{f.method} pools every client's rows on the driver; client files are for federated methods",
            )
        problem = f.family.problem(self)  # the method's own rules (pubswap/methods/)
        if problem is not None:
            raise fail(*problem)
        need(
            self.resources.num_actors <= f.num_clients,
            "resources.num_actors",
            f"must be in [0, federation.num_clients={f.num_clients}] (0: one actor per client), "
            f"got {self.resources.num_actors}",
        )
        unknown = [x for x in self.logger if x not in LOGGERS]
        need(not unknown, "logger", f"unknown logger(s) {unknown}; known: {list(LOGGERS)}")
        return self


# ---------------------------------------------------------------------------------------------
# Loading


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read YAML (optional), apply `a.b=value` overrides, validate the schema and this machine's side."""
    raw = read_yaml(Path(path)) if path is not None else {}
    for item in overrides or []:
        _apply_override(raw, item)
    cfg = from_dict(raw)
    check_environment(cfg)
    return cfg


EXTENDS = "extends"


def read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file as a mapping. `extends: [a.yaml, ...]` (paths relative to the file) names files it
    builds on: each is read the same way and merged in order, section by section, then the file's own
    keys on top (configs/paper/: a cell is a few lines over its model's and dataset's files)."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}" + (f" (extended by {seen[-1]})" if seen else ""))
    if path.resolve() in seen:
        raise ConfigError(f"{path}: extends itself through {' -> '.join(str(s) for s in seen)}")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(raw).__name__}")
    bases = raw.pop(EXTENDS, None) or []
    if not isinstance(bases, list | str):
        raise ConfigError(f"{path}: {EXTENDS} must be a file name or a list of them, got {bases!r}")
    merged: dict[str, Any] = {}
    for base in [bases] if isinstance(bases, str) else bases:
        _merge(merged, read_yaml(path.parent / str(base), (*seen, path.resolve())))
    return _merge(merged, raw)


def _merge(into: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `into`: a section (model:, grpo:, ...) key by key, any other setting whole."""
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            into[key] = {**into[key], **value}
        else:
            into[key] = value
    return into


def from_dict(raw: dict[str, Any]) -> RunConfig:
    """The config of a dict (YAML, config.json, what an actor is handed); ConfigError names the key."""
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_one_line(e.errors()[0])) from None


def _apply_override(raw: dict[str, Any], item: str) -> None:
    """Set one `dotted.key=value` override (the value parsed as YAML) in the raw mapping."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {item!r} is not of the form key=value")
    *parents, leaf = key.split(".")
    node = raw
    for name in parents:
        if node.get(name) is None:
            node[name] = {}
        if not isinstance(node[name], dict):  # `seed.x=1`: seed is a setting, not a section
            raise ConfigError(f"unknown config key: {key}")
        node = node[name]
    node[leaf] = yaml.safe_load(text) if text.strip() else None


# what pydantic puts in an error's location besides keys and list indices: the member of a union it tried
_TYPE_TAG = re.compile(r"^(int|float|str|bool|none|(list|dict|set|tuple|literal|nullable|function-\w+)\[.*\])$")


def _one_line(err: dict) -> str:
    if err["type"] == "config":  # a rule: it names its own key
        return f"{err['ctx']['key']}: {err['ctx']['why']}"
    loc = [str(x) for x in err["loc"] if not (isinstance(x, str) and _TYPE_TAG.match(x))]
    key = ".".join(loc) or "config"
    if err["type"] == "extra_forbidden":
        return f"unknown config key: {key}"
    return f"{key}: {err['msg'].lower()}, got {err['input']!r}"


def check_environment(cfg: RunConfig) -> None:
    """What the schema cannot know: the model on this machine or the hub, the task names of reasoning-gym,
    an optional logger's package."""
    m, d = cfg.model, cfg.data
    try:
        need(bool(m.path), "model.path", "is required (a local model folder or a hub id)")
        if is_builtin(m.path):
            name = m.path[len(BUILTIN_PREFIX) :]
            need(name in BUILTINS, "model.path", f"unknown builtin model {name!r}; known: {sorted(BUILTINS)}")
        else:
            need(Path(m.path).exists() or is_hub_id(m.path), "model.path", f"{m.path!r} does not exist")
        if m.gguf_file is not None and Path(m.path).is_dir():
            need((Path(m.path) / m.gguf_file).is_file(), "model.gguf_file", f"{m.gguf_file!r} not found in {m.path}")
        if d.source == "reasoning_gym":
            from pubswap.data.reasoning_gym_tasks import check_tasks

            problem = check_tasks(d.tasks)
            need(problem is None, "data.tasks", problem or "")
        if "wandb" in cfg.logger:
            need(
                importlib.util.find_spec("wandb") is not None,
                "logger",
                "wandb is listed but not installed (`pip install wandb`, or drop it from logger)",
            )
    except PydanticCustomError as e:
        raise ConfigError(_one_line({"type": "config", "ctx": e.context})) from None


# ---------------------------------------------------------------------------------------------
# Resuming


def _resumable_keys(model: type[BaseModel] = RunConfig, prefix: str = "") -> dict[str, bool]:
    out = {}
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            out |= _resumable_keys(kind, f"{prefix}{name}.")
        else:
            out[prefix + name] = bool((info.json_schema_extra or {}).get("resume"))
    return out


# What a resumed run may change: where and how it runs, how far, how often it evaluates. Everything
# else (model, data, method, clients, seeds, hyperparameters, rollout backend) would change the result.
RESUMABLE = _resumable_keys()


def may_change_on_resume(key: str) -> bool:
    """Whether a resumed run may change the dotted `key` (its field's `resume`)."""
    return RESUMABLE.get(key, False)


def _dotted(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and prefix + k not in RESUMABLE:  # a section, not a dict-valued setting
            out.update(_dotted(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def resume_conflicts(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """'key: saved -> current' for every setting that differs and may not change on resume. A setting
    the saved run does not have (added to the schema since) counts as its default there."""
    try:
        saved = from_dict(saved).to_dict()
    except ConfigError:  # a config this version no longer reads: compare what it holds
        pass
    a, b = _dotted(saved), _dotted(current)
    out = []
    for key in sorted(set(a) | set(b)):
        if may_change_on_resume(key):
            continue
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            out.append(f"{key}: {a.get(key, '<unset>')!r} -> {b.get(key, '<unset>')!r}")
    return out
