"""The paper's datasets, loaded from fixture files in their real hub schemas, malformed rows included."""

from collections import Counter

import pytest
from dataset_fixtures import deepmath_records, math_records, medmcqa_records, medqa_records, write

from pubswap.config import ConfigError, load_config
from pubswap.data import dirichlet_split
from pubswap.data.deepmath import deepmath_rows, topic_area
from pubswap.data.math_hendrycks import math_rows
from pubswap.data.medical import medmcqa_rows, medqa_rows
from pubswap.data.records import load_records
from pubswap.data.rewards import choice_reward, last_boxed, math_reward
from pubswap.data.sources import load_source


@pytest.mark.parametrize(
    "solution,answer",
    [
        ("so $\\boxed{\\dfrac{\\sqrt{3}}{2}}$.", "\\dfrac{\\sqrt{3}}{2}"),  # nested braces, any depth
        ("$\\boxed{1}$ or rather $\\boxed{2}$", "2"),  # the last one
        ("\\fbox{7}", "7"),
        ("no box", None),
        ("\\boxed{\\frac{1}{2", None),
        ("\\boxed{ }", None),
        (None, None),
    ],
)
def test_last_boxed(solution, answer):
    assert last_boxed(solution) == answer


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_math_loader_maps_subjects_and_counts_bad_rows(tmp_path, fmt):
    records, valid, bad = math_records()
    rows, report = math_rows(load_records(str(write(records, tmp_path / f"math.{fmt}"))))
    assert len(rows) == report.kept == valid
    assert dict(report.rejected) == bad
    assert Counter(r.topic for r in rows) == {
        t: 12
        for t in [
            "Algebra",
            "Counting & Probability",
            "Geometry",
            "Intermediate Algebra",
            "Number Theory",
            "Prealgebra",
            "Precalculus",
        ]
    }
    first = rows[0]
    assert first.prompt.startswith("[Algebra #0] Compute") and first.prompt.endswith("within \\boxed{}.")
    assert first.answer == "\\dfrac{\\sqrt{1}}{1}"
    assert math_reward("The answer is $\\boxed{1}$.", first.answer) == 1.0  # the gold answer verifies


def test_deepmath_topic_area_subsample_and_bad_rows(tmp_path):
    records, valid, bad = deepmath_records()
    loaded = load_records(str(write(records, tmp_path / "deepmath.parquet")))
    rows, report = deepmath_rows(loaded)
    assert len(rows) == valid and dict(report.rejected) == bad
    assert Counter(r.topic for r in rows)["Discrete Mathematics"] == 20
    assert topic_area("Mathematics -> Calculus -> Integrals") == "Calculus" and topic_area("Algebra") == "Algebra"
    sub, _ = deepmath_rows(loaded, subsample=50, seed=3)
    assert len(sub) == 50 and sub == deepmath_rows(loaded, subsample=50, seed=3)[0]
    assert sub != deepmath_rows(loaded, subsample=50, seed=4)[0]
    assert set(sub) <= set(rows)


def test_medical_loaders_give_letters_and_subjects(tmp_path):
    qa, qa_valid, qa_bad = medqa_records()
    mc, mc_valid, mc_bad = medmcqa_records()
    qa_rows, qa_report = medqa_rows(load_records(str(write(qa, tmp_path / "medqa.jsonl"))))
    mc_rows, mc_report = medmcqa_rows(load_records(str(write(mc, tmp_path / "medmcqa.parquet"))))
    assert len(qa_rows) == qa_valid and dict(qa_report.rejected) == qa_bad
    assert len(mc_rows) == mc_valid and dict(mc_report.rejected) == mc_bad
    assert {r.topic for r in qa_rows} == {"USMLE step1", "USMLE step2&3"}
    assert {r.topic for r in mc_rows} == {"Anatomy", "Physiology", "Pharmacology", "Pathology", "Surgery", "Medicine"}
    row = mc_rows[1]  # Anatomy, i=1: cop = 1 -> "B"
    assert row.answer == "B" and "\nB. second\n" in row.prompt and row.prompt.endswith("in \\boxed{}.")
    assert choice_reward("The answer is \\boxed{B}", row.answer) == 1.0
    assert choice_reward("\\boxed{C}", row.answer) == 0.0


def test_sources_from_config_and_a_paper_shaped_split(tmp_path, capsys):
    records, _, _ = deepmath_records()
    path = write(records, tmp_path / "dm.jsonl")
    cfg = load_config(
        None,
        [
            f"model.path={tmp_path}",
            "data.source=deepmath",
            f"data.paths=[{path}]",
            "data.subsample=120",
            "data.per_client=20",
            "data.public_size=20",
            "data.test_size=20",
            "data.dirichlet_alpha=0.1",
            "data.reward=math",
        ],
    )
    rows, report = load_source(cfg.data, 0, cfg.seed)
    assert len(rows) == 120 and report.total_rejected == 3
    split = dirichlet_split(rows, 4, 20, 0.1, 20, 20, cfg.seed)
    assert [len(c) for c in split.clients] == [20] * 4 and len(split.public) == len(split.test) == 20
    with pytest.raises(ConfigError, match="data.paths: medical takes 2 path"):
        load_config(None, [f"model.path={tmp_path}", "data.source=medical", f"data.paths=[{path}]"])
    with pytest.raises(ConfigError, match="data.source"):
        load_config(None, [f"model.path={tmp_path}", "data.source=gsm8k"])


def test_missing_dataset_path_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="neither a local file or folder nor a hub id"):
        load_records("./no/such/file.parquet")


def test_non_mapping_records_are_counted_not_crashed_on():
    rows, report = medmcqa_rows([None, "text", medmcqa_records(1)[0][0]])
    assert len(rows) == 1 and report.rejected == {"not_a_mapping": 2}
