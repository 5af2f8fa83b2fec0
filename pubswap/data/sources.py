"""The dataset a run trains on, by `data.source`: one loader per source, all mapping to rows.

reasoning_gym  procedural offline tasks (the default; `data.tasks`)
math           MATH; data.paths = [file or folder] or [] for the hub
deepmath       DeepMath-103K; data.paths = [file or folder] or []; data.subsample (paper: 20000)
medical        MedQA + MedMCQA; data.paths = [medqa, medmcqa] or [] for the hub
sst2, rte, boolq   the decentralized leaderboard's classification tasks (label = answer, exact reward);
               data.paths = [file or folder] or [] for the hub
humaneval, mbpp    code generation scored by running the code (`code` reward, pubswap/data/code_tasks.py);
               data.paths = [file or folder] or [] for the hub
instruct       instruction tuning (Alpaca, GSM8K or MATH schema; objective sft): the FedSRD board's four
               domains, one per client with data.client_paths (pubswap/data/instructions.py);
               data.paths = [file or folder or hub id] or [] for the four sets together
"""

from __future__ import annotations

from pubswap.data.rows import Row, RowReport

SOURCES = ("reasoning_gym", "math", "deepmath", "medical", "sst2", "rte", "boolq", "humaneval", "mbpp", "instruct")
PATHS_PER_SOURCE = {
    "reasoning_gym": 0,
    "math": 1,
    "deepmath": 1,
    "medical": 2,
    "sst2": 1,
    "rte": 1,
    "boolq": 1,
    "humaneval": 1,
    "mbpp": 1,
    "instruct": 1,
}


def load_source(data, rows_needed: int, seed: int) -> tuple[list[Row], RowReport]:
    """Rows for `data` (a DataConfig); `rows_needed` sizes the procedural source."""
    paths = list(data.paths)
    if data.source == "reasoning_gym":
        from pubswap.data.reasoning_gym_tasks import reasoning_gym_rows

        # twice what is needed per task, so a skewed Dirichlet prior does not exhaust a topic at once
        return reasoning_gym_rows(data.tasks, -(-2 * rows_needed // len(data.tasks)), seed)
    if data.source == "math":
        from pubswap.data.math_hendrycks import load_math

        return load_math(paths[0] if paths else "")
    if data.source == "deepmath":
        from pubswap.data.deepmath import load_deepmath

        return load_deepmath(paths[0] if paths else "", data.subsample, seed)
    if data.source == "medical":
        from pubswap.data.medical import load_medical

        return load_medical(*(paths or ["", ""]))
    if data.source in ("sst2", "rte", "boolq"):
        from pubswap.data.classification import load_classification

        return load_classification(data.source, paths[0] if paths else "")
    if data.source in ("humaneval", "mbpp"):
        from pubswap.data.code_tasks import load_code

        return load_code(data.source, paths[0] if paths else "")
    if data.source == "instruct":
        from pubswap.data.instructions import load_instructions

        return load_instructions(paths[0] if paths else "")
    raise ValueError(f"unknown data.source {data.source!r}; known: {SOURCES}")
