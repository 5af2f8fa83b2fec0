"""The round driver, a Ray Job entrypoint.

    python -m jobs.train --config configs/default.yaml [dotted.key=value ...]      # starts a local Ray
    ray job submit --working-dir . -- python -m jobs.train --config configs/X.yaml run_dir=/shared/runs/X

One round (DESIGN.md): tau local steps from the global adapter, every swap_period-th a public step for
PubSwap methods; average the adapters (allreduce among clients); evaluate pass@1 on the server's test
set; append one line to metrics.jsonl; commit the checkpoint run_dir/checkpoints/round_NNNN.

Running the same command again on the same run_dir resumes after the newest intact checkpoint (a
finished run does nothing; a different config is refused). A client or server that dies mid-round is
restarted and the round redone from its start, so the result is the same as without the failure.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import time
from pathlib import Path

from jobs.console import actor_env, progress, quiet_driver
from jobs.job_watch import stop_with_parent
from pubswap.algorithms.evaluation import Score
from pubswap.config import ConfigError, RunConfig, load_config, resume_conflicts
from pubswap.data import dirichlet_split, format_histogram
from pubswap.data.board_evals import BENCHMARKS, in_domain_average, load_benchmark
from pubswap.data.prompt_length import drop_long_prompts, prompt_ids, uses_chat_template
from pubswap.data.rows import DataError
from pubswap.data.sources import load_source
from pubswap.data.split import FederatedSplit, public_and_test
from pubswap.methods import RoundContext, eval_record
from pubswap.methods.base import mean
from pubswap.models import resolve_model
from pubswap.run import metrics_log, step_checkpoint
from pubswap.run.checkpoint import (
    Checkpoint,
    ResumeError,
    collect_temp,
    latest_checkpoint,
    list_rounds,
    prune,
    round_dir,
    save_checkpoint,
    storage_full,
    unusable,
    update_state,
    verify,
    write_text_atomic,
)
from pubswap.run.events import NAME as EVENTS
from pubswap.run.events import EventLog
from pubswap.run.faults import ENV as FAULT_ENV
from pubswap.run.learning_signal import no_signal, no_signal_note
from pubswap.run.lease import Lease, LeaseHeld, LeaseLost
from pubswap.run.loggers import RunLogger
from pubswap.run.metrics_log import read_records
from pubswap.run.plots import curve, label_of, plot
from pubswap.run.storage import StorageError, is_uri, open_run
from pubswap.run.timing import breakdown, format_breakdown

NO_EVENTS = EventLog(None)

# what a run writes into run_dir (besides LEASE): removed by --start-over, mirrored to a URI run_dir
RUN_FILES = (
    "checkpoints",
    "metrics.jsonl",
    "tensorboard",
    "summary.json",
    "progress.png",
    "config.json",
    EVENTS,
)
EXIT_STORAGE_FULL = 4  # jobs.supervise does not resubmit it: the next attempt would fail the same way
EXIT_RUN_DIR_BUSY = 5  # another live driver holds run_dir's lease (after waiting for a dying one)


@functools.lru_cache(maxsize=2)
def _tokenizer(model_dir: str):
    """The model's tokenizer, loaded once for the split and every eval_suite benchmark."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def _fitting_prompts(cfg: RunConfig, model_dir: str, rows, report, what: str, limit: int):
    """`rows` without those whose prompt (with its context, in the run's prompt format) is over `limit`
    tokens, counted in `report`, which is printed when it rejected any."""
    tokenizer = _tokenizer(model_dir)
    fmt = cfg.model.prompt_format
    try:
        uses_chat_template(tokenizer, fmt)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    rows = drop_long_prompts(rows, report, lambda r: len(prompt_ids(tokenizer, r.prompt, r.context, fmt)), limit)
    if report.total_rejected:
        print(f"{what}: {report}", flush=True)
    return rows


def build_split(cfg: RunConfig, model_dir: str) -> FederatedSplit:
    """The run's federated split; prompts over model.max_prompt_len tokens (in the model's chat template)
    are dropped first and counted in the data report."""
    d, f = cfg.data, cfg.federation
    own = d.client_paths  # each client actor reads its own rows: here only the public and test sets
    total = (0 if own else f.num_clients * d.per_client) + d.public_size + d.test_size
    rows, report = load_source(d, total, cfg.seed)
    rows = _fitting_prompts(cfg, model_dir, rows, report, "data", cfg.model.max_prompt_len)
    if own:
        public, test = public_and_test(rows, d.public_size, d.test_size, cfg.seed)
        return FederatedSplit([[] for _ in own], public, test, client_paths=tuple(own))
    return dirichlet_split(rows, f.num_clients, d.per_client, d.dirichlet_alpha, d.public_size, d.test_size, cfg.seed)


