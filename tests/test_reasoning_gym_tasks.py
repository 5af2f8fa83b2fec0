"""reasoning-gym as a task source: any task, per-task settings, its own verifier, checked at config load."""

from __future__ import annotations

from collections import Counter

import pytest

from pubswap.config import ConfigError, load_config
from pubswap.data.reasoning_gym_tasks import ReasoningGymReward, check_tasks, reasoning_gym_rows
from pubswap.data.rewards import make_row_reward

# outside the five tasks the project used to hard-code, with non-numeric answers
TASKS = {"word_sorting": {"min_words": 3, "max_words": 4}, "spell_backward": {}, "count_bits": {"max_n": 64}}


def test_any_task_is_loaded_with_its_settings_and_seeded():
    rows, report = reasoning_gym_rows(TASKS, size_per_task=6, seed=0)
    assert report.total_rejected == 0 and Counter(r.topic for r in rows) == {t: 6 for t in TASKS}
    assert reasoning_gym_rows(TASKS, 6, seed=0)[0] == rows
    assert reasoning_gym_rows(TASKS, 6, seed=1)[0] != rows
    sorting = [r for r in rows if r.topic == "word_sorting"]
    assert all(3 <= len(r.answer.split(",")) <= 4 for r in sorting)  # the settings reached the generator
    for r in rows:
        assert r.prompt.endswith("Put the final answer in \\boxed{}.")
        # one solved example of the same task, the same for every row of the task
        (user, assistant) = r.context
        assert user["role"] == "user" and assistant["content"].startswith("\\boxed{")
        assert r.context == next(x.context for x in rows if x.topic == r.topic)


def test_the_tasks_own_verifier_scores_the_boxed_answer():
    rows, _ = reasoning_gym_rows(TASKS, size_per_task=6, seed=0)
    reward = ReasoningGymReward(TASKS, seed=0)
    for r in rows:
        assert reward(f"The answer is \\boxed{{{r.answer}}}", r.answer, r.ref) == 1.0, r
        assert reward(r.answer, r.answer, r.ref) == 0.0  # strict: not boxed
        assert reward("\\boxed{zzz 123}", r.answer, r.ref) == 0.0
    # word_sorting's verifier is its own (it accepts the words with other separators, math-verify would not)
    row = next(r for r in rows if r.topic == "word_sorting")
    spaced = ", ".join(w.strip() for w in row.answer.split(","))
    assert reward(f"\\boxed{{{spaced}}}", row.answer, row.ref) == 1.0
    # through the run's config: data.reward auto resolves to the task verifiers
    cfg = load_config(
        "configs/default.yaml",
        ["data.tasks={word_sorting: {min_words: 3, max_words: 4}, spell_backward: {}, count_bits: {max_n: 64}}"],
    )
    assert cfg.data.verifier == "reasoning_gym"
    fn = make_row_reward(cfg.data, cfg.seed)
    assert fn(f"\\boxed{{{rows[0].answer}}}", rows[0]) == 1.0


@pytest.mark.parametrize(
    "tasks, message",
    [
        ("[no_such_task]", "unknown reasoning-gym task 'no_such_task'; valid names: ab, acre"),
        ("{basic_arithmetic: {min_terms: 5, max_terms: 2}}", "basic_arithmetic: invalid settings"),
        ("{chain_sum: {colour: red}}", "chain_sum: invalid settings"),
    ],
)
def test_bad_task_names_and_settings_are_config_errors(tasks, message):
    with pytest.raises(ConfigError, match="data.tasks: " + message.replace("(", r"\(")):
        load_config("configs/default.yaml", [f"data.tasks={tasks}"])
    assert check_tasks(["chain_sum"]) is None


def test_unknown_task_stops_the_driver_before_anything_is_written(tmp_path, capsys):
    from jobs.train import main

    run_dir = tmp_path / "run"
    assert main(["--config", "configs/default.yaml", "data.tasks=[no_such_task]", f"run_dir={run_dir}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.tasks: unknown reasoning-gym task 'no_such_task'" in err[0]
    assert not run_dir.exists()
