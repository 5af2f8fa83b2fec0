"""cluster.yaml is a valid Ray autoscaler config (Ray's own schema) with a CPU head and GPU workers."""

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTER = yaml.safe_load((Path(__file__).resolve().parents[1] / "cluster.yaml").read_text())


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
