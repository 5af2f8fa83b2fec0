"""run_dir/events.jsonl: one JSON line per lease, start, step, commit, evaluation, recovery and round,
what tests and tools read instead of console text."""

import json

from pubswap.run.events import NAME, EventLog, read_events


def test_events_are_whole_json_lines_and_a_torn_last_line_is_skipped(tmp_path):
    log = EventLog(tmp_path)
    log.emit("step", round=1, step=2, public=True, reward=[0.5, 0.25])
    log.emit("round", round=1, recoveries=0, round_s=3.5)
    with open(tmp_path / NAME, "a") as f:
        f.write('{"event": "step", "rou')  # a driver killed while writing
    events = read_events(tmp_path)
    assert [e["event"] for e in events] == ["step", "round"]
    assert events[0]["reward"] == [0.5, 0.25] and events[0]["pid"] > 0 and events[0]["time"] > 0
    assert read_events(tmp_path, "round") == [events[1]]
    assert read_events(tmp_path / "nowhere") == []


def test_a_log_told_to_stop_writes_nothing(tmp_path):
    lost = []
    log = EventLog(tmp_path, may_write=lambda: not lost)
    log.emit("step", round=1, step=1)
    lost.append("taken over")
    log.emit("step", round=1, step=2)
    EventLog(None).emit("step", round=1, step=3)  # records nothing, anywhere
    assert [e["step"] for e in read_events(tmp_path)] == [1]


def test_a_run_tells_its_story_in_events(ft_reference):
    """The uninterrupted reference run (2 rounds of 3 steps, step 2 public): every event, in order."""
    events = read_events(ft_reference)
    kinds = [e["event"] for e in events]
    round_ = ["step", "step", "step", "committed", "evaluated", "round"]
    assert kinds == ["lease", "start", "actors", "evaluated", *round_, *round_, "done"], kinds
    assert events[1]["resume_round"] is None and len(events[2]["pids"]) == 2
    steps = [(e["round"], e["step"], e["public"]) for e in events if e["event"] == "step"]
    assert steps == [(r, s, s == 2) for r in (1, 2) for s in (1, 2, 3)]
    records = [json.loads(line) for line in (ft_reference / "metrics.jsonl").read_text().splitlines()]
    evaluated = [e for e in events if e["event"] == "evaluated"]
    assert [e["pass@1"] for e in evaluated[1:]] == [r["pass@1"] for r in records]
    assert [e["reward"] for e in events if e["event"] == "step"] == [
        [c["reward_mean"] for c in s["clients"]] for r in records for s in r["steps"]
    ]
    assert len({e["pid"] for e in events}) == 1