def build_suite(cfg: RunConfig, model_dir: str) -> dict[str, list]:
    """The eval_suite benchmarks' scored rows (with their shots), by name; prompts over
    eval_suite_max_prompt_len tokens (default model.max_prompt_len) are dropped and counted."""
    suite = {}
    for name, path in cfg.eval_suite.items():
        rows, report = load_benchmark(name, path, cfg.eval_suite_limit)
        rows = _fitting_prompts(cfg, model_dir, rows, report, f"eval_suite.{name}", cfg.suite_prompt_len)
        if not rows:
            raise DataError(
                f"eval_suite.{name}: every prompt is over its budget of {cfg.suite_prompt_len} tokens "
                "(eval_suite_max_prompt_len, default model.max_prompt_len)"
            )
        suite[name] = rows
    return suite


def suite_record(scores: dict[str, Score]) -> dict:
    """A round's benchmark fields: each benchmark's score, its SE and size, and their plain mean."""
    return {
        "suite": {k: {"score": s.pass_at_1, "se": s.se, "prompts": s.prompts} for k, s in scores.items()},
        "suite_avg": in_domain_average({k: s.pass_at_1 for k, s in scores.items()}),
    }


def suite_line(record: dict) -> str:
    """The console's benchmark line, in percent as the board prints them."""
    parts = ", ".join(f"{k} {100 * v['score']:.2f}" for k, v in record["suite"].items())
    return f"benchmarks: {parts}; average {100 * record['suite_avg']:.2f}"


def init_ray() -> None:
    import ray

    if ray.is_initialized():
        return
    defaults = {
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "PYTHONUNBUFFERED": "1",
        # fewer glibc malloc arenas: multi-threaded torch processes hold less idle RSS
        "MALLOC_ARENA_MAX": "2",
        **actor_env(),
    }
    level = quiet_driver()
    if os.environ.get("RAY_ADDRESS"):
        # inside `ray job submit` (or a user-chosen cluster): what the job's runtime_env sets is in our
        # environment already, and Ray refuses to merge a key set twice, so add only the others
        ray.init(
            runtime_env={"env_vars": {k: v for k, v in defaults.items() if k not in os.environ}}, logging_level=level
        )
    else:
        env_vars = {k: os.environ.get(k, v) for k, v in defaults.items()}
        if os.environ.get(FAULT_ENV):  # a fault drill: the actors must see the spec file too
            env_vars[FAULT_ENV] = os.environ[FAULT_ENV]
        try:
            ray.init(runtime_env={"env_vars": env_vars}, include_dashboard=False, logging_level=level)
        except BaseException as e:
            # a signal while ray.init starts the cluster: Ray's own SIGTERM handler (installed first thing in
            # ray.init) exits before Ray knows its new node, so ray.shutdown would leave the daemons it started
            # (its agents outlive their raylet); stop them here, and stop as the driver does on SIGTERM
            stop_descendants()
            if isinstance(e, SystemExit) and e.code == signal.SIGTERM:
                raise Stopped(signal.SIGTERM) from None
            raise


def stop_descendants(grace_s: float = 5.0) -> None:
    """End every process this one started (here: the daemons of a half-started local Ray). They are frozen
    first, so that none starts another while the tree is collected, then terminated, then killed."""
    import psutil

    me, tree = psutil.Process(), {}
    while True:  # freeze until no new descendant appears
        new = [p for p in me.children(recursive=True) if p.pid not in tree]
        if not new:
            break
        for p in new:
            tree[p.pid] = p
            try:
                p.suspend()
            except psutil.Error:
                pass
    procs = list(tree.values())
    for p in procs:
        try:
            p.terminate()
            p.resume()  # a stopped process acts on SIGTERM once continued
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


