"""A malformed data file stops the driver with one line naming the file (and line), exit 2, before
anything is written into run_dir or Ray is started (issue 13, item 3)."""

from __future__ import annotations

import json

import pytest

from jobs.train import main

GOOD = {"problem": "What is 1 + 1?", "solution": "It is $\\boxed{2}$.", "type": "Algebra", "level": "Level 1"}


def run(tiny_model_dir, data_file, run_dir) -> list[str]:
    code = main(
        [
            f"model.path={tiny_model_dir}",
            "data.source=math",
            f"data.paths=[{data_file}]",
            "federation.num_clients=2",
            "grpo.b=1",
            "data.per_client=2",
            "data.public_size=1",
            "data.test_size=1",
            f"run_dir={run_dir}",
        ]
    )
    assert code == 2
    return code


@pytest.mark.parametrize(
    "name, content, expected",
    [
        (
            "bad.jsonl",
            "\n".join([json.dumps(GOOD), json.dumps(GOOD), '{"problem": "x", "solution": ', json.dumps(GOOD)]),
            "bad.jsonl: line 3: bad JSON",
        ),
        ("list.jsonl", json.dumps(GOOD) + "\n[1, 2]\n", "list.jsonl: line 2: not a JSON object"),
        ("short.jsonl", json.dumps(GOOD) + "\n", "1 rows are too few: 2 clients x 2 + 1 public + 1 test = 6"),
        ("junk.parquet", "this is not parquet", "junk.parquet: not a readable parquet file"),
    ],
)
def test_malformed_data_file_is_one_line_and_nothing_is_written(
    tiny_model_dir, tmp_path, capsys, name, content, expected
):
    data = tmp_path / name
    data.write_text(content)
    run_dir = tmp_path / "runs" / "r"
    run(tiny_model_dir, data, run_dir)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("data error: ") and expected in err[0], err
    assert "Traceback" not in err[0] and not run_dir.exists()
