"""A quiet console: the run's own lines, not the libraries' INFO/WARNING logs and progress bars.

By default the client actors (and their vLLM engines) run with vLLM, transformers, torch's C++ logger
and Python warnings at ERROR and without other libraries' progress bars, and the driver's Ray logger
at ERROR. The driver prints one line per step, one per round (with the time breakdown) and, on a
terminal, one progress bar over the round's steps. `PUBSWAP_VERBOSE=1` turns all of it back on.
"""

from __future__ import annotations

import logging
import os

VERBOSE_ENV = "PUBSWAP_VERBOSE"

# for the actors' processes (and every process they start)
QUIET_ENV = {
    "VLLM_LOGGING_LEVEL": "ERROR",
    "TRANSFORMERS_VERBOSITY": "error",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    "PYTHONWARNINGS": "ignore",
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "RAY_DEDUP_LOGS": "1",
}


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "").lower() not in ("", "0", "false", "no")


def actor_env() -> dict[str, str]:
    """What to add to the actors' environment (nothing when verbose; a value the user set wins)."""
    return {} if verbose() else {k: v for k, v in QUIET_ENV.items() if k not in os.environ}


def quiet_driver() -> int:
    """Quiet the driver's own libraries; returns the logging level for ray.init."""
    if verbose():
        return logging.INFO
    for key in (
        "TRANSFORMERS_VERBOSITY",
        "TORCH_CPP_LOG_LEVEL",
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "HF_DATASETS_DISABLE_PROGRESS_BARS",
    ):
        os.environ.setdefault(key, QUIET_ENV[key])
    try:  # read at import: if datasets is loaded already, switch its bars off directly
        from datasets.utils.logging import disable_progress_bar

        disable_progress_bar()
    except ImportError:
        pass
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    return logging.ERROR


def progress(total: int, desc: str):
    """A progress bar over a round's steps on a terminal (none in logs: `ray job logs`, files)."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        leave=False,
        disable=None if not verbose() else True,
        bar_format="{desc} {bar:20} {n_fmt}/{total_fmt} steps [{elapsed}<{remaining}]",
    )