class InRoundCheckpoints:
    """The driver's side of in-round checkpoints (pubswap/run/step_checkpoint.py): every
    `checkpoint.every_steps` steps of a federated round, under the lease, persisted like any commit."""

    def __init__(self, ckpt_dir: Path, every: int, persist, run):
        self.ckpt_dir, self.every, self.persist, self.run = ckpt_dir, every, persist, run

    def due(self, step: int, tau: int) -> bool:
        return self.every > 0 and step % self.every == 0 and step < tau

    def save(self, r: int, step: int, steps: list[dict], states: dict) -> None:
        step_checkpoint.save(self.ckpt_dir, r, step, steps, states)  # persist() checks the lease first
        self.persist(f"checkpoints/{step_checkpoint.DIR_NAME}")

    def load(self, r: int):
        return step_checkpoint.load(self.ckpt_dir, r)

    def clear(self) -> None:
        if step_checkpoint.clear(self.ckpt_dir):
            self.run.remove([f"checkpoints/{step_checkpoint.DIR_NAME}"])


def _resume_point(cfg: RunConfig, ckpt_dir: Path, start_over: bool = False) -> Checkpoint | None:
    """The checkpoint to continue from, after checking that this config may continue it. A run_dir that
    holds a run (round folders, metrics) of which no checkpoint verifies is refused, never overwritten,
    unless `start_over` (the --start-over flag) says to discard it."""
    if start_over:
        return None
    ckpt = latest_checkpoint(ckpt_dir)
    if ckpt is None:
        evidence = _run_evidence(ckpt_dir.parent)
        if evidence:
            why = unusable(ckpt_dir) or ["no checkpoint folder at all"]
            raise ResumeError(
                f"{cfg.run_dir} holds a run ({evidence}) but no checkpoint of it verifies:\n  "
                + "\n  ".join(why)
                + "\nNothing was changed. To discard that run and start over "
                "in this run_dir, rerun with --start-over."
            )
        return None
    conflicts = resume_conflicts(ckpt.state["config"], cfg.to_dict())
    if conflicts:
        raise ResumeError(
            f"{ckpt_dir.parent} holds a run with a different config, so it cannot be resumed with "
            "this one:\n  " + "\n  ".join(conflicts) + "\nUse a new run_dir, or the saved settings (config.json there)."
        )
    return ckpt


def _run_evidence(run_dir: Path) -> str:
    """What in run_dir shows that a run wrote there ('' if nothing)."""
    ckpt_dir = run_dir / "checkpoints"
    out = []
    rounds = list_rounds(ckpt_dir) if ckpt_dir.is_dir() else []
    if rounds:
        out.append(f"{len(rounds)} round folders")
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file() and metrics.stat().st_size:
        out.append(f"metrics.jsonl of {len(read_records(metrics))} rounds")
    if (run_dir / "tensorboard").is_dir():
        out.append("tensorboard events")
    return ", ".join(out)


def _summary(run_dir: Path, base: dict, records: list[dict], wall: float) -> dict:
    """`base`: the base model's eval_record (older checkpoints hold only its pass@1)."""
    evaluated = [r for r in records if "pass@1" in r]
    final = evaluated[-1] if evaluated else base
    best = max([base, *evaluated], key=lambda r: r["pass@1"])
    summary = {
        "base_pass@1": base["pass@1"],
        "base_pass@1_se": base.get("pass@1_se"),
        "final_pass@1": final["pass@1"],
        "final_pass@1_se": final.get("pass@1_se"),
        "best_pass@1": best["pass@1"],
        "best_pass@1_se": best.get("pass@1_se"),
        "eval_prompts": final.get("eval_prompts"),
        "eval_n": final.get("eval_n"),
        "final_format_rate": final.get("format_rate"),
        "rounds": len(records),
        "run_dir": str(run_dir),
        "wall_s": wall,
    }
    if "suite" in final:
        summary["suite"], summary["suite_avg"] = final["suite"], final["suite_avg"]
    if base.get("pass@1_se") is not None and final.get("pass@1_se") is not None:
        # independent samples of test responses: the SE of the difference adds in quadrature
        summary["change"] = final["pass@1"] - base["pass@1"]
        summary["change_se"] = (base["pass@1_se"] ** 2 + final["pass@1_se"] ** 2) ** 0.5
    write_text_atomic(run_dir / "summary.json", json.dumps(summary, indent=2))
    return summary


