"""Small records in the real hub schemas of MATH, DeepMath-103K, MedQA and MedMCQA, malformed rows included.

Each builder returns (records, number of valid rows, {reason: count} of the malformed ones).
"""

from __future__ import annotations

MATH_TYPES = [
    "Algebra",
    "Counting & Probability",
    "Geometry",
    "Intermediate Algebra",
    "Number Theory",
    "Prealgebra",
    "Precalculus",
]


def math_records(per_type: int = 12):
    recs = []
    for t, subject in enumerate(MATH_TYPES):
        for i in range(per_type):
            recs.append(
                {
                    "problem": f"[{subject} #{i}] Compute $\\frac{{{i + 1}}}{{{t + 2}}} \\cdot {t + 2}$.",
                    "level": f"Level {1 + i % 5}",
                    "type": subject,
                    "solution": f"Cancel the {t + 2}s: $\\boxed{{\\dfrac{{\\sqrt{{{(i + 1) ** 2}}}}}{{1}}}}$.",
                }
            )
    bad = [
        {"problem": "", "level": "Level 1", "type": "Algebra", "solution": "$\\boxed{1}$"},  # empty_prompt
        {"problem": "No boxed answer.", "level": "Level 2", "type": "Algebra", "solution": "It is 3."},
        {"problem": "Truncated.", "level": "Level 2", "type": "Geometry", "solution": "So $\\boxed{\\frac{1}{2"},
        {"problem": "No subject.", "level": "Level 3", "type": None, "solution": "$\\boxed{4}$"},
    ]
    return recs + bad, len(recs), {"empty_prompt": 1, "missing_answer": 2, "missing_topic": 1}


DEEPMATH_AREAS = [
    "Algebra",
    "Calculus",
    "Discrete Mathematics",
    "Geometry",
    "Number Theory",
    "Precalculus",
    "Applied Mathematics",
]


def deepmath_records(per_area: int = 20):
    recs = []
    for a, area in enumerate(DEEPMATH_AREAS):
        for i in range(per_area):
            recs.append(
                {
                    "question": f"[{area} #{i}] Evaluate {i} + {a}.",
                    "final_answer": str(i + a),
                    "difficulty": 5.0 + (i % 4) * 0.5,
                    "topic": f"Mathematics -> {area} -> Subfield {i % 3}",
                    "r1_solution_1": "...",
                    "r1_solution_2": "...",
                    "r1_solution_3": "...",
                }
            )
    bad = [
        {
            "question": "   ",
            "final_answer": "1",
            "difficulty": 5.0,
            "topic": "Mathematics -> Algebra",
            "r1_solution_1": "",
            "r1_solution_2": "",
            "r1_solution_3": "",
        },
        {
            "question": "No answer.",
            "final_answer": None,
            "difficulty": 6.0,
            "topic": "Mathematics -> Calculus",
            "r1_solution_1": "",
            "r1_solution_2": "",
            "r1_solution_3": "",
        },
        {
            "question": "No topic.",
            "final_answer": "2",
            "difficulty": 6.0,
            "topic": "",
            "r1_solution_1": "",
            "r1_solution_2": "",
            "r1_solution_3": "",
        },
    ]
    return recs + bad, len(recs), {"empty_prompt": 1, "missing_answer": 1, "missing_topic": 1}


def medqa_records(n: int = 40):
    recs = []
    for i in range(n):
        recs.append(
            {
                "question": f"A {20 + i}-year-old presents with finding {i}. Most likely diagnosis?",
                "answer": f"Diagnosis {i % 4}",
                "answer_idx": "ABCD"[i % 4],
                "options": {k: f"Diagnosis {j}" for j, k in enumerate("ABCD")},
                "meta_info": "step1" if i % 2 else "step2&3",
            }
        )
    bad = [
        {
            "question": "Bad answer letter?",
            "answer": "x",
            "answer_idx": "E",
            "options": {k: f"o{j}" for j, k in enumerate("ABCD")},
            "meta_info": "step1",
        },
        {
            "question": "Missing option D?",
            "answer": "x",
            "answer_idx": "A",
            "options": {"A": "a", "B": "b", "C": "c", "D": None},
            "meta_info": "step1",
        },
    ]
    return recs + bad, len(recs), {"missing_answer": 1, "empty_prompt": 1}


