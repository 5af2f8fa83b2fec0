"""Checkpoints are committed atomically and verified; a damaged newest one falls back to the previous."""

import json
import os

import pytest
import torch

from pubswap.config import RunConfig, resume_conflicts
from pubswap.lora import WEIGHTS_NAME, peft_lora_config
from pubswap.run import metrics_log
from pubswap.run.checkpoint import LATEST_NAME, CheckpointWarning, latest_checkpoint, round_dir, save_checkpoint, verify
from pubswap.run.faults import ENV, maybe_crash


def adapter(value: float):
    return {
        "base_model.model.layers.0.q_proj.lora_A.weight": torch.full((2, 4), value),
        "base_model.model.layers.0.q_proj.lora_B.weight": torch.full((4, 2), -value),
    }


@pytest.fixture
def ckpts(tmp_path):
    cfg = peft_lora_config(2, 4, ["q_proj"])
    d = tmp_path / "checkpoints"
    for r in range(3):
        save_checkpoint(d, r, adapter(float(r)), cfg, {"record": {"round": r}, "base_pass@1": 0.1})
    return d


def test_latest_is_the_newest_round_and_reads_back_bitwise(ckpts):
    ck = latest_checkpoint(ckpts)
    assert ck.round == 2 and ck.state["record"] == {"round": 2} and ck.state["base_pass@1"] == 0.1
    assert all(torch.equal(v, adapter(2.0)[k]) for k, v in ck.adapter().items())
    assert (ckpts / LATEST_NAME).read_text().strip() == "round_0002"
    assert sorted(p.name for p in ckpts.iterdir()) == ["LATEST", "round_0000", "round_0001", "round_0002"]


@pytest.mark.parametrize("damage", ["truncate_weights", "truncate_state", "delete_state"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_with_a_warning(ckpts, damage):
    newest = round_dir(ckpts, 2)
    if damage == "truncate_weights":
        w = newest / WEIGHTS_NAME
        w.write_bytes(w.read_bytes()[: os.path.getsize(w) // 2])
    elif damage == "truncate_state":
        s = newest / "state.json"
        s.write_text(s.read_text()[:20])
    else:
        (newest / "state.json").unlink()
    with pytest.warns(CheckpointWarning, match="round_0002 is unusable"):
        ck = latest_checkpoint(ckpts)
    assert ck.round == 1
    assert torch.equal(ck.adapter()["base_model.model.layers.0.q_proj.lora_A.weight"], torch.full((2, 4), 1.0))


def test_a_single_flipped_byte_is_detected(ckpts):
    w = round_dir(ckpts, 2) / WEIGHTS_NAME
    data = bytearray(w.read_bytes())
    data[-1] ^= 1
    w.write_bytes(bytes(data))
    state, why = verify(round_dir(ckpts, 2))
    assert state is None and "sha256" in why


def test_no_checkpoint_and_leftover_temp_folders_are_ignored(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    (tmp_path / "c" / ".round_0005.abc").mkdir(parents=True)  # a crash mid-write leaves a temp folder
    assert latest_checkpoint(tmp_path / "c") is None


def test_rewriting_a_round_replaces_it(ckpts):
    save_checkpoint(ckpts, 2, adapter(7.0), peft_lora_config(2, 4, ["q_proj"]), {"record": {"round": 2}})
    ck = latest_checkpoint(ckpts)
    assert ck.round == 2 and ck.adapter()["base_model.model.layers.0.q_proj.lora_A.weight"][0, 0] == 7.0
    assert not [p for p in ckpts.iterdir() if p.name.startswith(".")]


def test_metrics_rebuild_drops_redone_rounds_dedups_and_restores_missing(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [{"round": 1, "v": "log"}, {"round": 1, "v": "dup"}, {"round": 3, "v": "log"}, {"round": 4, "v": "redo"}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"round": 5, "v": "tor')  # torn last line
    records = metrics_log.rebuild(path, 3, lambda r: {"round": r, "v": "ckpt"})
    assert [(r["round"], r["v"]) for r in records] == [(1, "log"), (2, "ckpt"), (3, "log")]
    assert metrics_log.read_records(path) == records
    with pytest.warns(UserWarning, match=r"rounds \[2\]"):
        metrics_log.rebuild(tmp_path / "m2.jsonl", 2, lambda r: {"round": 1} if r == 1 else None)


def test_resume_conflicts_name_what_differs_and_allow_execution_settings():
    saved = RunConfig().to_dict()
    same_run = RunConfig()
    same_run.federation.rounds = 50
    same_run.run_dir = "/elsewhere"
    same_run.resources.cpus_per_client = 4.0
    same_run.eval_every = 5
    assert resume_conflicts(saved, same_run.to_dict()) == []
    other = RunConfig()
    other.federation.method = "fedavg-grpo"
    other.federation.num_clients = 8
    other.model.path = "other/model"
    assert resume_conflicts(saved, other.to_dict()) == [
        "federation.method: 'pubswap-balanced' -> 'fedavg-grpo'",
        "federation.num_clients: 4 -> 8",
        "model.path: '' -> 'other/model'",
    ]


def test_a_setting_added_since_the_run_was_saved_counts_as_its_default():
    older = RunConfig().to_dict()
    del older["eval_suite_max_prompt_len"], older["grpo"]["shared_prefix"]  # a run saved before they existed
    assert resume_conflicts(older, RunConfig().to_dict()) == []
    changed = RunConfig()
    changed.eval_suite_max_prompt_len = 1024
    assert resume_conflicts(older, changed.to_dict()) == ["eval_suite_max_prompt_len: 0 -> 1024"]


def test_fault_fires_once_only_at_its_point(tmp_path, monkeypatch):
    spec = tmp_path / "fault.json"
    spec.write_text(json.dumps({"who": "client", "client": 1, "round": 2, "step": 3, "phase": "private_train"}))
    monkeypatch.setenv(ENV, str(spec))
    killed = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
    for args in [
        ("client", 2, 3, "private_train", 0),
        ("client", 1, 3, "public_train", 1),
        ("client", 2, 2, "private_train", 1),
        ("driver", 2, 3, "private_train", None),
    ]:
        maybe_crash(*args[:4], client=args[4])
    assert killed == [] and spec.exists()
    maybe_crash("client", 2, 3, "private_train", client=1)
    maybe_crash("client", 2, 3, "private_train", client=1)
    assert len(killed) == 1 and not spec.exists() and (tmp_path / "fault.json.fired").exists()


def test_a_decentralized_checkpoint_keeps_every_clients_state_and_checks_it(ckpts):
    states = {"x": {c: adapter(float(c)) for c in range(3)}, "public": {1: adapter(-5.0)}}
    save_checkpoint(ckpts, 3, adapter(1.0), peft_lora_config(2, 4, ["q_proj"]), {"record": None}, clients=states)
    ck = latest_checkpoint(ckpts)
    got = ck.client_states()
    assert ck.round == 3 and sorted(got["x"]) == [0, 1, 2] and sorted(got["public"]) == [1]
    assert all(torch.equal(got["x"][c][k], v) for c in range(3) for k, v in adapter(float(c)).items())
    assert latest_checkpoint(ckpts).client_states() is not None and ckpts.joinpath("round_0002").is_dir()
    (round_dir(ckpts, 3) / "clients.safetensors").write_bytes(b"truncated")
    with pytest.warns(CheckpointWarning, match="clients.safetensors is missing or does not match"):
        assert latest_checkpoint(ckpts).round == 2  # the per-client states are part of the commit
    with pytest.warns(CheckpointWarning):
        assert latest_checkpoint(ckpts).client_states() is None  # a federated checkpoint has none
