"""One GPU budget per client actor: how a card is split between the vLLM engine and the trainer.

A client actor holds `share` of a GPU (resources.gpus_per_client: 1 = a whole card, 0.5 = half, so two
actors on one card). Of that share the engine takes `rollout.gpu_memory_utilization` (its KV cache
grows into it), the trainer the rest. vLLM reads its `gpu_memory_utilization` as a fraction of the
WHOLE card and refuses to start when less than that is free, so the engine is handed
share x rollout.gpu_memory_utilization: two actors on one card each ask for half of what one would.

The needs are estimates from the model's shape (read from its config, counted on the meta device):

  trainer  = base weights (model dtype) + LoRA weights, gradient and anchor (fp32) + AdamW moments
             (fp32 x 2, one set per hosted client) + activations of one micro-batch
             (grpo.micro_batch_tokens; with gradient checkpointing only each layer's input is kept,
             plus one layer's full activations; the no-grad passes' larger micro-batches are sized
             to fit the same bytes: nograd_micro_batch_tokens) + LM-head chunks ([grpo.logprob_chunk, vocab] fp32,
             about 3 alive in backward) + CUDA context and workspaces
  full-parameter methods (dsgd, chocosgd, seedflood): the trained weights and their gradient in fp32,
             AdamW moments (fp32 x 2) for every hosted client (they stay on the device; seedflood's
             zeroth-order steps make none), a frozen base copy in the model dtype when grpo.kl_coef > 0,
             and the same activations, logits and CUDA terms
  engine   = weights + LoRA slots (max_loras adapters at vLLM's max rank) + the KV cache of one
             full-length sequence + CUDA graphs and sampler buffers

With vLLM's sleep mode (rollout.sleep_mode, CUDA only) the engine frees its weights and KV cache
while the trainer runs, so the trainer may use the whole share but the engine's CUDA context.
A request that cannot fit raises GpuBudgetError with every number in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from pubswap.learner.rollout_limits import vllm_max_lora_rank

GIB = 2**30
TRAINER_CUDA_OVERHEAD = 1.5 * GIB  # CUDA context, cuBLAS workspaces, allocator slack
ENGINE_OVERHEAD = 2.0 * GIB  # CUDA context, CUDA graphs, sampler and activation buffers
ENGINE_ASLEEP = 1.0 * GIB  # what a sleeping engine keeps (CUDA context)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class GpuBudgetError(ValueError):
    """The configured split of a GPU cannot hold the engine or the trainer; one line with the numbers."""


@dataclass(frozen=True)
class ModelShape:
    params: int
    layers: int
    hidden: int
    intermediate: int
    q_dim: int  # attention heads x head dim
    kv_dim: int  # KV heads x head dim
    vocab: int
    lora_params: int  # trainable LoRA parameters at the configured rank and targets


def model_shape(config, lora_r: int, lora_alpha: int, target_modules: list[str]) -> ModelShape:
    """Count parameters of a transformers config (or a path to one) on the meta device: no memory, no weights."""
    import torch
    from peft import get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from pubswap.lora import peft_lora_config

    if not hasattr(config, "hidden_size"):
        config = AutoConfig.from_pretrained(config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    peft = get_peft_model(model, peft_lora_config(lora_r, lora_alpha, target_modules))
    lora = sum(p.numel() for p in peft.parameters() if p.requires_grad)
    layers, hidden, intermediate, q_dim, kv_dim = _dims(config)
    return ModelShape(
        params=params,
        layers=layers,
        hidden=hidden,
        intermediate=intermediate,
        q_dim=q_dim,
        kv_dim=kv_dim,
        vocab=config.vocab_size,
        lora_params=lora,
    )


def _dims(config) -> tuple[int, int, int, int, int]:
    """(layers, hidden, intermediate, heads x head dim, KV heads x head dim) of a transformers config."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return (
        config.num_hidden_layers,
        config.hidden_size,
        getattr(config, "intermediate_size", None) or 4 * config.hidden_size,
        config.num_attention_heads * head_dim,
        kv_heads * head_dim,
    )


NOGRAD_FACTOR_CAP = 8  # the no-grad passes' micro-batches hold at most this many times the training budget


