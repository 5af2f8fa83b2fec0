"""reasoning-gym as a task source: any of its procedural datasets, with per-task settings, each scored
by its own verifier.

`data.tasks` names the tasks: a list of names (reasoning-gym's default settings) or a mapping
name -> settings, e.g. `{basic_arithmetic: {min_terms: 2, max_terms: 2, operators: ["+", "-"]}}`.
Names and settings are checked when the config is loaded (`check_tasks`): an unknown name is an
error listing the valid ones; a setting the task's config class rejects is an error naming it.

Every row keeps a reference to the entry it came from (`ref`: task, dataset size, index). Datasets
are seeded and procedural, so the reward (`ReasoningGymReward`) rebuilds the entry from the
reference and scores the answer extracted in the asked format (the last `\\boxed{}`) with the
dataset's own `score_answer(answer, entry)`: no metadata travels with the rows.

The prompt shows the answer format with one example of the same task (a one-shot chat turn whose
answer is just `\\boxed{...}`): small instruct models then answer in the format often enough for the
strict reward to give a signal (benchmarks/reward_modes.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pubswap.data.answers import MAX_CHARS, last_boxed
from pubswap.data.rows import Row, RowReport, validate_rows
from pubswap.seeding import derive_seed

INSTRUCTION = "Put the final answer in \\boxed{}."
REF_PREFIX = "reasoning_gym:"


def task_settings(tasks: Sequence[str] | Mapping[str, Mapping | None]) -> dict[str, dict]:
    """`data.tasks` as {name: settings}: a list means default settings for each name."""
    if isinstance(tasks, Mapping):
        return {str(k): dict(v or {}) for k, v in tasks.items()}
    return {str(t): {} for t in tasks}


def known_tasks() -> list[str]:
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def check_tasks(tasks) -> str | None:
    """None if every task name and its settings are valid, else the one-line reason."""
    from reasoning_gym.factory import DATASETS

    settings = task_settings(tasks)
    if not settings:
        return "must name at least one task"
    for name, kwargs in settings.items():
        if name not in DATASETS:
            return f"unknown reasoning-gym task {name!r}; valid names: {', '.join(known_tasks())}"
        _, config_cls = DATASETS[name]
        try:
            config = config_cls(**kwargs)
            if hasattr(config, "validate"):
                config.validate()
        except (TypeError, ValueError, AssertionError) as e:
            return f"{name}: invalid settings {kwargs}: {e}"
    return None


def _dataset(name: str, settings: Mapping, size: int, seed: int):
    import reasoning_gym

    return reasoning_gym.create_dataset(name, size=size, seed=derive_seed(seed, "rg", name) % 2**31, **settings)


def _example(name: str, settings: Mapping, seed: int) -> dict:
    """The task's one-shot example: an entry of its own seeded dataset, the same whatever the row count;
    a row that happens to equal it would only be seen with its own answer shown."""
    import reasoning_gym

    return reasoning_gym.create_dataset(name, size=1, seed=derive_seed(seed, "rg-example", name) % 2**31, **settings)[0]


def format_prompt(question: str) -> str:
    return f"{question.strip()}\n{INSTRUCTION}"


def one_shot(question: str, answer: str) -> list[dict]:
    """The chat turns shown before each prompt of a task: one solved example in the asked format."""
    return [
        {"role": "user", "content": format_prompt(question)},
        {"role": "assistant", "content": f"\\boxed{{{answer}}}"},
    ]


def reasoning_gym_rows(tasks, size_per_task: int, seed: int) -> tuple[list[Row], RowReport]:
    """`size_per_task` rows of each task (topic = task name), with their one-shot example and entry
    reference; deterministic in `seed`."""
    problem = check_tasks(tasks)
    if problem:
        raise ValueError(f"data.tasks: {problem}")
    raw = []
    for name, kwargs in task_settings(tasks).items():
        ds = _dataset(name, kwargs, size_per_task, seed)
        example = _example(name, kwargs, seed)
        context = tuple(one_shot(example["question"], example["answer"]))
        for i in range(size_per_task):
            item = ds[i]
            raw.append(
                {
                    "prompt": format_prompt(item["question"]),
                    "answer": item["answer"],
                    "topic": name,
                    "ref": f"{REF_PREFIX}{name}:{size_per_task}:{i}",
                    "context": context,
                }
            )
    return validate_rows(raw)


class ReasoningGymReward:
    """reward(response, answer, ref): the task's own `score_answer` on the response's last `\\boxed{}`
    (strict) or, lenient, on its last line when nothing is boxed. Entries are rebuilt from `ref`."""

    def __init__(self, tasks, seed: int, lenient: bool = False):
        self.settings, self.seed, self.lenient = task_settings(tasks), seed, lenient
        self._datasets: dict[tuple[str, int], object] = {}

    def __call__(self, response: str, answer: str, ref: str = "") -> float:
        if not isinstance(response, str) or not ref.startswith(REF_PREFIX):
            return 0.0
        name, size, index = ref[len(REF_PREFIX) :].rsplit(":", 2)
        given = last_boxed(response[-MAX_CHARS:])
        if given is None and self.lenient:
            lines = [ln for ln in response.strip().splitlines() if ln.strip()]
            given = lines[-1] if lines else None
        if given is None:
            return 0.0
        key = (name, int(size))
        if key not in self._datasets:
            self._datasets[key] = _dataset(name, self.settings[name], int(size), self.seed)
        ds = self._datasets[key]
        entry = ds[int(index)]
        try:
            return float(ds.score_answer(given.strip(), entry) >= 1.0)
        except Exception:  # a verifier that chokes on a malformed answer: the answer is wrong
            return 0.0
