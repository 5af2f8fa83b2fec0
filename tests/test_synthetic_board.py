"""The reduced FedSRD board's offline data (pubswap/data/synthetic_board.py): written the same from the
same seed, read by the real loaders, gold answers right by an independent check, evaluations held out."""

from __future__ import annotations

import re

from pubswap.data.board_evals import load_benchmark
from pubswap.data.instructions import load_instructions
from pubswap.data.medical import LETTERS
from pubswap.data.rewards import make_benchmark_reward
from pubswap.data.synthetic_board import EVALS, MEDICAL_FACTS, write_board


def test_the_same_seed_writes_the_same_files_and_another_seed_other_ones(tmp_path):
    a = write_board(tmp_path / "a", 20, 8, seed=3)
    b = write_board(tmp_path / "b", 20, 8, seed=3)
    c = write_board(tmp_path / "c", 20, 8, seed=4)
    read = lambda files: [open(f).read() for f in [*files[0], *files[1].values()]]  # noqa: E731
    assert read(a) == read(b)
    assert read(a) != read(c)


def test_the_files_load_through_the_boards_loaders_with_their_shots(tmp_path):
    train, evals = write_board(tmp_path, 20, 8, seed=0)
    assert list(evals) == list(EVALS)
    for path in train:
        rows, report = load_instructions(path)
        assert len(rows) == 20 and not report.rejected, path
    for name, path in evals.items():
        rows, report = load_benchmark(name, path)
        assert len(rows) == 8, name  # mbpp's 3 and medqa/medmcqa's 1 shot rows are not scored


def test_gold_answers_are_right(tmp_path):
    _, evals = write_board(tmp_path, 20, 12, seed=1)
    code = make_benchmark_reward("code")
    for name in ("humaneval", "mbpp"):
        rows, _ = load_benchmark(name, evals[name])
        for row in rows:
            fname = _function(row.prompt)
            family, k = fname.rsplit("_", 1)
            expr = {
                "add": f"x + {k}",
                "times": f"x * {k}",
                "minus": f"x - {k}",
                "mod": f"x % {k}",
                "square_plus": f"x ** 2 + {k}",
                "twice_plus": f"x + x + {k}",
            }[family]
            right = f"```python\ndef {fname}(x):\n    return {expr}\n```"
            wrong = f"```python\ndef {fname}(x):\n    return {expr} + 1\n```"
            assert code(right, row) == 1.0 and code(wrong, row) == 0.0, (name, row.prompt)
    facts = {c: a for _, _, table in MEDICAL_FACTS for c, a in table.items()}
    for name in ("medqa", "medmcqa"):
        rows, _ = load_benchmark(name, evals[name])
        for row in rows:
            condition = next(c for c in facts if c in row.prompt)
            option = re.search(rf"^{row.answer}\. (.+)$", row.prompt, re.MULTILINE).group(1)
            assert option == facts[condition], (name, row.prompt)
    for name in ("fineval", "financeiq"):
        rows, _ = load_benchmark(name, evals[name])
        for row in rows:
            nums = [float(x) for x in re.findall(r"\$?(-?\d+(?:\.\d+)?)", row.prompt.split("\n")[0])]
            if "simple interest" in row.prompt:
                p, r, t = nums
                value = p * r * t / 100
            elif "percent change" in row.prompt:
                a, b = nums
                value = (b - a) / a * 100
            else:
                rev, cost = nums
                value = (rev - cost) / rev * 100
            option = re.search(rf"^{row.answer}\. (.+)$", row.prompt, re.MULTILINE).group(1)
            assert float(option.strip("$%")) == value, (name, row.prompt)
            assert row.answer in LETTERS
    for name in ("gsm8k", "math"):
        rows, _ = load_benchmark(name, evals[name])
        for row in rows:
            a, b = [int(x) for x in re.findall(r"\d+", row.prompt.split("\n")[0])[:2]]
            product = "pens" in row.prompt or "times" in row.prompt
            assert int(row.answer) == (a * b if product else a + b), (name, row.prompt)


def test_the_evaluations_ask_what_neither_the_training_sets_nor_the_shots_show(tmp_path):
    train, evals = write_board(tmp_path, 200, 16, seed=2)
    taught = open(train[0]).read()
    for name in ("humaneval", "mbpp"):
        rows, _ = load_benchmark(name, evals[name])
        asked = [_function(row.prompt) for row in rows]
        shown = [_function(m["content"]) for m in rows[0].context if m["role"] == "user"]
        assert len(shown) == (3 if name == "mbpp" else 0) and not set(shown) & set(asked)
        for f in asked:  # another function: another (expression, constant) pair than any trained
            assert f"{f}(x)" not in taught, f
    medical = open(train[1]).read()
    for name in ("medqa", "medmcqa"):
        rows, _ = load_benchmark(name, evals[name])
        (shot,) = [m["content"].split("\n")[0] for m in rows[0].context if m["role"] == "user"]
        for row in rows:  # the same facts, asked another way; the shot's fact is not asked
            question = row.prompt.split("\n")[0]
            assert question not in medical and question != shot


def _function(prompt: str) -> str:
    return re.search(r"\b([a-z_]+_\d+)\(x\)", prompt).group(1)
