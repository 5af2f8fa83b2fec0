"""Actors sharing a GPU take turns loading (an flock per card, released when its holder dies), and a
restarted engine waits, bounded, for its share of the card (actors/card_share.py). The lock is driven
from real processes; the free-memory wait from a reader of the card's free bytes (no GPU here)."""

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

from actors.card_share import card_turn, wait_for_free

HOLD = """
import sys, time
from actors.card_share import card_turn
with card_turn(sys.argv[1], sys.argv[2]):
    print("holding", flush=True)
    time.sleep(600)
"""


def _take_turn(card, lock_dir, spans):
    with card_turn(card, lock_dir):
        start = time.monotonic()
        time.sleep(0.5)
        spans.append((start, time.monotonic()))


def test_actors_on_one_card_take_turns_and_a_killed_holder_frees_the_turn(tmp_path):
    with mp.Manager() as manager:
        spans = manager.list()
        procs = [mp.Process(target=_take_turn, args=("GPU-aaaa", str(tmp_path), spans)) for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        spans = sorted(spans)
    assert len(spans) == 3
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))  # never two at once

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, "GPU-bbbb", str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        with mp.Manager() as manager:
            spans = manager.list()
            other = mp.Process(target=_take_turn, args=("GPU-cccc", str(tmp_path), spans))  # another card
            other.start()
            other.join(10)
            assert len(spans) == 1
            waiter = mp.Process(target=_take_turn, args=("GPU-bbbb", str(tmp_path), spans))
            waiter.start()
            waiter.join(2)
            assert waiter.is_alive() and len(spans) == 1  # the card's turn is taken
            os.kill(holder.pid, signal.SIGKILL)  # the holder dies without releasing it
            waiter.join(10)
            assert not waiter.is_alive() and len(spans) == 2
    finally:
        holder.kill()
        holder.wait()


def test_a_restarted_engine_waits_for_its_share_and_stops_waiting_at_the_bound():
    gib = 2**30
    frees = iter([1 * gib, 2 * gib, 3 * gib, 9 * gib])  # a predecessor releasing its memory
    said, slept = [], []
    assert wait_for_free(8 * gib, lambda: next(frees), timeout_s=60, out=said.append, sleep=slept.append)
    assert len(slept) == 3 and "waiting up to 60 s" in said[0] and said[-1].startswith("GPU share: free after")
    assert wait_for_free(1 * gib, lambda: 4 * gib, out=said.append) and len(said) == 2  # free already: silent
    start = time.monotonic()
    assert not wait_for_free(8 * gib, lambda: 1 * gib, timeout_s=0.3, poll_s=0.05, out=said.append)
    assert time.monotonic() - start < 2 and "starting the engine anyway" in said[-1]
