"""The run's placement group makes an autoscaler add the nodes it needs (issue 13, item 4).

Ray's fake multi-node provider (`RAY_FAKE_CLUSTER=1 ray start --head --autoscaling-config=...`) runs
the real autoscaler, which launches "nodes" as local raylet processes. The head has no CPUs, so the
two 1-CPU client bundles can only be placed once the autoscaler has added two `cpu_node`s.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from ray_helpers import final_sha, ft_config, metrics, ray_cli, run_driver, run_processes

PORT = 6379  # the fake provider's worker nodes join the head on Ray's default port


def autoscaling_config(max_workers: int) -> dict:
    return {
        "cluster_name": "fake_multinode",
        "max_workers": max_workers,
        "provider": {
            "type": "fake_multinode",
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
        },
        "auth": {"ssh_user": "ubuntu"},
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            "cpu_node": {"resources": {"CPU": 1}, "node_config": {}, "min_workers": 0, "max_workers": max_workers},
        },
        "head_node_type": "ray.head.default",
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 5,
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }


def raylets() -> int:
    return sum(1 for c in run_processes().values() if "/raylet " in c)


@pytest.fixture
def autoscaling_head(tmp_path):
    config = tmp_path / "autoscaling.json"
    config.write_text(json.dumps(autoscaling_config(max_workers=2)))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_FAKE_CLUSTER": "1"}
    env["PATH"] = os.path.dirname(ray_cli()) + os.pathsep + env.get("PATH", "")  # the provider calls `ray start`
    subprocess.run(
        [
            ray_cli(),
            "start",
            "--head",
            f"--port={PORT}",
            "--num-cpus=0",
            "--include-dashboard=false",
            f"--autoscaling-config={config}",
        ],
        check=True,
        capture_output=True,
        env=env,
        timeout=180,
    )
    try:
        yield f"127.0.0.1:{PORT}"
    finally:
        subprocess.run([ray_cli(), "stop", "--force"], capture_output=True, env=env, timeout=120)


@pytest.mark.heavy  # ~50 s
def test_the_autoscaler_adds_the_nodes_the_clients_need(autoscaling_head, ft_reference, digit_model_dir, tmp_path):
    assert raylets() == 1  # the head alone, with no CPU for a client
    cfg = ft_config(
        digit_model_dir,
        tmp_path / "run",
        "resources.cpus_per_client=1",
        "resources.placement_strategy=SPREAD",
        "resources.placement_timeout_s=300",
    )
    proc = run_driver(cfg, {"RAY_ADDRESS": autoscaling_head, "RAY_AUTH_MODE": "token"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert raylets() == 3  # two cpu_nodes were launched for the two client bundles
    assert [r["round"] for r in metrics(cfg.run_dir)] == [1, 2]
    assert final_sha(cfg.run_dir) == final_sha(ft_reference)