def activation_bytes_per_token(
    layers: int, hidden: int, intermediate: int, q_dim: int, kv_dim: int, dtype_bytes: int
) -> tuple[tuple[int, int], int]:
    """Estimated activation bytes per token: ((training pass without, with gradient checkpointing),
    no-grad pass). Training saves every layer's activations for the backward (with checkpointing each
    layer's input, and one layer's activations while it is recomputed); a no-grad pass frees each
    layer's activations before the next layer runs, so it holds one layer's and the residual stream."""
    b = dtype_bytes
    # saved for backward per token per layer: norms, q/k/v/o inputs and outputs, MLP gate/up/act/product,
    # residuals (model dtype) + the fp32 casts PEFT makes of each LoRA input
    per_layer = b * (8 * hidden + 2 * q_dim + 2 * kv_dim + 4 * intermediate) + 4 * (5 * hidden + q_dim + intermediate)
    return (layers * per_layer, layers * hidden * b + per_layer), per_layer + hidden * b


def nograd_micro_batch_tokens(config, dtype_bytes: int, gradient_checkpointing: bool, micro_batch_tokens: int) -> int:
    """The no-grad passes' token budget (old policy, reference, log-prob queries) for a transformers
    `config`: as many tokens as fit in the training micro-batch's activation memory, at least
    `micro_batch_tokens` and at most NOGRAD_FACTOR_CAP times it (the LM head's logits are chunked
    alike in both, so they do not grow with the budget)."""
    train, nograd = activation_bytes_per_token(*_dims(config), dtype_bytes)
    factor = min(NOGRAD_FACTOR_CAP, max(1.0, train[gradient_checkpointing] / nograd))
    return int(micro_batch_tokens * factor)


def trainer_need(
    shape: ModelShape,
    dtype: str,
    clients: int,
    micro_batch_tokens: int,
    logprob_chunk: int,
    gradient_checkpointing: bool,
    full: str = "",
    kl_reference: bool = False,
) -> dict[str, float]:
    """Estimated peak bytes of the trainer, by part. `full`: "adamw" or "zo" (zeroth order) for the
    full-parameter methods (every weight trained), "" for LoRA."""
    b = DTYPE_BYTES[dtype]
    s = shape
    train, _ = activation_bytes_per_token(s.layers, s.hidden, s.intermediate, s.q_dim, s.kv_dim, b)
    acts = micro_batch_tokens * train[gradient_checkpointing]
    if full:
        trained = {
            "fp32 weights+grad": s.params * 4 * (2 if full == "adamw" else 1),
            "AdamW": s.params * 8 * clients if full == "adamw" else 0,
            "KL reference": s.params * b if kl_reference else 0,
        }
    else:
        trained = {"weights": s.params * b, "LoRA+AdamW": s.lora_params * 4 * (3 + 2 * clients)}
    return {
        **{k: v for k, v in trained.items() if v},
        "activations": acts,
        "logits": 3 * logprob_chunk * s.vocab * 4,
        "CUDA": TRAINER_CUDA_OVERHEAD,
    }


def engine_need(
    shape: ModelShape, dtype: str, max_model_len: int, max_loras: int, lora_r: int, max_lora_rank: int
) -> dict[str, float]:
    """Bytes the engine needs at least: below this vLLM cannot hold one full-length sequence."""
    b = DTYPE_BYTES[dtype]
    return {
        "weights": shape.params * b,
        "LoRA slots": max_loras * shape.lora_params * (max_lora_rank / lora_r) * b,
        "KV of one sequence": max_model_len * 2 * shape.layers * shape.kv_dim * b,
        "graphs+buffers": ENGINE_OVERHEAD,
    }


@dataclass(frozen=True)
class GpuBudget:
    card_bytes: int
    share: float  # of the card, per actor
    engine_fraction: float  # of the whole card: vLLM's gpu_memory_utilization
    engine_bytes: float
    trainer_bytes: float
    kv_cache_bytes: float  # what the engine has left for KV cache beyond its one-sequence minimum

    def line(self) -> str:
        return (
            f"GPU budget per client actor: {self.share:g} of a {self.card_bytes / GIB:.1f} GiB card = "
            f"{self.share * self.card_bytes / GIB:.1f} GiB; engine {self.engine_bytes / GIB:.1f} GiB "
            f"(vLLM gpu_memory_utilization={self.engine_fraction:.3f}, ~{self.kv_cache_bytes / GIB:.1f} GiB "
            f"of extra KV cache), trainer {self.trainer_bytes / GIB:.1f} GiB"
        )


