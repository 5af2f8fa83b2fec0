"""Every command of the cluster guide (docs/cluster.md, and its short form in the README) that can run here
works as written; the others name files that exist (the local scaling example is not a cluster job). Training
commands are loaded with their overrides by our own config loader (as the driver would, inside a job) and must
keep their files in an object store.
"""

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from ray_helpers import ray_cli

from jobs import supervise
from jobs.train import check_run_dir_for_jobs
from pubswap.config import load_config
from pubswap.run.storage import is_uri

REPO = Path(__file__).resolve().parents[1]
IMAGE_ROOT = "/home/ray/pubswap/"  # where kuberay/Dockerfile puts the project


def cluster_commands() -> list[list[str]]:
    readme = (REPO / "README.md").read_text()
    guide = (REPO / "docs" / "cluster.md").read_text()
    section = (
        guide[: guide.index("## Scaling beyond four clients")]
        + readme[readme.index("## On a cluster") : readme.index("## Documentation")]
    )
    out = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for cmd in block.replace("\\\n", " ").splitlines():
            cmd = cmd.split(" #")[0].strip().rstrip("&").strip()
            if cmd:
                out.append(cmd)
    return out


def argv_after(cmd: str, marker: list[str]) -> list[str]:
    words = shlex.split(cmd.split("&&")[-1])
    i = next(i for i in range(len(words)) if words[i : i + len(marker)] == marker)
    return words[i + len(marker) :]


def test_the_section_has_the_commands_a_cluster_user_runs():
    cmds = cluster_commands()
    for expected in (
        "ray get-auth-token --generate",
        "ray up cluster.yaml",
        "ray dashboard cluster.yaml",
        "jobs.supervise",
        "kubectl apply -f kuberay/rayjob.yaml",
        "ray job submit",
        "ray down cluster.yaml",
    ):
        assert any(expected in c for c in cmds), expected


@pytest.mark.parametrize("cmd", [c for c in cluster_commands() if "jobs.train" in c])
def test_every_training_command_loads_and_keeps_its_files_in_an_object_store(cmd, monkeypatch):
    args = argv_after(cmd, ["python", "-m", "jobs.train"])
    config = args[args.index("--config") + 1]
    path = REPO / config.removeprefix(IMAGE_ROOT)
    assert path.is_file(), config
    cfg = load_config(str(path), [a for a in args[2:] if "=" in a and not a.startswith("-")])
    assert is_uri(cfg.run_dir)
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")  # as inside `ray job submit`
    check_run_dir_for_jobs(cfg.run_dir)
    if "jobs.supervise" in cmd:  # the supervisor finds the same run_dir (and would refuse a relative one)
        assert supervise.run_dir_of(argv_after(cmd, ["--"]), REPO) == cfg.run_dir


def test_every_file_a_command_names_exists():
    for cmd in cluster_commands():
        for word in shlex.split(cmd.replace("$(", "( ")):
            if word.endswith((".yaml", "Dockerfile")) and not word.startswith(IMAGE_ROOT):
                assert (REPO / word).is_file(), (cmd, word)


def test_ray_get_auth_token_generate_makes_the_token_cluster_yaml_copies(tmp_path):
    cmd = next(c for c in cluster_commands() if c.startswith("ray get-auth-token"))
    env = {**os.environ, "HOME": str(tmp_path)}
    proc = subprocess.run([ray_cli(), *shlex.split(cmd)[1:]], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    token = (tmp_path / ".ray" / "auth_token").read_text().strip()
    assert len(token) >= 32 and token == proc.stdout.strip()
    import yaml

    mounts = yaml.safe_load((REPO / "cluster.yaml").read_text())["file_mounts"]
    assert mounts["~/.ray/auth_token"] == "~/.ray/auth_token"
