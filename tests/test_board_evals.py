"""The FedSRD board's eight evaluations (pubswap/data/board_evals.py) from fixture files in each
benchmark's public schema: rows, gold answers, the board's shot counts, the scoring of each kind, and
the board's average."""

import pytest
from dataset_fixtures import board_eval_files, board_eval_records, write

from pubswap.config import ConfigError, from_dict
from pubswap.data.board_evals import BENCHMARKS, in_domain_average, load_benchmark
from pubswap.data.rewards import make_benchmark_reward
from pubswap.data.rows import DataError


def test_every_benchmark_loads_with_the_boards_shots_taken_from_the_files_head(tmp_path):
    files, records = board_eval_files(tmp_path), board_eval_records()
    shots = {name: b.shots for name, b in BENCHMARKS.items()}
    assert shots == {
        "humaneval": 0,
        "mbpp": 3,
        "medqa": 1,
        "medmcqa": 1,
        "fineval": 0,
        "financeiq": 0,
        "gsm8k": 0,
        "math": 0,
    }
    for name, path in files.items():
        rows, report = load_benchmark(name, path)
        assert len(rows) == len(records[name]) - shots[name] and not report.rejected, name
        # the shots are earlier (question, worked answer) turns, and not scored themselves
        assert len(rows[0].context) == 2 * shots[name], name
        assert all(r.context == rows[0].context for r in rows)
        scored_prompts = {r.prompt for r in rows}
        assert not any(t["content"] in scored_prompts for t in rows[0].context if t["role"] == "user"), name
    mbpp, _ = load_benchmark("mbpp", files["mbpp"])
    assert mbpp[0].context[1]["content"] == "```python\ndef plus0(x):\n    return x + 0\n```"
    assert "Add 3 to x." in mbpp[0].prompt
    medqa, _ = load_benchmark("medqa", files["medqa"])
    assert medqa[0].context[1]["content"] == "A"  # the shot's answer: its letter
    assert medqa[0].answer == "B" and medqa[0].choices == ("A", "B", "C", "D")
    assert medqa[0].prompt.endswith("Answer with the letter of the correct option.") and "boxed" not in medqa[0].prompt
    for name in ("fineval", "financeiq"):
        rows, _ = load_benchmark(name, files[name])
        assert [r.answer for r in rows[:4]] == (["A", "B", "C", "D"] if name == "fineval" else ["D", "C", "B", "A"])
        assert rows[1].choices == ("A", "B", "C", "D") and "\nB. " in rows[1].prompt
    gsm, _ = load_benchmark("gsm8k", files["gsm8k"])
    assert [r.answer for r in gsm] == ["0", "2", "4", "6", "8", "10"]  # after ####, thousands separators dropped
    math, _ = load_benchmark("math", files["math"])
    assert math[3].answer == "9" and "\\boxed{}" in math[3].prompt
    assert len(load_benchmark("math", files["math"], limit=2)[0]) == 2


def test_a_benchmark_without_enough_rows_for_its_shots_or_an_unknown_one_is_one_clear_error(tmp_path):
    path = write(board_eval_records()["mbpp"][:3], tmp_path / "mbpp.jsonl")  # the 3 shots and nothing to score
    with pytest.raises(DataError, match="eval_suite.mbpp: no usable rows"):
        load_benchmark("mbpp", str(path))
    path = write(board_eval_records()["mbpp"][:2], tmp_path / "two.jsonl")
    with pytest.raises(DataError, match="eval_suite.mbpp: 3 shot"):
        load_benchmark("mbpp", str(path))
    with pytest.raises(DataError, match="unknown benchmark 'humaneva'"):
        load_benchmark("humaneva", str(path))
    with pytest.raises(ConfigError, match=r"eval_suite: unknown benchmark\(s\) \['gsm9k'\]"):
        from_dict({"eval_suite": ["gsm8k", "gsm9k"]})
    assert from_dict({"eval_suite": ["gsm8k", "math"]}).eval_suite == {"gsm8k": "", "math": ""}
    with pytest.raises(ConfigError, match="eval_suite: .*server-coordinated"):
        from_dict({"eval_suite": ["gsm8k"], "federation": {"method": "dsgd-lora"}})