def _parts(need: dict[str, float]) -> str:
    return ", ".join(f"{k} {v / GIB:.1f}" for k, v in need.items())


def split_gpu(
    card_bytes: int,
    share: float,
    engine_share: float,
    trainer: dict[str, float],
    engine: dict[str, float],
    sleep_mode: bool = False,
    card_name: str = "GPU",
) -> GpuBudget:
    """Split `share` of a card of `card_bytes` between engine and trainer, or raise GpuBudgetError.

    `engine_share` is rollout.gpu_memory_utilization: the engine's fraction of the actor's share.
    """
    if not 0 < share <= 1:
        raise GpuBudgetError(
            f"resources.gpus_per_client={share:g}: a client actor needs a share of one GPU in "
            "(0, 1] (vLLM and the trainer run on one device)"
        )
    actor = share * card_bytes
    engine_bytes = engine_share * actor
    trainer_bytes = actor - (ENGINE_ASLEEP if sleep_mode else engine_bytes)
    engine_total, trainer_total = sum(engine.values()), sum(trainer.values())
    head = (
        f"GPU budget: a client actor gets {share:g} of a {card_bytes / GIB:.1f} GiB {card_name} = {actor / GIB:.1f} GiB"
    )
    if engine_bytes < engine_total:
        raise GpuBudgetError(
            f"{head}; its engine's {engine_share:g} of that (rollout.gpu_memory_utilization) is "
            f"{engine_bytes / GIB:.1f} GiB but it needs >= {engine_total / GIB:.1f} GiB ({_parts(engine)}): raise "
            "rollout.gpu_memory_utilization, shorten model.max_prompt_len/max_response_len, or give each actor "
            "more GPU (resources.gpus_per_client, fewer clients per GPU)"
        )
    if trainer_bytes < trainer_total:
        where = (
            "the share less a sleeping engine"
            if sleep_mode
            else f"the rest after the engine's {engine_share:g} (rollout.gpu_memory_utilization)"
        )
        raise GpuBudgetError(
            f"{head}; the trainer has {trainer_bytes / GIB:.1f} GiB ({where}) but needs ~{trainer_total / GIB:.1f} "
            f"GiB ({_parts(trainer)}): lower grpo.micro_batch_tokens or grpo.logprob_chunk, set "
            "grpo.gradient_checkpointing=true, lower rollout.gpu_memory_utilization, set rollout.sleep_mode=true, "
            "or give each actor more GPU (resources.gpus_per_client)"
        )
    return GpuBudget(
        card_bytes=card_bytes,
        share=share,
        engine_fraction=share * engine_share,
        engine_bytes=engine_bytes,
        trainer_bytes=trainer_bytes,
        kv_cache_bytes=engine_bytes - engine_total,
    )


def plan(
    cfg,
    shape: ModelShape,
    card_bytes: int,
    share: float,
    clients_per_actor: int,
    on_cuda: bool = True,
    card_name: str = "GPU",
) -> GpuBudget:
    """The budget of one client actor of run config `cfg` (pubswap.config.RunConfig) on a card."""
    m, g = cfg.model, cfg.grpo
    ckpt = g.gradient_checkpointing if g.gradient_checkpointing is not None else on_cuda
    f = cfg.federation
    full = ("zo" if f.gossip_rule == "seedflood" else "adamw") if f.full_parameter else ""
    trainer = trainer_need(
        shape,
        m.dtype,
        clients_per_actor,
        g.micro_batch_tokens,
        g.logprob_chunk,
        ckpt,
        full=full,
        kl_reference=bool(full) and g.kl_coef > 0,
    )
    engine = engine_need(
        shape,
        m.dtype,
        cfg.max_model_len,
        clients_per_actor,
        cfg.lora.max_r,
        vllm_max_lora_rank(cfg.lora.max_r),
    )
    return split_gpu(
        card_bytes,
        share,
        cfg.rollout.gpu_memory_utilization,
        trainer,
        engine,
        sleep_mode=cfg.rollout.sleep_mode,
        card_name=card_name,
    )
