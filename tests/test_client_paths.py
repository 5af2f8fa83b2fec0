"""data.client_paths: each client actor reads its own rows from its own file; the driver reads only the
public and test rows (issue 31, item 5)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dataset_fixtures import write
from ray_helpers import ft_config, metrics, run_driver

from pubswap.config import ConfigError, DataConfig, load_config
from pubswap.data.client_rows import load_client_rows
from pubswap.data.rows import DataError
from pubswap.data.split import rows_sha256
from pubswap.run.checkpoint import latest_checkpoint

TYPES = ["Algebra", "Geometry", "Prealgebra"]


def math_file(path: Path, n: int, offset: int = 0, long_every: int = 0) -> Path:
    """n MATH-schema records with one-digit answers ("What is a+b?"); every `long_every`-th prompt is
    padded far past any small max_prompt_len."""
    records = []
    for i in range(offset, offset + n):
        a, b = i % 5, (i // 5) % 5
        pad = " Think it over carefully, step by step." * 20 if long_every and i % long_every == 0 else ""
        records.append(
            {
                "problem": f"What is {a}+{b}?{pad}",
                "level": "Level 1",
                "type": TYPES[i % 3],
                "solution": f"$\\boxed{{{a + b}}}$",
            }
        )
    return write(records, path)


def data_config():
    return DataConfig(source="math", per_client=6, test_size=2)


def words(row) -> int:
    return len(row.prompt.split())


def test_a_client_keeps_per_client_rows_of_its_file_seeded_by_run_and_client(tmp_path):
    path = math_file(tmp_path / "c.jsonl", 20, long_every=4)  # 5 long prompts, 15 usable
    data = data_config()
    rows, report = load_client_rows(data, str(path), 0, 7, words, max_len=20)
    assert len(rows) == 6 and all(words(r) <= 20 for r in rows)
    assert report.rejected["prompt_too_long"] == 5
    assert len({r.prompt for r in rows}) == 6
    again, _ = load_client_rows(data, str(path), 0, 7, words, max_len=20)
    assert rows_sha256(again) == rows_sha256(rows)  # a restarted actor reads the same rows
    others = [rows_sha256(load_client_rows(data, str(path), c, s, words, 20)[0]) for c, s in ((1, 7), (0, 8))]
    assert rows_sha256(rows) not in others  # another client, another run seed: another draw


def test_a_client_file_it_cannot_use_is_one_line_naming_the_client_and_the_file(tmp_path):
    data = data_config()
    few = math_file(tmp_path / "few.jsonl", 4)
    with pytest.raises(DataError) as e:
        load_client_rows(data, str(few), 1, 7, words, max_len=100)
    assert str(e.value).startswith("data.client_paths[1]: ") and str(few) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DataError, match=r"data.client_paths\[0\]: .*missing\.jsonl"):
        load_client_rows(data, str(tmp_path / "missing.jsonl"), 0, 7, words, max_len=100)


@pytest.mark.parametrize(
    "overrides, why",
    [
        (["data.client_paths=[a.jsonl]"], "one path per client"),
        (["data.source=reasoning_gym", "data.client_paths=[a, b]"], "one file or folder per client"),
        (["data.client_paths=[a, b]", "federation.method=centralized"], "pools every client's rows"),
    ],
)
def test_client_files_the_run_cannot_use_are_refused_naming_the_key(overrides, why, tmp_path):
    with pytest.raises(ConfigError, match=rf"data\.client_paths.*{why}"):
        load_config(None, [f"model.path={tmp_path}", "data.source=math", "federation.num_clients=2", *overrides])


def test_the_driver_splits_without_the_client_files(digit_model_dir, tmp_path):
    """The driver's split holds only the public and test rows: its client files do not even exist yet."""
    from jobs.train import build_split

    shared = math_file(tmp_path / "shared.jsonl", 12)
    cfg = ft_config(
        digit_model_dir,
        tmp_path / "run",
        "data.source=math",
        f"data.paths=[{shared}]",
        f"data.client_paths=[{tmp_path / 'nowhere0.jsonl'}, {tmp_path / 'nowhere1.jsonl'}]",
        "data.public_size=6",
        "data.test_size=4",
    )
    split = build_split(cfg, str(digit_model_dir))
    assert split.clients == [[], []] and (len(split.public), len(split.test)) == (6, 4)
    assert split.client_paths == (str(tmp_path / "nowhere0.jsonl"), str(tmp_path / "nowhere1.jsonl"))
    assert split.fingerprint(["a", "b"]) != split.fingerprint(["a", "c"])  # a client's rows are in the digest
    with pytest.raises(ValueError):
        split.fingerprint()


