"""A small offline stand-in for the FedSRD board's data: four instruction domains and eight evaluations.

The board (../shared/seeds/leaderboard-fedsrd.md) trains 4 clients on CodeAlpaca-20k, medical_meadow_medqa,
finance-alpaca and GSM8K + MATH, and scores HumanEval, MBPP, MedQA, MedMCQA, FinEval, FinanceIQ, GSM8K and
MATH. None of them is on this machine, and a 135M model scores about nothing on them. This module
writes, from a seed, sets small and regular enough for a small model to learn in a few rounds, each in
the public schema our loaders read (pubswap/data/instructions.py, board_evals.py), so the reduced board
(benchmarks/fedsrd_reduced.py) runs the real loaders, trainers and scorers:

  domain   trains on (schema)                                   scored by (schema)
  code     "write f(x) returning <expression>" (CodeAlpaca)     humaneval, mbpp: other (expression, k)
                                                                pairs, run against their tests
  medical  one-of-four questions on 18 textbook facts           medqa, medmcqa: the same facts asked
           (medical_meadow_medqa)                               another way, options in another order
  finance  simple interest, percent change, margin (Alpaca)     fineval, financeiq: other numbers,
                                                                four options
  math     sums and products, worded or not (Alpaca, boxed)     gsm8k, math: other numbers

All four training sets share the Alpaca schema (the reference's math set is GSM8K's and MATH's own), so
their folder reads as one table (data.paths, the in-run test rows). Every draw comes from
random.Random(f"{seed}/{stream}"): the same seed writes the same files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

LETTERS = "ABCD"

# code: (name, what it returns, its expression in x, its value); each with k = 1..19
CODE_FAMILIES = (
    ("add", "x plus {k}", "x + {k}", lambda x, k: x + k),
    ("times", "x times {k}", "x * {k}", lambda x, k: x * k),
    ("minus", "x minus {k}", "x - {k}", lambda x, k: x - k),
    ("mod", "the remainder of x divided by {k}", "x % {k}", lambda x, k: x % k),
    ("square_plus", "the square of x plus {k}", "x * x + {k}", lambda x, k: x * x + k),
    ("twice_plus", "twice x plus {k}", "2 * x + {k}", lambda x, k: 2 * x + k),
)

# medical: (category, the question's two phrasings, {condition: answer}); the options are the category's answers
MEDICAL_FACTS = (
    (
        "vitamin",
        ("Deficiency of which vitamin causes {c}?", "A patient is diagnosed with {c}. Which vitamin is lacking?"),
        {
            "scurvy": "vitamin C",
            "rickets": "vitamin D",
            "beriberi": "thiamine (vitamin B1)",
            "pellagra": "niacin (vitamin B3)",
            "night blindness": "vitamin A",
            "pernicious anemia": "vitamin B12",
        },
    ),
    (
        "antidote",
        ("What is the antidote for {c}?", "A patient presents with {c}. Which drug reverses it?"),
        {
            "opioid overdose": "naloxone",
            "heparin overdose": "protamine sulfate",
            "acetaminophen overdose": "N-acetylcysteine",
            "benzodiazepine overdose": "flumazenil",
            "organophosphate poisoning": "atropine",
            "malignant hyperthermia": "dantrolene",
        },
    ),
    (
        "organ",
        ("Which organ secretes {c}?", "Where in the body is {c} produced?"),
        {
            "insulin": "pancreas",
            "cortisol": "adrenal cortex",
            "thyroxine": "thyroid gland",
            "melatonin": "pineal gland",
            "erythropoietin": "kidney",
            "prolactin": "anterior pituitary",
        },
    ),
)


def _facts(phrasing: int) -> list[tuple[str, str, str, str, list[str]]]:
    """(category, question template, condition, answer, the category's answers) for every fact."""
    return [(cat, asks[phrasing], c, a, list(t.values())) for cat, asks, t in MEDICAL_FACTS for c, a in t.items()]


def _rng(seed: int, stream: str) -> random.Random:
    return random.Random(f"{seed}/{stream}")


def _code_pairs(seed: int) -> tuple[list[tuple], list[tuple]]:
    """(family, k) pairs: two thirds train, one third evaluated (never trained)."""
    pairs = [(f, k) for f in CODE_FAMILIES for k in range(1, 20)]
    _rng(seed, "code-split").shuffle(pairs)
    cut = 2 * len(pairs) // 3
    return pairs[:cut], pairs[cut:]


def _fn(family: tuple, k: int) -> tuple[str, str, str, Callable[[int], int]]:
    """(function name, what it returns, its code, its value as a function of x)."""
    name, what, expr, value = family
    return f"{name}_{k}", what.format(k=k), expr.format(k=k), lambda x: value(x, k)


def _options(rng: random.Random, right, wrong: list) -> tuple[list, int]:
    """Four options, the right one at a random place."""
    options = rng.sample([w for w in dict.fromkeys(wrong) if w != right], 3)
    at = rng.randrange(4)
    options.insert(at, right)
    return options, at


def _finance_question(rng: random.Random) -> tuple[str, str, float]:
    """(question, worked answer, the value asked for)."""
    kind = rng.randrange(3)
    if kind == 0:
        p, r, t = rng.choice([100, 200, 400, 500, 1000]), rng.randint(2, 9), rng.randint(1, 5)
        v = p * r * t / 100
        return (
            f"What is the simple interest on ${p} at {r}% per year for {t} year{'s' if t > 1 else ''}?",
            f"Interest = {p} x {r}% x {t} = ${v:g}.",
            v,
        )
    if kind == 1:
        a = rng.choice([20, 40, 50, 80, 100, 200])
        pct = rng.choice([-50, -25, -10, 10, 20, 25, 50, 75])
        b = a * (100 + pct) / 100
        return (
            f"A share price moves from ${a} to ${b:g}. What is the percent change?",
            f"({b:g} - {a}) / {a} = {pct}%. The percent change is {pct}%.",
            pct,
        )
    rev = rng.choice([100, 200, 400, 500])
    m = rng.choice([10, 20, 25, 40, 50])
    cost = rev * (100 - m) / 100
    return (
        f"Revenue is ${rev} and costs are ${cost:g}. What is the profit margin?",
        f"({rev} - {cost:g}) / {rev} = {m}%. The profit margin is {m}%.",
        m,
    )


def _finance_unit(question: str) -> str:
    return "$" if "interest" in question else "%"


def _math_problem(rng: random.Random, worded: bool) -> tuple[str, int, str]:
    """(problem, answer, the expression it asks for in LaTeX)."""
    a, b = rng.randint(2, 19), rng.randint(2, 9)
    if rng.random() < 0.5:
        v, expr = a + b, f"{a} + {b}"
        text = f"Sam has {a} apples and buys {b} more. How many apples does Sam have now?"
    else:
        v, expr = a * b, f"{a} \\times {b}"
        text = f"There are {a} boxes with {b} pens in each. How many pens are there?"
    return (text if worded else f"Compute ${expr}$."), v, expr


def train_records(domain: str, n: int, seed: int) -> list[dict]:
    """`n` training records of `domain` (code, medical, finance, math) in its training set's schema."""
    rng = _rng(seed, f"train-{domain}")
    out = []
    if domain == "code":
        pairs, _ = _code_pairs(seed)
        for i in range(n):
            name, what, code, _ = _fn(*pairs[i % len(pairs)])
            out.append(
                {
                    "instruction": f"Write a Python function {name}(x) that returns {what}.",
                    "input": "",
                    "output": f"```python\ndef {name}(x):\n    return {code}\n```",
                }
            )
    elif domain == "medical":
        facts = [
            (cat, asks[0], c, a, list(table.values())) for cat, asks, table in MEDICAL_FACTS for c, a in table.items()
        ]
        for i in range(n):
            _, ask, c, a, pool = facts[i % len(facts)]
            options, at = _options(rng, a, pool)
            listed = "\n".join(f"{LETTERS[j]}. {o}" for j, o in enumerate(options))
            out.append(
                {
                    "instruction": "Please answer with one of the options.",
                    "input": f"{ask.format(c=c)}\n{listed}",
                    "output": f"{LETTERS[at]}: {a}",
                }
            )
    elif domain == "finance":
        for _ in range(n):
            q, worked, _ = _finance_question(rng)
            out.append({"instruction": q, "input": "", "output": worked})
    elif domain == "math":
        for i in range(n):
            problem, v, expr = _math_problem(rng, worded=i % 2 == 0)
            out.append(
                {"instruction": problem, "input": "", "output": f"${expr} = {v}$, so the answer is $\\boxed{{{v}}}$."}
            )
    else:
        raise ValueError(f"unknown domain {domain!r}; known: code, medical, finance, math")
    return out


def eval_records(name: str, n: int, seed: int) -> list[dict]:
    """`n` scored records of benchmark `name` in its public schema, after its shots (the loader takes a
    local file's first rows as shots: mbpp 3, medqa and medmcqa 1)."""
    rng = _rng(seed, f"eval-{name}")
    if name in ("humaneval", "mbpp"):
        _, held = _code_pairs(seed)
        half = len(held) // 2
        pairs = held[:half] if name == "humaneval" else held[half:]
        out = []
        shots = 3 if name == "mbpp" else 0  # their functions are not scored; scored ones repeat past 16
        for i in range(n + shots):
            fname, what, code, f = _fn(*pairs[i if i < shots else shots + (i - shots) % (len(pairs) - shots)])
            xs = (3, 10, -4)
            if name == "humaneval":
                asserts = "".join(f"    assert candidate({x}) == {f(x)}\n" for x in xs)
                out.append(
                    {
                        "task_id": f"Synthetic/{i}",
                        "prompt": f'def {fname}(x):\n    """Return {what}."""\n',
                        "test": f"def check(candidate):\n{asserts}",
                        "entry_point": fname,
                    }
                )
            else:
                out.append(
                    {
                        "task_id": i,
                        "prompt": f"Write a function {fname}(x) that returns {what}.",
                        "code": f"def {fname}(x):\n    return {code}",
                        "test_imports": [],
                        "test_list": [f"assert {fname}({x}) == {f(x)}" for x in xs],
                    }
                )
        return out
    if name in ("medqa", "medmcqa"):
        facts = [
            (cat, asks[1], c, a, list(table.values())) for cat, asks, table in MEDICAL_FACTS for c, a in table.items()
        ]
        out = []
        shot = facts.pop(rng.randrange(len(facts)))  # its fact is not scored; scored facts repeat past 17
        for i in range(n + 1):
            cat, ask, c, a, pool = shot if i == 0 else facts[(i - 1) % len(facts)]
            options, at = _options(rng, a, pool)
            q = ask.format(c=c)
            if name == "medqa":
                out.append(
                    {
                        "question": q,
                        "answer": a,
                        "answer_idx": LETTERS[at],
                        "options": dict(zip(LETTERS, options)),
                        "meta_info": cat,
                    }
                )
            else:
                out.append(
                    {"question": q, **{f"op{x}": o for x, o in zip("abcd", options)}, "cop": at, "subject_name": cat}
                )
        return out
    if name in ("fineval", "financeiq"):
        out = []
        for _ in range(n):
            q, _, v = _finance_question(rng)
            unit = _finance_unit(q)
            shown = [f"${x:g}" if unit == "$" else f"{x:g}%" for x in (v, v * 2, v / 2, v + 10, v - 5, v * 3)]
            options, at = _options(rng, shown[0], shown[1:])
            if name == "fineval":
                out.append({"question": q, **dict(zip(LETTERS, options)), "answer": LETTERS[at]})
            else:
                out.append({"Question": q, **dict(zip(LETTERS, options)), "Answer": LETTERS[at]})
        return out
    if name in ("gsm8k", "math"):
        out = []
        for _ in range(n):
            problem, v, expr = _math_problem(rng, worded=name == "gsm8k")
            if name == "gsm8k":
                worked = expr.replace(" \\times ", " * ")
                out.append({"question": problem, "answer": f"{worked} = {v}\n#### {v}"})
            else:
                solution = f"${expr} = \\boxed{{{v}}}$"
                out.append({"problem": problem, "solution": solution, "level": "Level 1", "type": "x"})
        return out
    raise ValueError(f"unknown benchmark {name!r}")


DOMAINS = ("code", "medical", "finance", "math")
EVALS = ("humaneval", "mbpp", "medqa", "medmcqa", "fineval", "financeiq", "gsm8k", "math")


def write_board(folder: Path | str, n_train: int, n_eval: int, seed: int) -> tuple[list[str], dict[str, str]]:
    """Write the four training sets (folder/train/<domain>.jsonl) and the eight evaluations
    (folder/eval/<benchmark>.jsonl); returns (the training files in the board's client order,
    {benchmark: file})."""
    folder = Path(folder)

    def put(records: list[dict], path: Path) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return str(path)

    train = [put(train_records(d, n_train, seed), folder / "train" / f"{d}.jsonl") for d in DOMAINS]
    return train, {b: put(eval_records(b, n_eval, seed), folder / "eval" / f"{b}.jsonl") for b in EVALS}
