"""Preemption costs steps, not rounds: in-round checkpoints (pubswap/run/step_checkpoint.py) and the average
committed before its evaluation.

- the driver and every process of its Ray cluster SIGKILLed from outside after step 2 of 3: the rerun
  continues at step 3 and ends bitwise equal to an uninterrupted run;
- a run_dir left by a driver that died while evaluating (round committed, not evaluated): the rerun
  only evaluates that round, with the same result as the uninterrupted run;
- an AdamW state survives the checkpoint bitwise: the next update is the same.
"""

import json
import shutil

import torch
from ray_helpers import final_sha, ft_config, kill_cluster_when, metrics, run_driver, start_logged_driver

from pubswap.run import step_checkpoint
from pubswap.run.events import read_events


def test_a_kill_after_step_2_of_3_resumes_at_step_3_bitwise(ft_reference, digit_model_dir, tmp_path):
    cfg = ft_config(digit_model_dir, tmp_path / "run", "checkpoint.every_steps=1")
    tree = kill_cluster_when(start_logged_driver(cfg), run_dir=cfg.run_dir, event="inround", round=2, step=2)
    assert len(tree) > 3, "the driver's local Ray (GCS, raylet, workers) should have been running"
    saved = step_checkpoint.load(tmp_path / "run" / "checkpoints", 2)
    assert saved is not None and saved.step == 2 and sorted(saved.states) == [0, 1]

    done = run_driver(cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "round 2: continuing at step 3 from the in-round checkpoint after step 2" in done.stdout
    events = read_events(cfg.run_dir)
    rerun = events[max(i for i, e in enumerate(events) if e["event"] == "start") :]
    assert rerun[0]["resume_round"] == 1
    redone = [(e["round"], e["step"]) for e in rerun if e["event"] == "step"]
    assert redone == [(2, 3)], redone  # steps 1-2 not redone
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)
    ref = metrics(ft_reference)[1]["steps"]
    got = metrics(cfg.run_dir)[1]["steps"]
    assert [s["step"] for s in got] == [1, 2, 3]
    assert [[c["reward_mean"] for c in s["clients"]] for s in got] == [
        [c["reward_mean"] for c in s["clients"]] for s in ref
    ]
    assert not (tmp_path / "run" / "checkpoints" / step_checkpoint.DIR_NAME).exists()  # removed with round 2's commit


def test_a_driver_that_died_evaluating_redoes_only_the_evaluation(ft_reference, digit_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(ft_reference, run_dir)
    # what a driver SIGKILLed during round 2's evaluation leaves: round 2 committed unevaluated, no metrics line
    state_path = run_dir / "checkpoints" / "round_0002" / "state.json"
    state = json.loads(state_path.read_text())
    record = {
        k: v
        for k, v in state["record"].items()
        if k not in ("pass@1", "pass@1_se", "eval_prompts", "eval_n", "format_rate", "time")
    }
    state_path.write_text(json.dumps({**state, "record": record, "evaluated": False}))
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text(lines[0] + "\n")
    (run_dir / "summary.json").unlink()
    (run_dir / "LEASE").unlink(missing_ok=True)
    done = run_driver(ft_config(digit_model_dir, run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming after round 2 (checkpoint round_0002, its evaluation redone)" in done.stdout
    assert "step 1/3" not in done.stdout  # no training
    assert final_sha(run_dir) == final_sha(ft_reference)
    got, ref = metrics(run_dir), metrics(ft_reference)
    assert [r["round"] for r in got] == [1, 2] and got[1]["pass@1"] == ref[1]["pass@1"]
    assert json.loads(state_path.read_text())["evaluated"] is True


def test_adamw_state_survives_the_checkpoint_bitwise(tmp_path):
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4, 3))
    opt = torch.optim.AdamW([w], lr=1e-2, weight_decay=0.01)
    for _ in range(3):
        opt.zero_grad()
        (w**3).sum().backward()
        opt.step()
    step_checkpoint.save(
        tmp_path,
        1,
        2,
        [{"step": 1}],
        {5: {"adapter": {"w": w.detach().clone()}, "opt": step_checkpoint.optimizer_state(opt)}},
    )
    saved = step_checkpoint.load(tmp_path, 1)
    assert saved.step == 2 and saved.steps == [{"step": 1}] and step_checkpoint.load(tmp_path, 2) is None
    w2 = torch.nn.Parameter(saved.states[5]["adapter"]["w"].clone())
    opt2 = torch.optim.AdamW([w2], lr=1e-2, weight_decay=0.01)
    step_checkpoint.load_optimizer_state(opt2, saved.states[5]["opt"])
    for p, o in ((w, opt), (w2, opt2)):
        o.zero_grad()
        (p**3).sum().backward()
        o.step()
    assert torch.equal(w, w2)
    # a damaged tensor file is never used
    f = tmp_path / step_checkpoint.DIR_NAME / step_checkpoint.TENSORS_NAME
    f.write_bytes(f.read_bytes()[:-8])
    assert step_checkpoint.load(tmp_path, 1) is None
