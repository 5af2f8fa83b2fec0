"""grpo.lora_autocast: on a bf16 model, LoRA's matmuls run in bf16 while its weights, gradients and
AdamW state stay fp32 (master weights), the step stays the fp32-LoRA step up to bf16 rounding, and
gradient checkpointing recomputes in the same precision."""

import pytest
import torch
from test_shared_prefix import ragged_groups

from pubswap.config import GRPOConfig, LoraConfig
from pubswap.learner.trainer import GRPOTrainer


def make(tiny_model_dir, autocast: bool, ckpt: bool = False, dtype: str = "bfloat16", policy: str = "lora"):
    grpo = GRPOConfig(
        lr=1e-3, grad_epochs=1, kl_coef=0.05, b=3, K=2, lora_autocast=autocast, gradient_checkpointing=ckpt
    )
    t = GRPOTrainer.load(
        str(tiny_model_dir), LoraConfig(r=4, alpha=8, dropout=0.0), grpo, dtype=dtype, seed=0, policy=policy
    )
    torch.manual_seed(3)
    t.set_adapter({k: v + torch.randn_like(v) * 0.05 for k, v in t.adapter().items()})
    return t


def lora_output_dtypes(t: GRPOTrainer) -> set[torch.dtype]:
    """The dtypes of every LoRA B projection's output during one step."""
    seen: set[torch.dtype] = set()
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
        for name, m in t.model.named_modules()
        if name.endswith("lora_B.default")
    ]
    try:
        t.step(ragged_groups(), owner=0)
    finally:
        for h in hooks:
            h.remove()
    return seen


def test_lora_runs_in_bf16_with_fp32_master_weights(tiny_model_dir):
    t = make(tiny_model_dir, autocast=True)
    assert t.autocast_dtype == torch.bfloat16
    assert lora_output_dtypes(t) == {torch.bfloat16}
    assert {p.dtype for p in t.trainable().values()} == {torch.float32}
    states = [s for s in t.optimizer.state.values()]
    assert states and {s["exp_avg"].dtype for s in states} == {s["exp_avg_sq"].dtype for s in states} == {torch.float32}
    off = make(tiny_model_dir, autocast=False)
    assert off.autocast_dtype is None and lora_output_dtypes(off) == {torch.float32}  # PEFT's fp32 path


def test_the_step_is_the_fp32_lora_step_up_to_bf16_rounding(tiny_model_dir):
    samples = ragged_groups(1)
    start = make(tiny_model_dir, autocast=False).adapter()
    moves, metrics = [], []
    for autocast in (True, False):
        t = make(tiny_model_dir, autocast=autocast)
        metrics.append(t.step(samples, owner=0))
        moves.append(torch.cat([(t.adapter()[k] - start[k]).flatten() for k in start]))
    cos = torch.nn.functional.cosine_similarity(moves[0], moves[1], dim=0)
    assert cos > 0.98, float(cos)
    for k in ("loss", "kl", "nll_own", "nll_swapped"):
        assert metrics[0][k] == pytest.approx(metrics[1][k], rel=0.05, abs=2e-3), k


def test_checkpointing_recomputes_in_the_same_precision(tiny_model_dir):
    samples = ragged_groups(1)
    adapters = []
    for ckpt in (False, True):
        t = make(tiny_model_dir, autocast=True, ckpt=ckpt)
        t.step(samples, owner=0)
        adapters.append(t.adapter())
    for k in adapters[0]:
        torch.testing.assert_close(adapters[1][k], adapters[0][k], rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype,policy", [("float32", "lora"), ("bfloat16", "full")])
def test_float32_models_and_full_parameter_policies_are_not_autocast(tiny_model_dir, dtype, policy):
    assert make(tiny_model_dir, autocast=True, dtype=dtype, policy=policy).autocast_dtype is None