MEDMCQA_SUBJECTS = ["Anatomy", "Physiology", "Pharmacology", "Pathology", "Surgery", "Medicine"]


def medmcqa_records(per_subject: int = 15):
    recs = []
    for s, subject in enumerate(MEDMCQA_SUBJECTS):
        for i in range(per_subject):
            recs.append(
                {
                    "id": f"{s}-{i}",
                    "question": f"[{subject}] Which structure {i}?",
                    "opa": "first",
                    "opb": "second",
                    "opc": "third",
                    "opd": "fourth",
                    "cop": (i + s) % 4,
                    "choice_type": "single",
                    "exp": None,
                    "subject_name": subject,
                    "topic_name": f"t{i % 3}",
                }
            )
    bad = [
        {
            "id": "u",
            "question": "Unlabelled (test split)?",
            "opa": "a",
            "opb": "b",
            "opc": "c",
            "opd": "d",
            "cop": -1,
            "choice_type": "single",
            "exp": None,
            "subject_name": "Anatomy",
            "topic_name": None,
        },
        {
            "id": "v",
            "question": "No subject?",
            "opa": "a",
            "opb": "b",
            "opc": "c",
            "opd": "d",
            "cop": 2,
            "choice_type": "single",
            "exp": None,
            "subject_name": None,
            "topic_name": None,
        },
    ]
    return recs + bad, len(recs), {"missing_answer": 1, "missing_topic": 1}


def write(records, path):
    """Write records as .jsonl or .parquet (by suffix), the two formats the loaders read."""
    import json
    from pathlib import Path

    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def board_eval_records(n: int = 6) -> dict[str, list[dict]]:
    """A few short records per FedSRD board benchmark, in each one's public schema (a benchmark with
    shots gets them first: the loader takes a local file's first `shots` rows as its shots)."""
    he = [
        {
            "task_id": f"HumanEval/{i}",
            "prompt": f'def add{i}(a, b):\n    """a + b + {i}"""\n',
            "test": f"def check(f):\n    assert f(1, 2) == {3 + i}\n",
            "entry_point": f"add{i}",
        }
        for i in range(n)
    ]
    mbpp = [
        {
            "task_id": i,
            "prompt": f"Add {i} to x.",
            "code": f"def plus{i}(x):\n    return x + {i}",
            "test_imports": [],
            "test_list": [f"assert plus{i}(1) == {1 + i}"],
        }
        for i in range(n + 3)
    ]
    medqa = [
        {
            "question": f"Case {i}: best drug?",
            "answer": f"drug {i % 4}",
            "answer_idx": "ABCD"[i % 4],
            "options": {k: f"drug {j}" for j, k in enumerate("ABCD")},
            "meta_info": "step1",
        }
        for i in range(n + 1)
    ]
    medmcqa = [
        {
            "question": f"Nerve {i}?",
            "opa": "ulnar",
            "opb": "radial",
            "opc": "median",
            "opd": "axillary",
            "cop": i % 4,
            "subject_name": "Anatomy",
        }
        for i in range(n + 1)
    ]
    fineval = [
        {"id": i, "question": f"利率 {i}?", "A": "1", "B": "2", "C": "3", "D": "4", "answer": "ABCD"[i % 4]}
        for i in range(n)
    ]
    financeiq = [
        {"Question": f"税 {i}?", "A": "甲", "B": "乙", "C": "丙", "D": "丁", "Answer": "DCBA"[i % 4]} for i in range(n)
    ]
    gsm8k = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i:,}"} for i in range(n)]
    math = [
        {"problem": f"Compute ${i}^2$.", "solution": f"It is $\\boxed{{{i * i}}}$.", "level": "Level 1", "type": "x"}
        for i in range(n)
    ]
    return {
        "humaneval": he,
        "mbpp": mbpp,
        "medqa": medqa,
        "medmcqa": medmcqa,
        "fineval": fineval,
        "financeiq": financeiq,
        "gsm8k": gsm8k,
        "math": math,
    }


def board_eval_files(folder) -> dict[str, str]:
    """board_eval_records written as one .jsonl file per benchmark: {name: path}."""
    from pathlib import Path

    return {k: str(write(v, Path(folder) / f"{k}.jsonl")) for k, v in board_eval_records().items()}