def alpaca_file(path: Path, domain: str, n: int) -> Path:
    """n Alpaca-schema records of one domain (every other one with an input)."""
    return write(
        [
            {
                "instruction": f"{domain} task {i}.",
                "input": f"x={i}" if i % 2 else "",
                "output": f"{domain} {i % 10}" if i % 3 else f"{domain} answer number {i}",  # some over 8 tokens
            }
            for i in range(n)
        ],
        path,
    )


def test_each_actor_reads_its_clients_file_and_a_changed_or_missing_file_is_refused(digit_model_dir, tmp_path):
    """A real run of the FedSRD board's shape (instruction tuning with sft in the Alpaca template, one
    domain per client): the digests the actors report are those of the rows drawn from each client's
    file, and client 0's first step trained the reference responses of that file's rows; the checkpoint's
    split digest covers them; a resume after a client's file changed is refused, and a missing client
    file is one line naming it (exit 2 both times)."""
    shared = write(
        [{"instruction": f"Say {i}.", "input": "", "output": str(i % 10), "domain": "mixed"} for i in range(14)],
        tmp_path / "shared.jsonl",
    )
    files = [alpaca_file(tmp_path / f"{d}.jsonl", d, 10) for d in ("code", "finance")]
    common = (
        "data.source=instruct",
        "objective=sft",
        "model.prompt_format=alpaca",
        "model.max_prompt_len=256",
        "model.max_response_len=8",
        f"data.paths=[{shared}]",
        f"data.client_paths=[{files[0]}, {files[1]}]",
        "data.per_client=8",
        "data.public_size=6",
        "data.test_size=8",
        "federation.method=fedavg-grpo",
    )
    cfg = ft_config(digit_model_dir, tmp_path / "run", *common, "federation.rounds=1")
    done = run_driver(cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    reported = dict(re.findall(r"client (\d): 8 \(sha256 ([0-9a-f]{12})\)", done.stdout))
    assert "topics of the public and test sets" in done.stdout and "client_0" not in done.stdout
    from jobs.train import build_split
    from pubswap.data.order import private_batch, private_steps_before
    from pubswap.data.prompt_length import prompt_ids

    tok = __import__("transformers").AutoTokenizer.from_pretrained(digit_model_dir)
    own = [
        load_client_rows(
            cfg.data,
            str(f),
            c,
            cfg.seed,
            lambda r: len(prompt_ids(tok, r.prompt, r.context, cfg.model.prompt_format)),
            cfg.model.max_prompt_len,
        )[0]
        for c, f in enumerate(files)
    ]
    expected = [rows_sha256(rows) for rows in own]
    assert reported == {"0": expected[0][:12], "1": expected[1][:12]}, done.stdout[-2000:]
    assert {r.topic for r in own[0]} == {"code"} and {r.topic for r in own[1]} == {"finance"}
    step = metrics(cfg.run_dir)[0]["steps"][0]
    index = private_steps_before(cfg.federation, cfg.seed, 0, 1, 1)
    batch = [own[0][i] for i in private_batch(cfg.seed, 0, len(own[0]), cfg.grpo.b, index)]
    trained = next(c for c in step["clients"] if c["client"] == 0)["response_tokens"]
    cut = cfg.model.max_response_len  # the reference answer and EOS, cut at max_response_len
    assert trained == sum(min(cut, len(tok(r.answer, add_special_tokens=False)["input_ids"]) + 1) for r in batch)
    ckpt = latest_checkpoint(Path(cfg.run_dir) / "checkpoints")
    assert ckpt.state["split_sha256"] == build_split(cfg, str(digit_model_dir)).fingerprint(expected)

    alpaca_file(files[1], "finance", 12)  # client 1's file now holds other rows
    resumed = run_driver(ft_config(digit_model_dir, tmp_path / "run", *common, "federation.rounds=2"))
    assert resumed.returncode == 2, resumed.stderr[-3000:]
    assert "cannot resume" in resumed.stderr and "client file" in resumed.stderr
    assert latest_checkpoint(Path(cfg.run_dir) / "checkpoints").round == 1  # nothing written

    files[1].unlink()
    fresh = run_driver(ft_config(digit_model_dir, tmp_path / "fresh", *common))
    assert fresh.returncode == 2, fresh.stderr[-3000:]
    assert re.search(rf"data error: data.client_paths\[1\]: .*{re.escape(str(files[1]))}", fresh.stderr)
