"""Helper run as a subprocess (vLLM's engine core is a spawned process and needs a __main__ guard).

    python vllm_prompt_logprobs.py MODEL_DIR ADAPTER_DIR|- TOKEN_IDS_JSON OUT_JSON

Writes the log-probability vLLM assigns to each prompt token after the first, with the LoRA adapter
(or the base model for '-').
"""

import json
import os
import sys


def main() -> None:
    model_dir, adapter_dir, ids_json, out_json = sys.argv[1:5]
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    llm = LLM(model=model_dir, dtype="float32", enable_lora=True, max_lora_rank=8, max_model_len=256,
              enforce_eager=True, seed=0)
    ids = json.loads(ids_json)
    lora = None if adapter_dir == "-" else LoRARequest("a", 1, os.path.abspath(adapter_dir))
    out = llm.generate([TokensPrompt(prompt_token_ids=ids)], SamplingParams(max_tokens=1, prompt_logprobs=0),
                       lora_request=lora, use_tqdm=False)[0]
    lps = [entry[tok].logprob for entry, tok in zip(out.prompt_logprobs[1:], ids[1:])]
    with open(out_json, "w") as f:
        json.dump(lps, f)


if __name__ == "__main__":
    main()
