"""kuberay/raycluster.yaml and kuberay/rayjob.yaml hold what KubeRay's v1 CRDs require, boot locked down
(token auth, no public Service), run the project's pinned Ray in one image everywhere, and the RayJob's
entrypoint is a run our own config loader accepts, with a run_dir that outlives the cluster."""

import copy
import re
import shlex
from pathlib import Path

import pytest
import yaml

from pubswap.config import load_config
from pubswap.run.storage import is_uri
from tests.test_cluster_yaml import pins

REPO = Path(__file__).resolve().parents[1]
RAYCLUSTER = yaml.safe_load((REPO / "kuberay" / "raycluster.yaml").read_text())
RAYJOB = yaml.safe_load((REPO / "kuberay" / "rayjob.yaml").read_text())

# Read from KubeRay's CRDs (ray-operator/config/crd/bases, API ray.io/v1, 2026-08): the fields each
# object may have and those it must have. An unknown field is dropped by the API server's pruning.
CLUSTER_SPEC_FIELDS = {
    "authOptions",
    "autoscalerOptions",
    "enableInTreeAutoscaling",
    "gcsFaultToleranceOptions",
    "headGroupSpec",
    "headServiceAnnotations",
    "historyServerOptions",
    "managedBy",
    "networkPolicy",
    "rayVersion",
    "suspend",
    "tlsOptions",
    "upgradeStrategy",
    "workerGroupSpecs",
}
HEAD_FIELDS = {
    "enableIngress",
    "headService",
    "ingressOptions",
    "labels",
    "rayStartParams",
    "resources",
    "serviceType",
    "template",
}
WORKER_FIELDS = {
    "groupName",
    "idleTimeoutSeconds",
    "labels",
    "maxReplicas",
    "minReplicas",
    "numOfHosts",
    "priority",
    "rayStartParams",
    "replicas",
    "resources",
    "scaleStrategy",
    "suspend",
    "template",
}
WORKER_REQUIRED = {"groupName", "maxReplicas", "minReplicas", "template"}
AUTOSCALER_FIELDS = {
    "args",
    "command",
    "env",
    "envFrom",
    "idleTimeoutSeconds",
    "image",
    "imagePullPolicy",
    "resources",
    "securityContext",
    "upscalingMode",
    "version",
    "volumeMounts",
}
JOB_SPEC_FIELDS = {
    "activeDeadlineSeconds",
    "backoffLimit",
    "clusterSelector",
    "deletionStrategy",
    "entrypoint",
    "entrypointNumCpus",
    "entrypointNumGpus",
    "entrypointResources",
    "jobId",
    "managedBy",
    "metadata",
    "preRunningDeadlineSeconds",
    "rayClusterSpec",
    "runtimeEnvYAML",
    "shutdownAfterJobFinishes",
    "submissionMode",
    "submitterConfig",
    "submitterPodTemplate",
    "suspend",
    "ttlSecondsAfterFinished",
}


def containers(spec: dict) -> list[dict]:
    groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def cluster_spec_problems(spec: dict) -> list[str]:
    p = [f"unknown field spec.{k}" for k in set(spec) - CLUSTER_SPEC_FIELDS]
    head = spec.get("headGroupSpec")
    if not head or "template" not in head:
        return p + ["no headGroupSpec.template"]
    p += [f"unknown field headGroupSpec.{k}" for k in set(head) - HEAD_FIELDS]
    p += [f"unknown field autoscalerOptions.{k}" for k in set(spec.get("autoscalerOptions", {})) - AUTOSCALER_FIELDS]
    if head.get("serviceType", "ClusterIP") != "ClusterIP" or head.get("enableIngress"):
        p.append("the head (dashboard, Jobs API) is exposed outside the Kubernetes cluster")
    if (spec.get("authOptions") or {}).get("mode") != "token":
        p.append("token authentication is off")
    if not spec.get("enableInTreeAutoscaling"):
        p.append("no autoscaler")
    if spec.get("rayVersion") != pins()["ray"]:
        p.append(f"rayVersion {spec.get('rayVersion')} is not the pinned Ray {pins()['ray']}")
    gpus = 0
    for g in spec.get("workerGroupSpecs", []):
        p += [f"worker group lacks {k}" for k in WORKER_REQUIRED - set(g)]
        p += [f"unknown field workerGroupSpecs.{k}" for k in set(g) - WORKER_FIELDS]
        if not g.get("minReplicas", 0) <= g.get("replicas", g.get("minReplicas", 0)) <= g.get("maxReplicas", 0):
            p.append(f"worker group {g.get('groupName')}: replicas outside [minReplicas, maxReplicas]")
        for c in g["template"]["spec"]["containers"]:
            gpus += int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
    if not gpus:
        p.append("no GPU worker group")
    for c in containers(spec):
        if "RAY_AUTH_MODE" in {e.get("name") for e in c.get("env", [])}:
            p.append("RAY_AUTH_MODE set by hand next to authOptions")
        port = c.get("ports", [])
        if any("hostPort" in x for x in port):
            p.append("a hostPort exposes the node")
    return p


def test_raycluster_holds_what_kuberay_requires_and_is_locked_down():
    assert RAYCLUSTER["apiVersion"] == "ray.io/v1" and RAYCLUSTER["kind"] == "RayCluster"
    assert cluster_spec_problems(RAYCLUSTER["spec"]) == []


@pytest.mark.parametrize("breakage", ["no_auth", "loadbalancer", "typo", "other_ray", "no_max", "replicas"])
def test_the_check_catches_each_breakage(breakage):
    spec = copy.deepcopy(RAYCLUSTER["spec"])
    if breakage == "no_auth":
        del spec["authOptions"]
    elif breakage == "loadbalancer":
        spec["headGroupSpec"]["serviceType"] = "LoadBalancer"
    elif breakage == "typo":
        spec["workerGroupSpec"] = spec.pop("workerGroupSpecs")
    elif breakage == "other_ray":
        spec["rayVersion"] = "2.61.0"
    elif breakage == "no_max":
        del spec["workerGroupSpecs"][0]["maxReplicas"]
    else:
        spec["workerGroupSpecs"][0]["replicas"] = 17
    assert cluster_spec_problems(spec)


def test_rayjob_runs_on_the_same_cluster_spec_with_one_image():
    assert RAYJOB["apiVersion"] == "ray.io/v1" and RAYJOB["kind"] == "RayJob"
    spec = RAYJOB["spec"]
    assert set(spec) <= JOB_SPEC_FIELDS
    assert spec["rayClusterSpec"] == RAYCLUSTER["spec"]  # the same image, auth, groups: one thing to maintain
    images = {c["image"] for c in containers(spec["rayClusterSpec"])}
    assert len(images) == 1
    docker_from = re.search(r"^FROM rayproject/ray:(\S+)", (REPO / "kuberay" / "Dockerfile").read_text(), re.M)
    assert docker_from and docker_from.group(1).startswith(pins()["ray"] + "-py311")
    assert spec.get("shutdownAfterJobFinishes") and spec.get("backoffLimit", 0) >= 1


def test_rayjob_entrypoint_is_a_valid_run_whose_files_outlive_the_cluster():
    argv = shlex.split(RAYJOB["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "jobs.train"]
    config = argv[argv.index("--config") + 1]
    assert config.startswith("/home/ray/pubswap/")  # where kuberay/Dockerfile puts the project
    overrides = [a for a in argv[3:] if "=" in a and not a.startswith("--")]
    cfg = load_config(str(REPO / config.removeprefix("/home/ray/pubswap/")), overrides)
    assert is_uri(cfg.run_dir)  # a retried attempt runs on a new cluster: only object storage is still there