def test_sampled_benchmarks_are_scored_by_running_the_code_or_verifying_the_boxed_answer(tmp_path):
    files = board_eval_files(tmp_path)
    code, math = make_benchmark_reward("code"), make_benchmark_reward("math")
    (he, *_), _ = load_benchmark("humaneval", files["humaneval"])
    assert code("```python\ndef add0(a, b):\n    return a + b\n```", he) == 1.0
    assert code("```python\n    return a + b\n```", he) == 1.0  # the body after the stub
    assert code("```python\ndef add0(a, b):\n    return a - b\n```", he) == 0.0
    assert code("def add0(a, b):\n    return a + b", he) == 0.0  # no code block
    mbpp, _ = load_benchmark("mbpp", files["mbpp"])
    assert code("```python\ndef plus3(x):\n    return x + 3\n```", mbpp[0]) == 1.0
    assert code("```python\ndef plus3(x):\n    return x + 4\n```", mbpp[0]) == 0.0
    gsm, _ = load_benchmark("gsm8k", files["gsm8k"])
    assert math("so \\boxed{10}", gsm[5]) == 1.0 and math("so \\boxed{11}", gsm[5]) == 0.0
    assert math("10", gsm[5]) == 0.0  # strict: the asked-for format only
    with pytest.raises(ValueError):
        make_benchmark_reward("choice")


def test_the_average_is_the_boards_plain_mean_of_its_eight_columns():
    # FedSRD on Qwen2-7B, the board's first row: its Average column is 61.19
    row = [68.29, 36.19, 77.77, 78.94, 64.55, 48.48, 69.93, 45.36]
    assert round(in_domain_average(dict(zip(BENCHMARKS, row))), 2) == 61.19
    with pytest.raises(ValueError):
        in_domain_average({})


def test_choice_benchmarks_are_scored_by_the_evaluated_adapters_most_likely_letter(tiny_model_dir, tmp_path):
    """ClientCore.evaluate(scoring="choice") on MedQA rows with their shot, under a strongly perturbed
    adapter: per row, the reward is whether the most likely letter under that adapter (recomputed here
    with a trainer of our own) is the gold one."""
    import torch
    from ray_helpers import tiny_config

    from actors.client import ClientCore
    from pubswap.algorithms.label_words import accuracy_rewards
    from pubswap.config import GRPOConfig, LoraConfig
    from pubswap.data.prompt_length import prompt_ids
    from pubswap.learner.trainer import GRPOTrainer, Sample

    records = board_eval_records(n=24)
    rows, _ = load_benchmark("medqa", str(write(records["medqa"], tmp_path / "medqa.jsonl")))
    cfg = tiny_config(tiny_model_dir, tmp_path / "run", "model.max_prompt_len=400", "federation.num_clients=1")
    core = ClientCore(cfg.to_dict(), {0: []}, str(tiny_model_dir))
    initial = {k: v.clone() for k, v in core.trainer.adapter().items()}  # B = 0: the base model
    gen = torch.Generator().manual_seed(0)
    adapter = {k: v + 0.5 * torch.randn(v.shape, generator=gen) for k, v in initial.items()}
    got = core.evaluate(rows, 1, adapter=adapter, scoring="choice")["rewards"]
    base = core.evaluate(rows, 1, scoring="choice")["rewards"]

    t = GRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=8, alpha=16), GRPOConfig(), dtype="float32")
    tok = t.tokenizer

    def predicted(weights):
        t.set_adapter(weights)
        samples = [
            Sample(
                tuple(prompt_ids(tok, r.prompt, r.context)), tuple(tok(c, add_special_tokens=False)["input_ids"]), 0.0
            )
            for r in rows
            for c in r.choices
        ]
        logp = t.sequence_logprobs(samples)
        return [logp[4 * i : 4 * i + 4] for i in range(len(rows))]

    def rewards(scores):
        return accuracy_rewards(scores, [r.choices for r in rows], [r.answer for r in rows])

    scores, base_scores = predicted(adapter), predicted(initial)
    assert got == rewards(scores)
    assert base == rewards(base_scores)
    # the adapter moves the picks (a tiny random model picks one letter for every row: A here, B unadapted)
    assert [max(range(4), key=s.__getitem__) for s in scores] != [max(range(4), key=s.__getitem__) for s in base_scores]
    assert got != base
