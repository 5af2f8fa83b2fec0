"""One typed config for a run, loaded from YAML with dotted command-line overrides.

Defaults are the paper's Table 9 (Qwen3-1.7B on MATH): K=8, b=8, LoRA r=32/alpha=64 on all linear
layers, AdamW lr 1e-5 wd 0.01, clip 0.2/0.25, KL coef 1e-4, temperature 0.7, FedIT aggregation.

    cfg = load_config("configs/default.yaml", ["federation.tau=4", "grpo.lr=3e-5"])

Unknown keys and invalid values raise ConfigError naming the dotted key.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pubswap.data.sources import PATHS_PER_SOURCE, SOURCES
from pubswap.hub import is_hub_id
from pubswap.models import BUILTIN_PREFIX, BUILTINS, is_builtin
from pubswap.run.loggers import LOGGERS


class ConfigError(ValueError):
    """A config key is unknown or its value is invalid; the message names the dotted key."""


def _check_aggregation_kwargs(f) -> None:
    from pubswap.algorithms.aggregation import STRATEGIES, strategy_params

    known = strategy_params(f.aggregation)
    for key, value in f.aggregation_kwargs.items():
        if key not in known:
            raise ConfigError(
                f"federation.aggregation_kwargs.{key}: not a parameter of {f.aggregation} (it takes {known or 'none'})"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"federation.aggregation_kwargs.{key}: must be a number, got {value!r}")
    try:
        STRATEGIES[f.aggregation](**f.aggregation_kwargs)
    except ValueError as e:
        raise ConfigError(f"federation.aggregation_kwargs: {e}") from None


# serverless methods: each client exchanges with its graph neighbours only (pubswap/algorithms/gossip.py). The -lora
# forms gossip the LoRA tensors; dsgd, chocosgd and seedflood train and exchange every weight of the model
FULL_PARAMETER = ("dsgd", "chocosgd", "seedflood")
DECENTRALIZED = ("dsgd-lora", "chocosgd-lora", *FULL_PARAMETER)
GOSSIP_RULES = {
    "dsgd": "dsgd",
    "dsgd-lora": "dsgd",
    "chocosgd": "choco",
    "chocosgd-lora": "choco",
    "seedflood": "seedflood",
}
# centralized: the reference of normalized performance, one learner on every client's data (jobs/centralized.py);
# centralized-full trains every weight, the reference of the full-parameter methods
CENTRALIZED = ("centralized", "centralized-full")
METHODS = ("fedavg-grpo", "fedprox-grpo", "pubswap-balanced", "pubswap-random", *DECENTRALIZED, *CENTRALIZED)
TOPOLOGIES = ("ring", "meshgrid", "torus", "complete", "edges")
COMPRESSORS = ("top-k", "rand-k", "identity")
AGGREGATIONS = (
    "fedit",
    "ffa-lora",
    "flexlora",
    "fed-dare",
    "fedsrd",
    "fedsrd-e",
    "fedicu",
)  # pubswap/algorithms/aggregation/
WEIGHTINGS = ("uniform", "samples")
REWARDS = ("auto", "math", "exact", "choice", "reasoning_gym")
SOURCE_REWARDS = {
    "reasoning_gym": "reasoning_gym",
    "math": "math",
    "deepmath": "math",
    "medical": "choice",
    "sst2": "exact",
    "rte": "exact",
    "boolq": "exact",
}
REWARD_MODES = ("strict", "lenient")
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class ModelConfig:
    path: str = ""  # local folder (or hub id on a cluster with hub access)
    gguf_file: str | None = None  # file inside `path` when the checkpoint is a GGUF
    dtype: str = "bfloat16"  # float32 | bfloat16 | float16: the base weights in trainer and engine
    max_prompt_len: int = 1024  # tokens, chat template included; longer prompts are dropped, never cut
    max_response_len: int = 2048  # tokens generated per response at most


@dataclass
class LoraConfig:
    # one rank for every client, or one per client (FlexLoRA's heterogeneous ranks): the adapters are
    # then rank max(r) for everyone (engine, trainer, checkpoint), and client i trains and holds only
    # its first r[i] components (the others stay zero, their gradients are zeroed); scale alpha / max(r)
    r: int | list[int] = 32
    alpha: int = 64  # LoRA scale alpha / r
    dropout: float = 0.0  # LoRA dropout while training (log-probs for the ratio and KL use none)
    # PEFT target_modules: all-linear, or module names such as q_proj
    target_modules: list[str] = field(default_factory=lambda: ["all-linear"])

    @property
    def max_r(self) -> int:
        return max(self.r) if isinstance(self.r, list) else self.r

    def client_rank(self, cid: int) -> int:
        return self.r[cid] if isinstance(self.r, list) else self.r

    def reduced_rank(self, cid: int) -> int | None:
        """Client `cid`'s rank when below the adapters' (it holds only its first components); else None."""
        r = self.client_rank(cid)
        return r if r < self.max_r else None


@dataclass
class GRPOConfig:
    K: int = 8  # responses per prompt (group size)
    b: int = 8  # prompts per step
    grad_epochs: int = 2  # passes over the step's batch (VERL: ppo_epochs)
    # prompts per optimizer update (VERL: ppo_mini_batch_size); 0: the whole step's batch (b), so a step
    # makes grad_epochs x (b / mini_batch_size) AdamW updates
    mini_batch_size: int = 0
    lr: float = 1e-5  # AdamW learning rate
    weight_decay: float = 0.01  # AdamW weight decay
    grad_clip: float = 1.0  # max gradient norm per update
    clip_low: float = 0.2  # PPO ratio clip below 1 - clip_low
    clip_high: float = 0.25  # and above 1 + clip_high (clip-higher)
    clip_ratio_c: float = 3.0  # dual-clip bound for negative advantages (VERL's default)
    log_ratio_clamp: float = 20.0  # |log ratio| clamped before exp, for numerical safety
    kl_coef: float = 1e-4  # weight of the k3 KL to the base model (adapter disabled)
    entropy_coef: float = 0.0  # bonus on the policy's token entropy (logged as `entropy` either way)
    # truncated importance sampling for swapped-in (off-policy) public responses: per-token weight
    # min(pi_local / pi_donor, tis_cap) with the donor engine's sampling log-probs; 0 = off (the paper)
    tis_cap: float = 0.0
    adv_eps: float = 1e-6  # added to a group's reward std when normalising advantages
    temperature: float = 0.7  # sampling temperature of training rollouts
    val_temperature: float = 0.7  # sampling temperature of evaluation
    # memory bounds of one step (they change the order of floating-point sums, not the update)
    micro_batch_tokens: int = 16384  # padded tokens per forward pass (VERL: ppo_max_token_len_per_gpu)
    logprob_chunk: int = 1024  # positions per LM-head chunk: [chunk, vocab] fp32 logits at a time
    gradient_checkpointing: bool | None = None  # None: on when training on a GPU, off on CPU


@dataclass
class FederationConfig:
    # fedavg-grpo | fedprox-grpo | pubswap-balanced | pubswap-random | dsgd-lora | chocosgd-lora | dsgd |
    # chocosgd | seedflood | centralized | centralized-full (docs/methods.md)
    method: str = "pubswap-balanced"
    num_clients: int = 4  # logical clients (resources.num_actors places them on actors)
    rounds: int = 10  # communication rounds
    tau: int = 10  # local steps per round
    swap_period: int = 2  # every swap_period-th local step is a public step
    aggregation: str = "fedit"  # fedit | ffa-lora | flexlora | fed-dare | fedsrd | fedsrd-e | fedicu
    # the strategy's own parameters, e.g. {p: 0.9} for fed-dare, {download_p: 0.8} for fedsrd
    aggregation_kwargs: dict[str, float] = field(default_factory=dict)
    weighting: str = "uniform"  # uniform | samples: client weights in the average (samples: by private rows)
    fedprox_mu: float = 0.01  # fedprox-grpo: weight of the proximal term mu/2 ||w - w_global||^2
    # partial participation: each round a seeded subset of clients trains and is averaged
    participation: float = 1.0  # fraction of clients per round (rounded, at least 1)
    clients_per_round: int = 0  # if > 0, this many clients per round (overrides participation)
    # decentralized methods (dsgd[-lora], chocosgd[-lora], seedflood): the graph, and a gossip step after every
    # gossip_every local steps; CHOCO-SGD's consensus step size and compressor (a fraction of entries)
    topology: str = "ring"  # ring | meshgrid (2-D grid, no wrap) | torus | complete | edges
    edges: list[list[int]] = field(default_factory=list)  # topology: edges
    gossip_every: int = 1  # decentralized: local steps between two gossip steps
    choco_gamma: float = 0.5  # CHOCO-SGD's consensus step size
    choco_compressor: str = "top-k"  # top-k | rand-k | identity
    choco_fraction: float = 0.1  # the fraction of entries CHOCO's top-k / rand-k compressor sends
    eval_clients: int = 2  # decentralized: also the pass@1 of this many sampled clients' own adapters
    # seedflood: the zeroth-order step x <- x - zo_lr * g * z, g the loss difference along z over 2 zo_eps
    # (MeZO's full-parameter OPT values)
    zo_eps: float = 1e-3
    zo_lr: float = 1e-6  # seedflood: the zeroth-order step size

    @property
    def decentralized(self) -> bool:
        return self.method in DECENTRALIZED

    @property
    def full_parameter(self) -> bool:
        """Every weight of the model is trained (no LoRA): dsgd, chocosgd, seedflood, centralized-full."""
        return self.method in FULL_PARAMETER or self.method == "centralized-full"

    @property
    def gossip_rule(self) -> str | None:
        """dsgd | choco | seedflood for the decentralized methods, else None."""
        return GOSSIP_RULES.get(self.method)

    def clients_in_round(self) -> int:
        if self.clients_per_round > 0:
            return min(self.clients_per_round, self.num_clients)
        return max(1, min(self.num_clients, round(self.participation * self.num_clients)))

    @property
    def swap_rule(self) -> str | None:
        """'balanced', 'random' or None (no public steps)."""
        return self.method.removeprefix("pubswap-") if self.method.startswith("pubswap-") else None

    @property
    def uses_prox(self) -> bool:
        return self.method == "fedprox-grpo"

    def is_public_step(self, step: int) -> bool:
        """Steps are numbered 1..tau; step s is public iff the method swaps and s % swap_period == 0."""
        return self.swap_rule is not None and step % self.swap_period == 0


@dataclass
class DataConfig:
    source: str = "reasoning_gym"  # reasoning_gym | math | deepmath | medical | sst2 | rte | boolq (data/sources.py)
    paths: list[str] = field(default_factory=list)  # local files/folders (or hub ids); [] = the hub defaults
    subsample: int = 0  # keep this many rows of the source before splitting (DeepMath in the paper: 20000)
    # reasoning-gym tasks: a list of names (their default settings) or {name: {setting: value}}
    tasks: dict[str, dict] | list[str] = field(default_factory=lambda: ["chain_sum", "basic_arithmetic"])
    per_client: int = 2500  # private prompts per client
    public_size: int = 1250  # the shared public pool (PubSwap's public batches are drawn from it)
    test_size: int = 1250  # held-out test prompts for pass@1
    dirichlet_alpha: float = 0.3  # topics per client ~ Dirichlet(alpha): smaller is more heterogeneous
    # the verifier: auto is the source's own (reasoning_gym: each task's score_answer; math, deepmath:
    # math-verify; medical: choice); math | exact | choice | reasoning_gym
    reward: str = "auto"
    reward_mode: str = "strict"  # strict: only the answer in the asked format (\boxed{}) counts; lenient

    @property
    def verifier(self) -> str:
        """The reward actually used: `reward`, with auto resolved from the source."""
        return SOURCE_REWARDS.get(self.source, "math") if self.reward == "auto" else self.reward


@dataclass
class RolloutConfig:
    backend: str = "vllm"  # "vllm" (real engine) or "hf" (transformers.generate; for toy models / no vLLM)
    kv_cache_gib: float = 1.0  # VLLM_CPU_KVCACHE_SPACE on CPU
    # on GPU: the engine's fraction of its actor's GPU share (the trainer gets the rest); vLLM is handed
    # this x resources.gpus_per_client, so actors sharing a card split it (pubswap/learner/gpu_budget.py)
    gpu_memory_utilization: float = 0.5
    sleep_mode: bool = False  # GPU only: the engine frees its weights and KV cache while the trainer runs
    enforce_eager: bool | None = None  # None: CUDA graphs on GPU, eager on CPU
    max_num_seqs: int = 0  # 0: every sequence of one rollout call at once (clients x b x K)
    max_num_batched_tokens: int = 0  # 0: vLLM's default on GPU; max(2048, prompt + response) on CPU
    # how the engine serves a client's adapter: merged into the weights (fast on CPU, where vLLM's LoRA
    # kernels are slow), vLLM's LoRA kernels (fast on GPUs, several adapters per batch), or auto:
    # merged on CPU, lora on GPU (actors/merged_lora.py)
    lora_mode: str = "auto"
    adapter_dir: str = ""  # node-local folder for the adapters handed to the engine; "": /dev/shm, else tmp


@dataclass
class ResourcesConfig:
    num_actors: int = 0  # client actors; 0: one per client (the GPU default). Fewer: clients share actors
    cpus_per_client: float = 1.0  # per client actor (the name predates multiplexing)
    gpus_per_client: float | None = None  # per client actor; None: 1 if the cluster has GPUs, else 0
    placement_strategy: str = "PACK"  # PACK (one node) or SPREAD (across nodes)
    placement_timeout_s: float = 1800.0  # cold GPU nodes of an autoscaler take minutes to join
    collective_backend: str = "gloo"  # gloo (CPU tensor, any cluster) or nccl (GPU tensor; needs cupy)


@dataclass
class FaultToleranceConfig:
    max_round_retries: int = 3  # a round whose client or server died is redone at most this often
    restart_timeout_s: float = 900.0  # wait this long for restarted actors (a lost node may need a new one)
    # a client call (a step, the average, an evaluation) that takes longer is a hung client: its actors are
    # restarted and the round redone, as for a dead one; 0 waits forever
    step_timeout_s: float = 1800.0
    # run_dir's lease (one writer per run): a driver whose heartbeat has not moved this long is dead
    lease_ttl_s: float = 60.0


@dataclass
class CheckpointConfig:
    # per-round checkpoints kept besides round 0 (the base model) and the best-evaluated round; older ones
    # are deleted after each commit (locally and in an object-store run_dir). 0 keeps every round.
    keep_last: int = 3
    # in-round checkpoints of a federated round every this many local steps (each client's adapter and
    # AdamW state): a preemption loses at most this many steps. 0: per round only. See docs/faults.md.
    every_steps: int = 10


@dataclass
class RunConfig:
    seed: int = 0  # every random choice derives from (seed, purpose, round, step, client)
    run_dir: str = "runs/default"  # local folder, or s3:// / gs:// URI (a node-local mirror is kept; docs/cluster.md)
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    federation: FederationConfig = field(default_factory=FederationConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    fault_tolerance: FaultToleranceConfig = field(default_factory=FaultToleranceConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval_every: int = 1  # evaluate the global adapter every this many rounds (and before round 1)
    eval_n: int = 1  # responses per test prompt: pass@1 is their mean (mean@n), with its standard error
    # GPU: deterministic CUDA kernels in the trainer and vLLM's batch-invariant mode (slower; see docs/gpu.md)
    deterministic: bool = False
    # where metrics go besides metrics.jsonl: console, tensorboard (run_dir/tensorboard), wandb (optional,
    # needs `pip install wandb`); pubswap/run/loggers.py
    logger: list[str] = field(default_factory=lambda: ["console", "tensorboard"])

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------
# Loading


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read YAML (optional), apply `a.b=value` overrides, validate."""
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        raw = yaml.safe_load(p.read_text()) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: top level must be a mapping, got {type(raw).__name__}")
    cfg = from_dict(raw)
    for item in overrides or []:
        apply_override(cfg, item)
    validate(cfg)
    return cfg