def train(cfg: RunConfig, handle_signals: bool = False, start_over: bool = False) -> dict:
    """Run (or resume) the configured rounds; returns the summary written to run_dir/summary.json.
    `handle_signals` (the command line): SIGTERM/SIGHUP unwind like Ctrl-C (see `Stopped`), and a lost
    lease on run_dir interrupts the driver at once instead of at its next commit. `start_over` discards
    whatever run run_dir holds (after taking its lease) instead of resuming it.

    A run_dir URI (s3://, gs://) is worked on through a node-local mirror (pubswap/run/storage.py): pulled
    from the store here, every commit pushed to it right after it is made locally."""
    t0 = time.perf_counter()
    f, ft = cfg.federation, cfg.fault_tolerance
    run = open_run(cfg.run_dir)
    if run.store is not None:
        print(f"run dir {cfg.run_dir}: {run.pull()} files mirrored to {run.local}", flush=True)
    run_dir = run.local
    ckpt_dir = run_dir / "checkpoints"
    ckpt = _resume_point(cfg, ckpt_dir, start_over)
    if ckpt is not None and ckpt.round >= f.rounds and ckpt.state.get("evaluated") is not False:
        return _finished(cfg, run_dir, ckpt, run)
    # everything that can reject the input (model, data files, the split) runs before run_dir is touched
    model_dir = resolve_model(cfg.model.path, run_dir.parent / "_models")
    split = build_split(cfg, model_dir)
    suite = build_suite(cfg, model_dir)
    run_cfg, split = f.family.prepare(cfg, split)  # the centralized reference runs as another method
    if not split.client_paths:  # client files: checked when their actors have read them
        _check_same_split(ckpt, split.fingerprint(), run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lease_notes: list[str] = []

    def say(note: str) -> None:
        print(note, flush=True)
        lease_notes.append(note)

    # LeaseHeld: another live driver writes here
    lease = Lease(run_dir, ft.lease_ttl_s, store=run.store).acquire(say=say)
    try:
        for p in collect_temp(run_dir):  # ours now: no live writer owns them
            print(f"removed {p.name}, left by a killed writer", flush=True)
        if start_over:
            _erase_run(run_dir, run)
        else:
            run.pull()  # again: another driver may have committed before we took the lease
        ckpt = _resume_point(cfg, ckpt_dir, start_over)
        if ckpt is not None and ckpt.round >= f.rounds and ckpt.state.get("evaluated") is not False:
            return _finished(cfg, run_dir, ckpt, run)
        on_lost = None
        if handle_signals:  # interrupt the main thread at once (SIGUSR1 raises LeaseLost there)
            signal.signal(signal.SIGUSR1, _raise_lease_lost(lease))
            on_lost = lambda why: os.kill(os.getpid(), signal.SIGUSR1)  # noqa: E731
        lease.start_heartbeat(on_lost=on_lost)
        write_text_atomic(run_dir / "config.json", json.dumps(cfg.to_dict(), indent=2))
        # after the pull and --start-over's erase: appended to the run's history; a driver that has
        # noticed its lease is lost writes no more events
        events = EventLog(run_dir, may_write=lambda: not lease.lost)
        events.emit("lease", notes=lease_notes)
        events.emit("start", resume_round=None if ckpt is None else ckpt.round)
        run.push(["config.json", EVENTS])
        return _train_rounds(
            run_cfg,
            split,
            model_dir,
            run_dir,
            ckpt,
            lease,
            handle_signals,
            t0,
            run,
            user_cfg=cfg,
            events=events,
            suite=suite,
        )
    finally:
        lease.release()


def _check_same_split(ckpt: Checkpoint | None, fingerprint: str, run_dir: Path) -> None:
    if ckpt is not None and ckpt.state["split_sha256"] != fingerprint:
        raise ResumeError(
            f"{run_dir}: the data split differs from the checkpointed run's (same config, other rows: "
            "a changed dataset, task generator or client file); refusing to resume"
        )


def _erase_run(run_dir: Path, run) -> None:
    """--start-over: delete the run's files here and in the store (under the lease)."""
    import shutil

    for name in RUN_FILES:
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    run.remove(RUN_FILES)
    print(f"--start-over: removed the previous run's files from {run_dir}", flush=True)


def _train_rounds(
    cfg: RunConfig,
    split: FederatedSplit,
    model_dir: str,
    run_dir: Path,
    ckpt: Checkpoint | None,
    lease: Lease,
    handle_signals: bool,
    t0: float,
    run,
    user_cfg: RunConfig | None = None,
    events: EventLog = NO_EVENTS,
    suite: dict | None = None,
) -> dict:
    """The rounds after `ckpt` (None: from the base model), under `lease`; every commit checks it first.
    `cfg` is what runs; `user_cfg` (default: the same) is what the checkpoints, logs and plots record.
    `run` (pubswap.run.storage) persists each local commit to a URI run_dir's store. `suite`: the
    eval_suite benchmarks' rows by name, scored after the last round."""
    user_cfg = user_cfg or cfg

    def persist(*rels: str) -> None:
        lease.check()
        run.push([*rels, EVENTS])

    from jobs.federation import Federation

    f, ft = cfg.federation, cfg.fault_tolerance
    ckpt_dir, metrics_path = run_dir / "checkpoints", run_dir / "metrics.jsonl"
    fingerprint = None if split.client_paths else split.fingerprint()  # client files: once their actors read them
    heading = (
        "topics of the public and test sets (each client's rows are read by its actor from data.client_paths)"
        if split.client_paths
        else f"client topic split (Dirichlet alpha={cfg.data.dirichlet_alpha})"
    )
    print(f"run dir: {run_dir}\nmodel: {model_dir}\n{heading}:\n{format_histogram(split)}", flush=True)

    init_ray()
    if handle_signals:
        stop_on_sigterm()  # again: ray.init installs Ray's own SIGTERM handler, which aborts the process
    logger: RunLogger | None = None
    fed = Federation(cfg, split, model_dir, str(run_dir))
    print(f"client actors: {len(fed.actors)}, hosting clients {fed.assignment}, pids {fed.pids}", flush=True)
    try:
        if split.client_paths:
            fingerprint = split.fingerprint([sha for _, sha in fed.client_data])
            print(
                "client rows, read by their actors from data.client_paths: "
                + ", ".join(f"client {c}: {n} (sha256 {sha[:12]})" for c, (n, sha) in enumerate(fed.client_data)),
                flush=True,
            )
            _check_same_split(ckpt, fingerprint, run_dir)
        events.emit("actors", pids=fed.pids)
        if fed.topo is not None:
            print(fed.topo.describe(), flush=True)
        lora_config = fed.lora_config()
        method = f.family  # pubswap/methods/: what one round does, evaluates and keeps
        states = None  # serverless methods: every client's own round-start state
        pending = None  # (record, adapter, states) of a round committed but not yet evaluated
        said_no_signal = False  # the console says once per run that a round had no learning signal
        if ckpt is None:
            global_adapter = fed.initial_adapter()
            states = method.initial_states(global_adapter, f.num_clients)
            base, _ = with_recovery(
                "start",
                "evaluate the base model again",
                ft.max_round_retries,
                lambda: (fed.set_global(global_adapter), fed.evaluate(0))[1],
                lambda: fed.recover(global_adapter, states),
                events,
                phase="start",
                round=0,
            )
            events.emit("evaluated", round=0, **eval_record(base))
            print(f"base model {base.line()} ({time.perf_counter() - t0:.0f}s)", flush=True)
            fixed = {
                "config": user_cfg.to_dict(),
                "split_sha256": fingerprint,
                "base_pass@1": base.pass_at_1,
                "base_eval": eval_record(base),
            }
            lease.check()
            save_checkpoint(ckpt_dir, 0, global_adapter, lora_config, {**fixed, "record": None})
            persist("checkpoints/round_0000", "checkpoints/LATEST")
            write_text_atomic(metrics_path, "")
            persist("metrics.jsonl")
            records, start = [], 1
        else:
            global_adapter = ckpt.adapter()
            states = ckpt.client_states() or method.initial_states(global_adapter, f.num_clients)
            with_recovery(
                "resume",
                "load the checkpoint again",
                ft.max_round_retries,
                lambda: fed.recover(global_adapter, states, restart=False),
                lambda: fed.recover(global_adapter, states),
                events,
                phase="resume",
                round=ckpt.round,
            )
            fixed = {
                "config": user_cfg.to_dict(),
                "split_sha256": fingerprint,
                "base_pass@1": ckpt.state["base_pass@1"],
                "base_eval": _base_eval(ckpt.state),
            }
            lease.check()
            # a round committed before its evaluation (the driver died evaluating it) is evaluated again
            unevaluated = ckpt.state.get("evaluated") is False
            records = metrics_log.rebuild(
                metrics_path, ckpt.round - unevaluated, lambda r: _checkpointed_record(ckpt_dir, r)
            )
            persist("metrics.jsonl")
            start = ckpt.round + 1
            print(
                f"resuming after round {ckpt.round} (checkpoint {ckpt.path.name}"
                f"{', its evaluation redone' if unevaluated else ''}); {len(records)} rounds of metrics kept",
                flush=True,
            )
            if unevaluated:
                start = ckpt.round
                pending = (ckpt.state["record"], global_adapter, ckpt.client_states())
        logger = RunLogger(run_dir, cfg.logger, f.tau, user_cfg.to_dict(), records)
        plot_path = run_dir / "progress.png"
        inround = None
        if method.checkpoints_in_round:
            inround = InRoundCheckpoints(ckpt_dir, cfg.checkpoint.every_steps, persist, run)
        elif cfg.checkpoint.every_steps:
            print(f"checkpoint.every_steps: {f.method} checkpoints after every round only", flush=True)
        if cfg.privacy.on and f.swap_rule is not None:
            print(
                "privacy: DP-FedAvg bounds what the adapter updates reveal, not the public responses "
                f"{f.method} shares with the server and other clients (no public step: fedavg-grpo; docs/privacy.md)",
                flush=True,
            )
        ctx = RoundContext(t0, events, inround, progress)
        for r in range(start, f.rounds + 1):
            t_round = time.perf_counter()
            if pending is not None:  # committed before the driver died evaluating it: only the evaluation is left
                (record, new_global, new_states), pending, attempt = pending, None, 0
                fed.restart_timing()
            else:

                def body():
                    nonlocal t_round
                    t_round = time.perf_counter()
                    return method.run_round(fed, cfg, r, global_adapter, ctx)

                (record, new_global, new_states), attempt = with_recovery(
                    f"round {r}",
                    f"redo round {r} from its last checkpoint",
                    ft.max_round_retries,
                    body,
                    lambda: fed.recover(global_adapter, states),
                    events,
                    phase="round",
                    round=r,
                )
                record["recoveries"] = attempt
                # the averaged adapter is committed before the evaluation: a fault there redoes only that
                lease.check()
                due = cfg.evaluation_due(r)
                save_checkpoint(
                    ckpt_dir,
                    r,
                    new_global,
                    lora_config,
                    {**fixed, "record": record, "evaluated": not due},
                    clients=new_states,
                )
                events.emit("committed", round=r)
                persist(f"checkpoints/{round_dir(ckpt_dir, r).name}", "checkpoints/LATEST")
                if inround is not None:
                    inround.clear()
            global_adapter, states = new_global, new_states

            def evaluate():
                out = method.evaluate(fed, cfg, r, global_adapter, states)
                if suite and r == f.rounds:  # the board scores the final model
                    scores = {k: fed.evaluate(r, rows=v, scoring=BENCHMARKS[k].scoring) for k, v in suite.items()}
                    out.update(suite_record(scores))
                fed.verify_incarnations()
                return out

            evaluation, _ = with_recovery(
                f"round {r}",
                f"evaluate round {r} again (its average is committed)",
                ft.max_round_retries,
                evaluate,
                lambda: fed.recover(global_adapter, states),
                events,
                phase="evaluation",
                round=r,
            )
            if evaluation:
                events.emit("evaluated", round=r, **evaluation)
            record.update(evaluation)
            record["time"] = breakdown(fed.take_timing(), fed.calls_s, time.perf_counter() - t_round)
            # the log line first, then the commit: a crash in between leaves a line the resume drops
            lease.check()
            metrics_log.append_record(metrics_path, record)
            persist("metrics.jsonl")
            lease.check()
            update_state(round_dir(ckpt_dir, r), {"record": record, "evaluated": True})
            persist(f"checkpoints/{round_dir(ckpt_dir, r).name}/state.json")
            records.append(record)
            gone = prune(ckpt_dir, cfg.checkpoint.keep_last, {_best_round(records)})
            lease.check()
            run.remove(f"checkpoints/{name}" for name in gone)
            logger.log_round(record)
            plot(
                [curve(label_of(user_cfg.to_dict()), fixed["base_eval"], records)],
                plot_path,
                title=str(Path(cfg.run_dir).name),
            )
            events.emit("round", round=r, recoveries=record.get("recoveries", 0), round_s=record["time"]["round_s"])
            persist("tensorboard", "progress.png")
            t = record["time"]
            pass_txt = f" pass@1 {record['pass@1']:.3f} ± {record['pass@1_se']:.3f}" if "pass@1" in record else ""
            pass_txt += privacy_text(record.get("privacy"))
            print(
                f"round {r}/{f.rounds} done in {t['round_s']:.0f}s, drift {mean(record['drift_sq']):.2e}{pass_txt}; "
                f"checkpoint round_{r:04d}\n  {format_breakdown(t)}",
                flush=True,
            )
            if "suite" in record:
                print(suite_line(record), flush=True)
            if cfg.objective == "grpo" and not said_no_signal and no_signal(record):  # once a run
                d = cfg.data
                print(no_signal_note(record, cfg.model.max_response_len, fixed["base_eval"], d.reward_mode), flush=True)
                said_no_signal = True
    finally:
        fed.shutdown()
        if logger is not None:
            logger.close()
    lease.check()
    summary = _summary(run_dir, fixed["base_eval"], records, time.perf_counter() - t0)
    events.emit("done", **{"final_pass@1": summary.get("final_pass@1"), "wall_s": summary["wall_s"]})
    persist("summary.json")
    print(
        f"base pass@1 {_pm(summary, 'base')} -> final pass@1 {_pm(summary, 'final')} "
        f"(SE over {summary['eval_prompts']} test prompts) in {summary['wall_s']:.0f}s; run dir {run_dir}",
        flush=True,
    )
    if summary.get("change_se"):
        significant = summary["change"] >= 2 * summary["change_se"]
        print(
            f"pass@1 changed by {summary['change']:+.3f} ± {summary['change_se']:.3f} "
            f"({summary['change'] / summary['change_se']:+.1f} standard errors of the difference): "
            f"{'a significant rise (>= 2 SE)' if significant else 'within noise (< 2 SE)'}",
            flush=True,
        )
    return summary


def with_recovery(label: str, what: str, retries: int, body, restore, events: EventLog = NO_EVENTS, **where) -> tuple:
    """body() until it returns, restoring the clients with restore() (Federation.recover: restart every
    client actor and the server, reload the state the body starts from) after a lost or hung actor. A
    fault during the restore counts as another attempt; at most `retries` restores in all. Returns
    (body's result, the number of restores). `where` (phase=..., round=...) goes into the events."""
    from jobs.federation import ActorLost

    restores = 0
    while True:
        try:
            return body(), restores
        except ActorLost as e:
            err = e
        while True:
            if restores == retries:
                raise RuntimeError(
                    f"{label} failed {restores + 1} times (fault_tolerance.max_round_retries={retries})"
                ) from err
            restores += 1
            print(
                f"{label}: an actor died or hung ({err}); restarting the clients to {what} "
                f"(retry {restores}/{retries})",
                flush=True,
            )
            events.emit("recovery", **where, what=what, error=str(err), retry=restores, retries=retries)
            try:
                seconds = restore()
                print(f"{label}: clients back in {seconds:.0f}s", flush=True)
                events.emit("recovered", **where, seconds=round(seconds, 3))
                break
            except ActorLost as e:
                err = e


def _best_round(records: list[dict]) -> int:
    """The round with the best evaluated pass@1 (0, the base model, if none is evaluated yet)."""
    evaluated = [r for r in records if "pass@1" in r]
    return max(evaluated, key=lambda r: r["pass@1"])["round"] if evaluated else 0


def _finished(cfg: RunConfig, run_dir: Path, ckpt: Checkpoint, run) -> dict:
    """The summary of a run whose last round is checkpointed already: nothing to train (the summary is
    written here, not pushed: this driver may not hold the lease)."""
    print(
        f"{cfg.run_dir}: the run already finished (round {ckpt.round} of {cfg.federation.rounds} is checkpointed); "
        "nothing to do. Raise federation.rounds to continue it.",
        flush=True,
    )
    if (run_dir / "summary.json").is_file():
        return json.loads((run_dir / "summary.json").read_text())
    return _summary(run_dir, _base_eval(ckpt.state), read_records(run_dir / "metrics.jsonl")[: ckpt.round], 0.0)


def _raise_lease_lost(lease: Lease):
    def handler(signum, frame):
        raise LeaseLost(lease.lost or "the lease was lost")

    return handler


def _base_eval(state: dict) -> dict:
    return state.get("base_eval") or {"pass@1": state["base_pass@1"]}


def _pm(summary: dict, which: str) -> str:
    se = summary.get(f"{which}_pass@1_se")
    return f"{summary[f'{which}_pass@1']:.3f}" + (f" ± {se:.3f}" if se is not None else "")


def _checkpointed_record(ckpt_dir: Path, r: int) -> dict | None:
    state, _ = verify(round_dir(ckpt_dir, r))
    return state.get("record") if state else None


class Stopped(BaseException):
    """SIGTERM (`timeout`, `ray job stop`, a scheduler) or SIGHUP: unwind like Ctrl-C, so that `train`'s
    cleanup kills the actors (and with them their engines) and shuts the local Ray down."""

    def __str__(self) -> str:
        return signal.Signals(self.args[0]).name if self.args else "a signal"


def raised_by_a_handler(e: BaseException) -> BaseException | None:
    """The Stopped / LeaseLost / KeyboardInterrupt that a signal handler raised while the main thread was
    inside Ray's C code, which surfaces as a SystemError ("returned a result with an exception set")
    whose cause is the handler's exception; None if there is none in the chain."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (Stopped, LeaseLost, KeyboardInterrupt)):
            return e
        e = e.__cause__ or e.__context__
    return None


def stop_on_sigterm() -> None:
    def handler(signum, frame):
        raise Stopped(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def privacy_text(p: dict | None) -> str:
    """The round line's DP-FedAvg part: the privacy loss so far and how many updates were clipped."""
    if p is None:
        return ""
    eps = "inf (no noise)" if p["epsilon"] is None else f"{p['epsilon']:.2f}"
    return f", DP epsilon {eps} at delta {p['delta']:g} ({p['clipped']}/{p['participants']} updates clipped)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Federated GRPO / PubSwap round driver")
    parser.add_argument("--config", default=None, help="YAML config file")
    parser.add_argument(
        "--start-over",
        action="store_true",
        help="discard the run that run_dir holds (checkpoints, metrics, events) and start afresh; "
        "without it a run_dir is always resumed, and one that cannot be is left untouched",
    )
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. federation.tau=4")
    args = parser.parse_args(argv)
    quiet_driver()
    try:
        cfg = load_config(args.config, args.overrides)
        check_run_dir_for_jobs(cfg.run_dir)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    from actors.collective import CollectiveSetupError
    from placement import PlacementError
    from pubswap.data.rows import DataError
    from pubswap.learner.gpu_budget import GpuBudgetError

    stop_on_sigterm()
    stop_with_parent()  # inside `ray job submit`: a killed entrypoint shell ends this driver too
    try:
        try:
            train(cfg, handle_signals=True, start_over=args.start_over)
        except SystemError as e:
            inner = raised_by_a_handler(e)
            if inner is None:
                raise
            raise inner from None
    except Stopped as e:
        print(
            f"stopped by {e}: the actors and their engines were shut down; rerun the same command to resume "
            "after the last checkpointed round",
            file=sys.stderr,
        )
        return 128 + int(e.args[0]) if e.args and isinstance(e.args[0], int) else 1
    except ResumeError as e:
        print(f"cannot resume: {e}", file=sys.stderr)
        return 2
    except LeaseHeld as e:
        print(f"run_dir busy: {e}", file=sys.stderr)
        return EXIT_RUN_DIR_BUSY
    except LeaseLost as e:
        print(f"stopped: {e}; this driver wrote nothing after that, and the actors were shut down", file=sys.stderr)
        return 3
    except DataError as e:
        print(f"data error: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:  # what only the model's files tell (model.prompt_format: chat without a template)
        print(f"config error: {e}", file=sys.stderr)
        return 2
    except (PlacementError, GpuBudgetError, CollectiveSetupError) as e:
        print(f"cannot start: {e}", file=sys.stderr)
        return 2
    except StorageError as e:
        print(f"storage error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if not storage_full(e):
            raise
        print(
            f"storage full: {e}; the previous checkpoint is intact and no temp file was left. Free space in "
            f"{cfg.run_dir}'s storage (or lower checkpoint.keep_last), then rerun the same command to resume",
            file=sys.stderr,
        )
        return EXIT_STORAGE_FULL
    return 0


def check_run_dir_for_jobs(run_dir: str) -> None:
    """Under `ray job submit` a relative run_dir lands in the job's temporary working directory, which the
    next attempt does not see: a config error, not a run that cannot resume."""
    if os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") and not is_uri(run_dir) and not Path(run_dir).is_absolute():
        raise ConfigError(
            f"run_dir={run_dir} is relative: under `ray job submit` it would be inside the job's "
            "temporary working directory and lost when the job is resubmitted; give an object-store "
            "URI (run_dir=s3://bucket/prefix) or an absolute path on storage every node reaches"
        )


if __name__ == "__main__":
    sys.exit(main())
