"""The base model's pass@1 under the strict and the lenient reward, on the SAME responses.

    python benchmarks/reward_modes.py                          # the default config's model and tasks
    python benchmarks/reward_modes.py --prompts 200 data.tasks=[chain_sum]

Builds the run's split as the driver does, samples one response per test prompt with the base model
(vLLM, temperature grpo.val_temperature, max model.max_response_len tokens, seeded), and scores every
response with both reward modes. Prints per task and overall: pass@1 +- SE under each mode, the share of
responses that box an answer, and the share of the lenient credit that strictness removes. It also
scores the test prompt itself echoed back as a response, the degenerate policy the strict reward rules out.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/default.yaml")
    ap.add_argument("--prompts", type=int, default=200, help="test prompts (data.test_size)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    from transformers import AutoTokenizer

    from actors.rollout import VLLMEngine
    from jobs.train import build_split
    from pubswap.algorithms.evaluation import score
    from pubswap.config import load_config
    from pubswap.data.prompt_length import prompt_ids
    from pubswap.data.rewards import in_format, make_row_reward
    from pubswap.models import resolve_model
    from pubswap.seeding import derive_seed

    cfg = load_config(args.config, [*args.overrides, f"data.test_size={args.prompts}"])
    model_dir = resolve_model(cfg.model.path, Path(cfg.run_dir).resolve().parent / "_models")
    split = build_split(cfg, model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    engine = VLLMEngine(
        model_dir,
        cfg.lora.max_r,
        cfg.model.max_prompt_len + cfg.model.max_response_len,
        cfg.model.dtype,
        cfg.seed,
        max_num_seqs=64,
        merged=True,
    )
    pids = [prompt_ids(tok, r.prompt, r.context) for r in split.test]
    seeds = [derive_seed(cfg.seed, "eval", 0, 0, i) for i in range(len(pids))]
    outs = engine.generate(
        pids, n=1, temperature=cfg.grpo.val_temperature, max_tokens=cfg.model.max_response_len, seeds=seeds
    )
    texts = [tok.decode(list(o[0].token_ids), skip_special_tokens=True) for o in outs]
    rewards = {
        m: make_row_reward(cfg.data.model_copy(update={"reward_mode": m}), cfg.seed) for m in ("strict", "lenient")
    }
    by_task: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for row, text in zip(split.test, texts):
        for key in ("all", row.topic):
            for mode, fn in rewards.items():
                by_task[key][mode].append([fn(text, row)])
                by_task[key][f"echo_{mode}"].append([fn(row.prompt.split("\n")[0], row)])
            by_task[key]["format"].append([in_format(text, cfg.data.verifier)])
    print(
        f"{len(texts)} test prompts, 1 response each at T={cfg.grpo.val_temperature}, "
        f"max {cfg.model.max_response_len} tokens, model {cfg.model.path}"
    )
    print(f"{'task':<18} {'n':>4} {'strict':>14} {'lenient':>14} {'boxed':>6} {'echo strict':>12} {'echo lenient':>13}")
    for key in ["all", *sorted(k for k in by_task if k != "all")]:
        d = by_task[key]
        s, lenient = score(d["strict"], d["format"]), score(d["lenient"], d["format"])
        es, el = score(d["echo_strict"], d["format"]), score(d["echo_lenient"], d["format"])
        print(
            f"{key:<18} {s.prompts:>4} {s.pass_at_1:>6.3f} ± {s.se:.3f} {lenient.pass_at_1:>6.3f} ± {lenient.se:.3f} "
            f"{s.format_rate:>6.2f} {es.pass_at_1:>12.3f} {el.pass_at_1:>13.3f}"
        )
    for t, r in list(zip(texts, split.test))[:5]:
        print(f"--- {r.answer!r}: {t!r}")


if __name__ == "__main__":
    main()