def from_dict(raw: dict[str, Any]) -> RunConfig:
    return _build(RunConfig, raw, prefix="")


def apply_override(cfg: RunConfig, item: str) -> None:
    """Apply one `dotted.key=value` override in place; the value is parsed as YAML."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {item!r} is not of the form key=value")
    *parents, leaf = key.split(".")
    node: Any = cfg
    for i, name in enumerate(parents):
        if not dataclasses.is_dataclass(node) or name not in _field_types(type(node)):
            raise ConfigError(f"unknown config key: {'.'.join(parents[: i + 1])}")
        node = getattr(node, name)
    types_ = _field_types(type(node)) if dataclasses.is_dataclass(node) else {}
    if leaf not in types_:
        raise ConfigError(f"unknown config key: {key}")
    value = yaml.safe_load(text) if text.strip() else None
    if dataclasses.is_dataclass(getattr(node, leaf)):
        setattr(node, leaf, _build(types_[leaf], value or {}, prefix=key + "."))
    else:
        setattr(node, leaf, _coerce(types_[leaf], value, key))


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _build(cls: type, raw: Any, prefix: str):
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {type(raw).__name__}")
    types_ = _field_types(cls)
    unknown = sorted(set(raw) - set(types_))
    if unknown:
        raise ConfigError(f"unknown config key: {prefix}{unknown[0]}")
    kwargs = {}
    for name, value in raw.items():
        tp = types_[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = _build(tp, value or {}, prefix=f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(tp, value, prefix + name)
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, key: str) -> Any:
    """Check `value` against annotation `tp`; ints are accepted for floats, nothing else is converted."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, key)
            except ConfigError:
                pass
        raise ConfigError(f"{key}: {value!r} is not a valid {tp}")
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        key_tp, value_tp = typing.get_args(tp)
        return {
            _coerce(key_tp, k, key): ({} if v is None and value_tp is dict else _coerce(value_tp, v, f"{key}.{k}"))
            for k, v in value.items()
        }
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):
        try:  # YAML 1.1 reads "1e-5" as a string
            return float(value)
        except ValueError:
            pass
    if isinstance(value, tp) and not (tp is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{key}: expected {tp.__name__}, got {value!r}")


# ---------------------------------------------------------------------------------------------
# Validation


def validate(cfg: RunConfig) -> None:
    def need(ok: bool, key: str, why: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {why}")

    m, g, f, d, lo = cfg.model, cfg.grpo, cfg.federation, cfg.data, cfg.lora
    need(bool(m.path), "model.path", "is required (a local model folder or a hub id)")
    if is_builtin(m.path):
        name = m.path[len(BUILTIN_PREFIX) :]
        need(name in BUILTINS, "model.path", f"unknown builtin model {name!r}; known: {sorted(BUILTINS)}")
    else:
        need(Path(m.path).exists() or is_hub_id(m.path), "model.path", f"{m.path!r} does not exist")
    if m.gguf_file is not None and Path(m.path).is_dir():
        need((Path(m.path) / m.gguf_file).is_file(), "model.gguf_file", f"{m.gguf_file!r} not found in {m.path}")
    need(m.dtype in DTYPES, "model.dtype", f"must be one of {DTYPES}")
    need(m.max_prompt_len > 0, "model.max_prompt_len", "must be > 0")
    need(m.max_response_len > 0, "model.max_response_len", "must be > 0")

    if isinstance(lo.r, list):
        need(
            len(lo.r) == f.num_clients,
            "lora.r",
            f"a list of per-client ranks needs one per client (federation.num_clients={f.num_clients}), "
            f"got {len(lo.r)}",
        )
        need(all(r > 0 for r in lo.r), "lora.r", f"every rank must be > 0, got {lo.r}")
        need(
            f.aggregation == "flexlora" or len(set(lo.r)) == 1,
            "lora.r",
            "per-client ranks need federation.aggregation=flexlora (its SVD orders the components, so a "
            f"client's first r[i] are its best rank-r[i] part), got {f.aggregation}",
        )
    else:
        need(lo.r > 0, "lora.r", "must be > 0")
    need(lo.alpha > 0, "lora.alpha", "must be > 0")
    need(0.0 <= lo.dropout < 1.0, "lora.dropout", "must be in [0, 1)")
    need(len(lo.target_modules) > 0, "lora.target_modules", "must name at least one module")

    need(g.K >= 2, "grpo.K", "must be >= 2 (a group needs two responses for an advantage)")
    need(g.b >= 1, "grpo.b", "must be >= 1")
    need(g.grad_epochs >= 1, "grpo.grad_epochs", "must be >= 1")
    need(g.mini_batch_size >= 0, "grpo.mini_batch_size", "must be >= 0 (0: the whole step's batch)")
    need(
        g.mini_batch_size == 0 or g.b % g.mini_batch_size == 0,
        "grpo.mini_batch_size",
        f"must divide grpo.b ({g.b}), got {g.mini_batch_size}",
    )
    need(g.lr > 0, "grpo.lr", "must be > 0")
    need(g.weight_decay >= 0, "grpo.weight_decay", "must be >= 0")
    need(g.grad_clip > 0, "grpo.grad_clip", "must be > 0")
    need(0 < g.clip_low < 1, "grpo.clip_low", "must be in (0, 1)")
    need(g.clip_high > 0, "grpo.clip_high", "must be > 0")
    need(g.clip_ratio_c > 1, "grpo.clip_ratio_c", f"must be > 1 (VERL: 3.0), got {g.clip_ratio_c}")
    need(g.tis_cap >= 0, "grpo.tis_cap", "must be >= 0 (0: off)")
    need(g.log_ratio_clamp > 0, "grpo.log_ratio_clamp", "must be > 0")
    need(g.kl_coef >= 0, "grpo.kl_coef", "must be >= 0")
    need(g.entropy_coef >= 0, "grpo.entropy_coef", "must be >= 0")
    need(g.adv_eps > 0, "grpo.adv_eps", "must be > 0")
    need(g.temperature > 0, "grpo.temperature", "must be > 0")
    need(g.val_temperature >= 0, "grpo.val_temperature", "must be >= 0")
    need(g.micro_batch_tokens >= 1, "grpo.micro_batch_tokens", "must be >= 1")
    need(g.logprob_chunk >= 1, "grpo.logprob_chunk", "must be >= 1")

    need(f.method in METHODS, "federation.method", f"must be one of {METHODS}, got {f.method!r}")
    need(f.num_clients >= 1, "federation.num_clients", "must be >= 1")
    need(f.rounds >= 1, "federation.rounds", "must be >= 1")
    need(f.tau >= 1, "federation.tau", f"must be >= 1, got {f.tau}")
    need(f.swap_period >= 1, "federation.swap_period", "must be >= 1")
    if f.swap_rule is not None:
        need(
            f.swap_period < f.tau,
            "federation.swap_period",
            f"must be < federation.tau (paper: tau_swap < tau), got {f.swap_period} >= {f.tau}",
        )
    need(f.topology in TOPOLOGIES, "federation.topology", f"must be one of {TOPOLOGIES}, got {f.topology!r}")
    need(f.gossip_every >= 1, "federation.gossip_every", "must be >= 1")
    need(0 < f.choco_gamma <= 1, "federation.choco_gamma", f"must be in (0, 1], got {f.choco_gamma}")
    need(f.choco_compressor in COMPRESSORS, "federation.choco_compressor", f"must be one of {COMPRESSORS}")
    need(0 < f.choco_fraction <= 1, "federation.choco_fraction", f"must be in (0, 1], got {f.choco_fraction}")
    need(f.eval_clients >= 0, "federation.eval_clients", "must be >= 0")
    if f.decentralized:
        from pubswap.algorithms.topology import make_topology

        try:
            make_topology(f.topology, f.num_clients, f.edges)
        except ValueError as e:
            raise ConfigError(f"federation.{'edges' if f.topology == 'edges' else 'topology'}: {e}") from None
        need(
            f.clients_in_round() == f.num_clients,
            "federation.participation",
            "decentralized methods train every client every round (participation 1)",
        )
    if f.full_parameter:
        need(
            cfg.rollout.backend == "hf",
            "rollout.backend",
            f"federation.method {f.method} trains every weight, so each client's rollouts need its own full "
            "weights: only the HF backend serves them (set rollout.backend: hf)",
        )
    need(f.zo_eps > 0, "federation.zo_eps", f"must be > 0, got {f.zo_eps}")
    need(f.zo_lr > 0, "federation.zo_lr", f"must be > 0, got {f.zo_lr}")
    need(f.aggregation in AGGREGATIONS, "federation.aggregation", f"must be one of {AGGREGATIONS}")
    _check_aggregation_kwargs(f)
    need(f.weighting in WEIGHTINGS, "federation.weighting", f"must be one of {WEIGHTINGS}")
    need(f.fedprox_mu >= 0, "federation.fedprox_mu", "must be >= 0")
    need(0 < f.participation <= 1, "federation.participation", f"must be in (0, 1], got {f.participation}")
    need(f.clients_per_round >= 0, "federation.clients_per_round", "must be >= 0 (0: use federation.participation)")

    need(d.source in SOURCES, "data.source", f"must be one of {SOURCES}, got {d.source!r}")
    need(
        len(d.paths) in (0, PATHS_PER_SOURCE.get(d.source, 0)),
        "data.paths",
        f"{d.source} takes {PATHS_PER_SOURCE.get(d.source, 0)} path(s) (or none for the hub), got {len(d.paths)}",
    )
    need(d.subsample >= 0, "data.subsample", "must be >= 0 (0: keep every row)")
    need(len(d.tasks) > 0, "data.tasks", "must name at least one task")
    need(d.per_client >= 1, "data.per_client", "must be >= 1")
    need(
        d.public_size >= (g.b if f.swap_rule else 0),
        "data.public_size",
        f"must be >= grpo.b ({g.b}) for a PubSwap method",
    )
    need(d.test_size >= 1, "data.test_size", "must be >= 1")
    need(d.dirichlet_alpha > 0, "data.dirichlet_alpha", "must be > 0")
    need(d.reward in REWARDS, "data.reward", f"must be one of {REWARDS}")
    need(
        d.reward != "reasoning_gym" or d.source == "reasoning_gym",
        "data.reward",
        f"reasoning_gym scores reasoning-gym rows only (data.source is {d.source!r})",
    )
    if d.source == "reasoning_gym":
        from pubswap.data.reasoning_gym_tasks import check_tasks

        problem = check_tasks(d.tasks)
        need(problem is None, "data.tasks", problem or "")
    need(d.reward_mode in REWARD_MODES, "data.reward_mode", f"must be one of {REWARD_MODES}, got {d.reward_mode!r}")

    r, res = cfg.rollout, cfg.resources
    need(r.backend in ("vllm", "hf"), "rollout.backend", "must be 'vllm' or 'hf'")
    need(
        r.lora_mode in ("auto", "merged", "lora"),
        "rollout.lora_mode",
        f"must be auto, merged or lora, got {r.lora_mode!r}",
    )
    need(r.kv_cache_gib > 0, "rollout.kv_cache_gib", "must be > 0")
    need(
        0 < r.gpu_memory_utilization < 1,
        "rollout.gpu_memory_utilization",
        "must be in (0, 1): the engine's fraction of its actor's GPU share, the trainer gets the rest",
    )
    need(r.max_num_seqs >= 0, "rollout.max_num_seqs", "must be >= 0 (0: automatic)")
    need(r.max_num_batched_tokens >= 0, "rollout.max_num_batched_tokens", "must be >= 0 (0: automatic)")
    need(
        not r.adapter_dir or Path(r.adapter_dir).is_absolute(),
        "rollout.adapter_dir",
        f"must be an absolute node-local path (or empty for /dev/shm), got {r.adapter_dir!r}",
    )
    need(
        0 <= res.num_actors <= f.num_clients,
        "resources.num_actors",
        f"must be in [0, federation.num_clients={f.num_clients}] (0: one actor per client), got {res.num_actors}",
    )
    need(res.cpus_per_client > 0, "resources.cpus_per_client", "must be > 0")
    need(res.gpus_per_client is None or res.gpus_per_client >= 0, "resources.gpus_per_client", "must be >= 0")
    need(
        res.placement_strategy in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"),
        "resources.placement_strategy",
        "must be PACK, SPREAD, STRICT_PACK or STRICT_SPREAD",
    )
    need(res.placement_timeout_s > 0, "resources.placement_timeout_s", "must be > 0")
    need(
        res.collective_backend in ("gloo", "nccl"),
        "resources.collective_backend",
        f"must be 'gloo' or 'nccl', got {res.collective_backend!r}",
    )
    need(
        res.collective_backend != "nccl" or res.gpus_per_client is None or res.gpus_per_client > 0,
        "resources.collective_backend",
        "nccl needs GPUs (resources.gpus_per_client > 0); use gloo on CPUs",
    )
    need(
        res.collective_backend != "nccl" or res.gpus_per_client is None or res.gpus_per_client >= 1,
        "resources.collective_backend",
        f"nccl cannot place two ranks on one GPU, and gpus_per_client="
        f"{res.gpus_per_client:g} shares a card between client actors; use gloo, or gpus_per_client >= 1"
        if res.gpus_per_client is not None
        else "",
    )
    need(cfg.eval_every >= 1, "eval_every", "must be >= 1")
    need(cfg.eval_n >= 1, "eval_n", "must be >= 1")
    unknown = [x for x in cfg.logger if x not in LOGGERS]
    need(not unknown, "logger", f"unknown logger(s) {unknown}; known: {list(LOGGERS)}")
    if "wandb" in cfg.logger:
        import importlib.util

        need(
            importlib.util.find_spec("wandb") is not None,
            "logger",
            "wandb is listed but not installed (`pip install wandb`, or drop it from logger)",
        )
    ft = cfg.fault_tolerance
    need(ft.max_round_retries >= 0, "fault_tolerance.max_round_retries", "must be >= 0")
    need(ft.restart_timeout_s > 0, "fault_tolerance.restart_timeout_s", "must be > 0")
    need(ft.step_timeout_s >= 0, "fault_tolerance.step_timeout_s", "must be >= 0 (0: no timeout)")
    need(ft.lease_ttl_s >= 4, "fault_tolerance.lease_ttl_s", "must be >= 4 (seconds; the heartbeat is every ttl/4)")
    need(cfg.checkpoint.keep_last >= 0, "checkpoint.keep_last", "must be >= 0 (0 keeps every round)")
    need(cfg.checkpoint.every_steps >= 0, "checkpoint.every_steps", "must be >= 0 (0: checkpoints per round only)")


# ---------------------------------------------------------------------------------------------
# Resuming

# What a resumed run may change: where and how it runs, how far, how often it evaluates. Everything
# else (model, data, method, clients, seeds, hyperparameters, rollout backend) would change the result.
RESUMABLE_KEYS = (
    "run_dir",
    "federation.rounds",
    "eval_every",
    "resources.",
    "fault_tolerance.",
    "checkpoint.",
    "logger",
    "rollout.kv_cache_gib",
    "rollout.gpu_memory_utilization",
    "rollout.sleep_mode",
    "rollout.enforce_eager",
    "rollout.max_num_seqs",
    "rollout.max_num_batched_tokens",
    "rollout.adapter_dir",
    "deterministic",
    "grpo.micro_batch_tokens",
    "grpo.logprob_chunk",
    "grpo.gradient_checkpointing",
)


def _dotted(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_dotted(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def may_change_on_resume(key: str) -> bool:
    """Whether a resumed run may change the dotted `key` (RESUMABLE_KEYS)."""
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in RESUMABLE_KEYS)


def resume_conflicts(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """'key: saved -> current' for every setting that differs and may not change on resume."""
    a, b = _dotted(saved), _dotted(current)
    out = []
    for key in sorted(set(a) | set(b)):
        if may_change_on_resume(key):
            continue
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            out.append(f"{key}: {a.get(key, '<unset>')!r} -> {b.get(key, '<unset>')!r}")
    return out
