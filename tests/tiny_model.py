"""A tiny random-init Llama + a BPE tokenizer with a ChatML template, built in well under a second.

Used by tests that need a real Hugging Face / PEFT / vLLM model without downloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_model(
    path: str | Path,
    seed: int = 0,
    vocab_size: int = 512,
    digits_only: bool = False,
    chat_template: bool = True,
    corpus: Sequence[str] = (),
) -> Path:
    """`corpus`: more text the tokenizer is trained on (whole words become tokens).
    `digits_only`: an untied LM head whose rows are zero except for the ten single-digit tokens,
    so one-token answers are a digit (right ~1 time in 10 on one-digit sums): tests get real rewards.
    `chat_template=False`: a base model's tokenizer, with no chat template (as OPT's)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    texts = [f"Calculate {a} + {b}. The answer is \\boxed{{{a + b}}}." for a in range(10) for b in range(10)]
    texts += ["Solve the problem. Put the final answer in \\boxed{}.", "user assistant system", *corpus]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    if chat_template:
        hf_tok.chat_template = CHATML
    hf_tok.save_pretrained(path)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=512,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=not digits_only,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    if digits_only:
        # Point every digit row along the mean final hidden state at the generation position, so the
        # ten digits share almost all probability there, nearly uniformly.
        digit_ids = [hf_tok.convert_tokens_to_ids(str(d)) for d in range(10)]
        prompts = [f"Calculate {a} + {b}." for a in range(5) for b in range(5)]
        with torch.no_grad():
            hs = []
            for p in prompts:
                if chat_template:
                    ids = hf_tok.apply_chat_template(
                        [{"role": "user", "content": p}],
                        add_generation_prompt=True,
                        return_dict=True,
                        return_tensors="pt",
                    )["input_ids"]
                else:  # pubswap.data.prompt_length.plain_prompt
                    ids = hf_tok(f"{p}\n", return_tensors="pt")["input_ids"]
                hs.append(model.model(input_ids=ids).last_hidden_state[0, -1])
            v = torch.stack(hs).mean(0)
            v = v / v.norm()
            head = model.lm_head.weight
            head.zero_()
            for d in digit_ids:
                head[d] = 12.0 * v + 0.02 * torch.randn_like(v)
    model.save_pretrained(path)
    return path
