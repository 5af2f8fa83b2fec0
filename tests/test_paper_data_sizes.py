"""The paper's datasets, loaded from the hub (stood in for by records of the hub's real row counts), hold
enough rows for the split of each preset (appendix B.1)."""

import pytest

import pubswap.data.records as records
from pubswap.config import DataConfig, FederationConfig
from pubswap.data.deepmath import HUB as DEEPMATH_HUB
from pubswap.data.math_hendrycks import HUB as MATH_HUB
from pubswap.data.math_hendrycks import SUBJECTS
from pubswap.data.medical import MEDMCQA_HUB, MEDQA_HUB
from pubswap.data.sources import load_source
from pubswap.data.split import dirichlet_split
from pubswap.presets import DATASETS

# rows per (hub dataset, split) on the Hugging Face hub
HUB_ROWS = {
    (MATH_HUB, "train"): 7_500,
    (MATH_HUB, "test"): 5_000,
    (DEEPMATH_HUB, "train"): 103_022,
    (MEDQA_HUB, "train"): 10_178,
    (MEDMCQA_HUB, "train"): 182_822,
}


def fake_record(source: str, i: int, config: str | None) -> dict:
    if source == MATH_HUB:
        return {"problem": f"p{i}", "solution": "$\\boxed{1}$", "type": config, "level": "Level 1"}
    if source == DEEPMATH_HUB:
        return {"question": f"q{i}", "final_answer": "1", "topic": f"Mathematics -> Area{i % 7} -> x"}
    if source == MEDQA_HUB:
        return {"question": f"q{i}", "options": dict(zip("ABCD", "abcd")), "answer_idx": "A", "meta_info": "step1"}
    return {"question": f"q{i}", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "cop": 0, "subject_name": f"S{i % 6}"}


@pytest.fixture
def hub(monkeypatch):
    reads = []

    def load_records(source, split="train", config=None):
        reads.append((source, split, config))
        n = HUB_ROWS[(source, split)]
        if source == MATH_HUB:  # one config per subject: its share of the split
            k = SUBJECTS.index(config)
            n = n // len(SUBJECTS) + (k < n % len(SUBJECTS))
        return [fake_record(source, i, config) for i in range(n)]

    monkeypatch.setattr(records, "load_records", load_records)
    return reads


@pytest.mark.parametrize("dataset", sorted(DATASETS))
def test_each_paper_dataset_has_the_rows_its_preset_splits(hub, dataset):
    preset = DATASETS[dataset]
    data = DataConfig(**preset)
    clients = FederationConfig().num_clients  # the paper's 4
    needed = clients * data.per_client + data.public_size + data.test_size
    rows, report = load_source(data, needed, seed=0)
    assert report.total_rejected == 0
    assert len(rows) >= needed, f"{dataset}: {len(rows)} rows < {needed}"
    split = dirichlet_split(
        rows, clients, data.per_client, data.dirichlet_alpha, data.public_size, data.test_size, seed=0
    )
    assert [len(c) for c in split.clients] == [data.per_client] * clients
    assert (len(split.public), len(split.test)) == (data.public_size, data.test_size)


def test_math_from_the_hub_is_train_plus_test(hub):
    rows, _ = load_source(DataConfig(**DATASETS["math"]), 12_500, seed=0)
    assert len(rows) == 12_500 == 4 * 2_500 + 1_250 + 1_250  # exactly the paper's split, nothing left over
    assert {(split, config) for _, split, config in hub} == {(s, c) for s in ("train", "test") for c in SUBJECTS}
