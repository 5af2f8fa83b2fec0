"""HumanEval and sanitized MBPP from fixture files in their public schemas, scored by running the
response's code against the tests in the sandbox (pubswap/sandbox.py)."""

import json

import pytest

from pubswap.config import from_dict
from pubswap.data.code_tasks import code_reward, code_rows, extract_code
from pubswap.data.records import load_records
from pubswap.data.rewards import in_format, make_row_reward
from pubswap.data.sources import load_source

HUMANEVAL = {
    "task_id": "HumanEval/0",
    "prompt": 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n',
    "canonical_solution": "    return sum(xs)\n",
    "test": "def check(candidate):\n    assert candidate([1, 2, 3]) == 6\n    assert candidate([]) == 0\n",
    "entry_point": "total",
}
MBPP = {
    "source_file": "x",
    "task_id": 2,
    "prompt": "Write a function to find the shared elements from the given two lists.",
    "code": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))",
    "test_imports": ["import math"],
    "test_list": [
        "assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))",
        "assert math.isclose(len(similar_elements((1, 2), (3, 4))), 0)",
    ],
}


def block(code: str) -> str:
    return f"Here it is.\n```python\n{code}\n```\nDone."


def write(records, path):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_rows_in_the_public_schemas_and_their_rejects(tmp_path):
    he, report = code_rows(
        "humaneval", load_records(write([HUMANEVAL, {**HUMANEVAL, "test": ""}], tmp_path / "he.jsonl"))
    )
    assert len(he) == 1 and report.rejected["missing_answer"] == 1
    assert HUMANEVAL["prompt"] in he[0].prompt and he[0].topic == "humaneval"
    mb, _ = code_rows("mbpp", load_records(write([MBPP], tmp_path / "mbpp.jsonl")))
    assert MBPP["test_list"][0] in mb[0].prompt and mb[0].answer.startswith("import math\n")
    cfg = from_dict({"data": {"source": "mbpp", "paths": [str(tmp_path / "mbpp.jsonl")]}})
    rows, _ = load_source(cfg.data, 1, 0)
    assert rows == mb and cfg.data.verifier == "code"


def test_code_passes_only_when_it_runs_the_tests_clean(tmp_path):
    (he,), _ = code_rows("humaneval", [HUMANEVAL])
    (mb,), _ = code_rows("mbpp", [MBPP])
    reward = make_row_reward(from_dict({"data": {"source": "humaneval"}}).data, 0)
    whole = "from typing import List\n\ndef total(xs: List[int]) -> int:\n    return sum(xs)"
    assert reward(block(whole), he) == 1.0
    assert reward(block("    return sum(xs)"), he) == 1.0  # the body alone continues the stub
    assert reward(block("def total(xs):\n    return 0"), he) == 0.0  # wrong
    assert reward("return sum(xs)", he) == 0.0  # no code block
    assert code_reward(block(MBPP["code"]), mb.answer, mb.ref) == 1.0
    assert code_reward(block("def similar_elements(a, b):\n    return ()"), mb.answer) == 0.0
    # untrusted code is stopped and scored as a failure, and reaches nothing outside its directory
    victim = tmp_path / "keep.txt"
    victim.write_text("x")
    hostile = f"import os\nos.remove({str(victim)!r})\n" + MBPP["code"]
    assert code_reward(block(hostile), mb.answer) == 0.0 and victim.exists()
    assert code_reward(block("while True:\n    pass"), mb.answer, timeout_s=1) == 0.0
    assert in_format(block("x = 1"), "code") and not in_format("x = 1", "code")


@pytest.mark.parametrize("text,want", [("```py\na\n```\n```python\nb\n```", "b\n"), ("no code", None)])
def test_the_last_fenced_block_is_the_code(text, want):
    assert extract_code(text) == want
