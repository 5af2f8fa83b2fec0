"""Code generation scored by running the code: HumanEval and sanitized MBPP (the FedSRD board's code
columns), with the `code` reward.

A row's `answer` is the test program and its `ref` the text that goes before the model's code; the
response's last ```python block (or ``` block) is the code. The program run is ref + code + tests,
in pubswap/sandbox.py (a separate limited process); it scores 1 when it exits 0.

  humaneval  hub `openai/openai_humaneval` (split test): `task_id`, `prompt` (imports, signature and
             docstring), `test` (defines check), `entry_point`. The prompt shows the stub; a response
             may give the whole function or only its body: with no `def <entry_point>` in the code, the
             code is taken as the body and goes after the stub. Tests: `test` + check(entry_point).
  mbpp       hub `google-research-datasets/mbpp` (config sanitized, split test): `task_id`, `prompt`,
             `code`, `test_list`, `test_imports`. The prompt shows the task and its tests (0-shot here;
             the board reports MBPP 3-shot). Tests: test_imports + test_list.
The topic is the benchmark's name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from pubswap.data.rows import Row, RowReport, map_rows, nonblank

HUB = {
    "humaneval": ("openai/openai_humaneval", None, "test"),
    "mbpp": ("google-research-datasets/mbpp", "sanitized", "test"),
}
INSTRUCTION = "Answer with the complete Python code in one ```python code block."
BODY = "\n# the response's code continues the stub above\n"
_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def _humaneval_fields(r: Mapping) -> dict:
    prompt, test, entry = nonblank(r.get("prompt")), nonblank(r.get("test")), nonblank(r.get("entry_point"))
    ok = prompt and entry
    return {
        "prompt": f"Complete this Python function.\n\n```python\n{prompt}```\n\n{INSTRUCTION}" if ok else None,
        "answer": f"{test}\n\ncheck({entry.strip()})\n" if ok and test else None,
        "topic": "humaneval",
        "ref": f"{entry.strip()}\n{prompt}" if ok else "",
    }


def _mbpp_fields(r: Mapping) -> dict:
    task = nonblank(r.get("prompt")) or nonblank(r.get("text"))  # sanitized: prompt; full: text
    tests = [t for t in r.get("test_list") or [] if nonblank(t)]
    imports = [t for t in r.get("test_imports") or [] if nonblank(t)]
    ok = task and tests
    return {
        "prompt": f"{task.strip()}\nYour code should pass these tests:\n" + "\n".join(tests) + f"\n\n{INSTRUCTION}"
        if ok
        else None,
        "answer": "\n".join([*imports, *tests]) + "\n" if ok else None,
        "topic": "mbpp",
    }


FIELDS = {"humaneval": _humaneval_fields, "mbpp": _mbpp_fields}


def code_rows(task: str, records: Iterable[Mapping]) -> tuple[list[Row], RowReport]:
    return map_rows(records, FIELDS[task])


def load_code(task: str, path: str = "") -> tuple[list[Row], RowReport]:
    """`task` rows from a local file/folder in its public schema, or the hub's test split."""
    from pubswap.data.records import load_records

    name, config, split = HUB[task]
    return code_rows(task, load_records(path or name, "train" if path else split, None if path else config))


def extract_code(response: str) -> str | None:
    """The last fenced code block of the response, or None."""
    blocks = _BLOCK.findall(response) if isinstance(response, str) else []
    return blocks[-1] if blocks else None


def program(code: str, tests: str, ref: str = "") -> str:
    """What runs: the row's prefix, the code, the tests. A HumanEval ref is `entry_point\\nstub`: the
    stub's imports go first, and the stub itself when the code is only the function's body."""
    head = ""
    if ref:
        entry, _, stub = ref.partition("\n")
        if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
            head = "\n".join(x for x in stub.splitlines() if x.startswith(("import ", "from "))) + "\n"
        else:
            head = stub + BODY
    return f"{head}{code}\n\n{tests}"


def code_reward(response: str, tests: str, ref: str = "", timeout_s: float = 10.0) -> float:
    """1.0 when the response's code passes the tests in the sandbox, else 0.0 (no code block: 0)."""
    from pubswap.sandbox import run_program

    code = extract_code(response)
    if code is None:
        return 0.0
    return float(run_program(program(code, tests, ref), timeout_s=timeout_s).passed)
