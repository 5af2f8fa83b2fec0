"""Over-long prompts are dropped before the split and counted, never cut (cutting drops the template's start)."""

import pytest
from ray_helpers import tiny_config
from transformers import AutoTokenizer

from jobs.train import build_split
from pubswap.data.prompt_length import drop_long_prompts, prompt_ids
from pubswap.data.rows import Row, RowReport


def test_an_over_long_prompt_is_counted_and_dropped(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = [
        Row("Calculate 1 + 2.", "3", "add"),
        Row("Calculate 1 + 2. " * 40, "3", "add"),
        Row("Calculate 4 + 4.", "8", "add"),
    ]
    lengths = [len(prompt_ids(tok, r.prompt)) for r in rows]
    count = lambda r: len(prompt_ids(tok, r.prompt, r.context))  # noqa: E731
    assert lengths[0] < 40 < lengths[1]
    report = RowReport(kept=3)
    kept = drop_long_prompts(rows, report, count, max_len=40)
    assert kept == [rows[0], rows[2]]
    assert report.kept == 2 and report.rejected["prompt_too_long"] == 1 and report.examples["prompt_too_long"] == [1]
    assert "prompt_too_long: 1" in str(report)
    # the limit counts the chat template: a prompt exactly at it is kept
    assert drop_long_prompts(rows[:1], RowReport(), count, lengths[0]) == rows[:1]


def test_the_driver_drops_long_prompts_before_splitting(tiny_model_dir, tmp_path, capsys):
    from pubswap.data.sources import load_source

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    length = lambda r: len(prompt_ids(tok, r.prompt, r.context))  # noqa: E731  (one-shot turns included)
    cfg = tiny_config(tiny_model_dir, tmp_path, "data.per_client=10")
    rows, _ = load_source(cfg.data, 200, cfg.seed)
    longest = {t: max(length(r) for r in rows if r.topic == t) for t in ("chain_sum", "basic_arithmetic")}
    short, long_ = sorted(longest, key=longest.get)
    assert longest[short] < min(length(r) for r in rows if r.topic == long_)  # the limit separates the tasks
    cfg = tiny_config(tiny_model_dir, tmp_path, f"model.max_prompt_len={longest[short]}", "data.per_client=10")
    split = build_split(cfg, str(tiny_model_dir))
    every = [r for part in (*split.clients, split.public, split.test) for r in part]
    assert max(length(r) for r in every) <= longest[short] and {r.topic for r in every} == {short}
    assert "prompt_too_long" in capsys.readouterr().out  # the data report names what was dropped


def test_a_model_without_a_chat_template_gets_plain_prompts(base_model_dir, tiny_model_dir):
    base = AutoTokenizer.from_pretrained(base_model_dir)
    context = [{"role": "user", "content": "Calculate 1 + 2."}, {"role": "assistant", "content": "\\boxed{3}"}]
    ids = prompt_ids(base, "Calculate 4 + 4.", context)  # auto
    assert base.decode(ids) == "Calculate 1 + 2.\n\\boxed{3}\n\nCalculate 4 + 4.\n"
    with pytest.raises(ValueError, match="model.prompt_format: chat"):
        prompt_ids(base, "Calculate 4 + 4.", prompt_format="chat")
    chat = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert "<|im_start|>" in chat.decode(prompt_ids(chat, "Calculate 4 + 4."))  # auto: its template
    assert chat.decode(prompt_ids(chat, "Calculate 4 + 4.", prompt_format="plain")) == "Calculate 4 + 4.\n"


def test_a_base_model_trains_and_one_that_asks_for_a_missing_template_is_refused(local_ray, base_model_dir, tmp_path):
    from ray_helpers import metrics, run_driver

    from jobs.train import train

    cfg = tiny_config(base_model_dir, tmp_path / "run", "federation.rounds=1", "model.max_response_len=1")
    train(cfg)
    (rec,) = metrics(tmp_path / "run")
    assert "pass@1" in rec and all(c["response_tokens"] > 0 for st in rec["steps"] for c in st["clients"])
    proc = run_driver(tiny_config(base_model_dir, tmp_path / "chat", "model.prompt_format=chat"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("config error: model.prompt_format: chat")
    assert not (tmp_path / "chat").exists()  # nothing written
