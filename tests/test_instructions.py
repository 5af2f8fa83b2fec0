"""Instruction-tuning rows (data.source instruct) and the Alpaca template (model.prompt_format alpaca),
as the FedSRD reference builds them."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from pubswap.config import ConfigError, load_config
from pubswap.data.instructions import instruction_rows
from pubswap.data.prompt_length import prompt_ids

# the reference's utils/template.py, up to where the response starts
REFERENCE = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the "
    "request.\n\n### Instruction:\n{} \n\n### Response: "
)


def test_alpaca_gsm8k_and_math_records_become_instruction_and_response():
    records = [
        {"instruction": "Write a loop.", "input": "", "output": "for i in x: pass"},
        {"instruction": "Translate", "input": "bonjour", "output": "hello", "text": "..."},
        {"question": "2+3?", "answer": "2+3=5\n#### 5"},
        {"problem": "Find x.", "solution": "$x=\\boxed{1}$", "level": "Level 1", "type": "Algebra"},
        {"instruction": "Classify.", "input": "x", "output": "pos", "domain": "finance"},
        {"instruction": "", "input": "", "output": "orphan"},  # no instruction
        {"instruction": "No answer.", "input": "", "output": " "},
    ]
    rows, report = instruction_rows(records, "code")
    assert [(r.prompt, r.answer) for r in rows] == [
        ("Write a loop.", "for i in x: pass"),
        ("Translate bonjour", "hello"),  # instruction + " " + input, as the reference's alpaca_format
        ("2+3?", "2+3=5\n#### 5"),
        ("Find x.", "$x=\\boxed{1}$"),
        ("Classify. x", "pos"),
    ]
    assert [r.topic for r in rows] == ["code"] * 4 + ["finance"]
    assert report.kept == 5 and report.total_rejected == 2


def test_the_alpaca_prompt_is_the_reference_template(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    got = prompt_ids(tok, "Add 2 and 3.", (), "alpaca")
    assert got == tok(REFERENCE.format("Add 2 and 3."), add_special_tokens=True)["input_ids"]
    assert got != prompt_ids(tok, "Add 2 and 3.", (), "chat")


def test_instruction_data_without_sft_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="^objective: .*use sft"):
        load_config(None, [f"model.path={tmp_path}", "data.source=instruct"])
    cfg = load_config(
        None, [f"model.path={tmp_path}", "data.source=instruct", "objective=sft", "federation.method=fedavg-grpo"]
    )
    assert cfg.data.verifier == "exact"
