"""Over-long prompts are dropped before the split and counted, never cut (cutting drops the template's start)."""

from ray_helpers import tiny_config
from transformers import AutoTokenizer

from jobs.train import build_split
from pubswap.data.prompt_length import chat_prompt_ids, drop_long_prompts
from pubswap.data.rows import Row, RowReport


def test_an_over_long_prompt_is_counted_and_dropped(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = [
        Row("Calculate 1 + 2.", "3", "add"),
        Row("Calculate 1 + 2. " * 40, "3", "add"),
        Row("Calculate 4 + 4.", "8", "add"),
    ]
    lengths = [len(chat_prompt_ids(tok, r.prompt)) for r in rows]
    count = lambda r: len(chat_prompt_ids(tok, r.prompt, r.context))  # noqa: E731
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
    length = lambda r: len(chat_prompt_ids(tok, r.prompt, r.context))  # noqa: E731  (one-shot turns included)
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
