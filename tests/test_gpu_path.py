"""The GPU path's decisions, tested without a GPU: the memory split of a card, the collective backend
and where its tensor lives, placement on an autoscaling cluster, and the one-line start errors."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.collective import CollectiveSetupError, check_backend_deps, choose_backend, tensor_device
from placement.groups import NodeType, never_fits, waiting_line
from pubswap.config import load_config
from pubswap.learner.gpu_budget import GIB, GpuBudgetError, engine_need, model_shape, plan, split_gpu, trainer_need

REPO = Path(__file__).resolve().parents[1]
QWEN3_17B = REPO / "configs" / "models" / "qwen3-1.7b.json"
PAPER = REPO / "configs" / "paper" / "qwen3-1.7b_math_pubswap-balanced_swap2_tau10.yaml"


@pytest.fixture(scope="module")
def qwen3():
    return model_shape(str(QWEN3_17B), 32, 64, ["all-linear"])


def test_model_shape_counts_what_the_real_model_has(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from pubswap.config import GRPOConfig, LoraConfig
    from pubswap.learner.trainer import GRPOTrainer

    shape = model_shape(str(tiny_model_dir), 8, 16, ["all-linear"])
    real = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    assert shape.params == sum(p.numel() for p in real.parameters())
    t = GRPOTrainer.load(str(tiny_model_dir), LoraConfig(r=8, alpha=16), GRPOConfig(), device="cpu")
    assert shape.lora_params == sum(p.numel() for p in t.trainable().values())


def test_qwen3_1_7b_shape(qwen3):
    assert qwen3.params == 1_720_574_976 and qwen3.lora_params == 34_865_152  # r=32 on all linear: 133 MiB fp32
    assert (qwen3.layers, qwen3.kv_dim, qwen3.vocab) == (28, 1024, 151_936)


def test_actors_sharing_a_card_split_it_and_vllm_gets_its_fraction_of_the_whole_card(qwen3):
    cfg = load_config(PAPER)
    one = plan(cfg, qwen3, 80 * GIB, 1.0, 1)
    half = plan(cfg, qwen3, 80 * GIB, 0.5, 1)
    assert one.engine_fraction == pytest.approx(0.5)  # rollout.gpu_memory_utilization of a whole card
    assert half.engine_fraction == pytest.approx(0.25)  # two engines on one card: 0.25 each, 0.5 together
    assert half.engine_bytes == pytest.approx(20 * GIB) and half.trainer_bytes == pytest.approx(20 * GIB)
    assert "0.5 of a 80.0 GiB card = 40.0 GiB; engine 20.0 GiB (vLLM gpu_memory_utilization=0.250" in half.line()


def test_a_split_that_cannot_fit_fails_with_the_numbers(qwen3):
    cfg = load_config(PAPER)
    with pytest.raises(GpuBudgetError) as e:
        plan(cfg, qwen3, 80 * GIB, 0.25, 1, card_name="H100")  # four actors per card
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(
        "GPU budget: a client actor gets 0.25 of a 80.0 GiB H100 = 20.0 GiB; the trainer has 10.0 "
        "GiB (the rest after the engine's 0.5 (rollout.gpu_memory_utilization)) but needs ~11.4 GiB"
    )
    assert "activations 4.3" in msg and "lower grpo.micro_batch_tokens" in msg
    # the same request fits once the engine sleeps while the trainer runs
    cfg.rollout.sleep_mode = True
    assert plan(cfg, qwen3, 80 * GIB, 0.25, 1).trainer_bytes == pytest.approx(19 * GIB)
    with pytest.raises(GpuBudgetError, match="its engine's 0.1 of that .* is 0.8 GiB but it needs >= 5.6 GiB"):
        split_gpu(32 * GIB, 0.25, 0.1, {}, engine_need(qwen3, "bfloat16", 3072, 1, 32, 32))


def test_gradient_checkpointing_and_micro_batch_tokens_bound_the_trainer(qwen3):
    full = sum(trainer_need(qwen3, "bfloat16", 1, 16384, 1024, False).values())
    ckpt = sum(trainer_need(qwen3, "bfloat16", 1, 16384, 1024, True).values())
    small = sum(trainer_need(qwen3, "bfloat16", 1, 4096, 1024, True).values())
    assert full > 5 * ckpt and small < ckpt
    # AdamW moments are per hosted client
    two = trainer_need(qwen3, "bfloat16", 2, 4096, 1024, True)["LoRA+AdamW"]
    assert two - trainer_need(qwen3, "bfloat16", 1, 4096, 1024, True)["LoRA+AdamW"] == 8 * qwen3.lora_params


def test_collective_backend_choice_and_tensor_device():
    assert choose_backend("gloo", 0) == "gloo" and choose_backend("gloo", 1) == "gloo"
    assert choose_backend("nccl", 0.5) == "nccl"
    with pytest.raises(CollectiveSetupError, match="nccl needs GPUs"):
        choose_backend("nccl", 0)
    assert tensor_device("nccl") == "cuda" and tensor_device("gloo") == "cpu"
    check_backend_deps("gloo", {"host": "n1", "cupy": False, "cuda": True})
    check_backend_deps("nccl", {"host": "n1", "cupy": True, "cuda": True})
    with pytest.raises(CollectiveSetupError, match=r"node n1 has none .*pip install 'cupy-cuda13x'"):
        check_backend_deps("nccl", {"host": "n1", "cupy": False, "cuda": True, "cupy_error": "ModuleNotFoundError"})


GPU_WORKER = NodeType("gpu_worker", {"CPU": 8.0, "GPU": 1.0}, 16)
HEAD = NodeType("head", {"CPU": 0.0}, 0)


def test_placement_rules_out_only_what_no_node_type_can_ever_hold():
    gpu = [{"CPU": 1.0, "GPU": 1.0}] * 4
    assert never_fits(gpu, [HEAD, GPU_WORKER], "PACK") is None  # a cold autoscaler: 0 GPU nodes now, 16 later
    assert never_fits(gpu, None, "PACK") is None  # node types unknown: wait
    assert "no node type can hold a bundle {'CPU': 1.0, 'GPU': 2.0}" in never_fits(
        [{"CPU": 1.0, "GPU": 2.0}], [HEAD, GPU_WORKER], "PACK"
    )
    assert "hold at most 16" in never_fits([{"CPU": 1.0, "GPU": 1.0}] * 17, [HEAD, GPU_WORKER], "SPREAD")
    assert never_fits([{"CPU": 1.0, "GPU": 0.5}] * 32, [GPU_WORKER], "PACK") is None  # two actors per card
    assert "STRICT_PACK" in never_fits(gpu, [GPU_WORKER], "STRICT_PACK")
    assert never_fits(gpu, [NodeType("any", {"CPU": 8.0, "GPU": 1.0}, -1)], "SPREAD") is None  # unbounded


def test_waiting_line_names_the_bundles_and_why():
    line = waiting_line([{"CPU": 8.0, "GPU": 1.0}] * 4, "PACK", 60, 1800, {"CPU": 8.0}, {"CPU": 8.0}, True)
    assert line == (
        "placement: waiting 60s of 1800s for 4 client bundles {'CPU': 8.0, 'GPU': 1.0} (PACK): need "
        "{'CPU': 32.0, 'GPU': 4.0}, cluster has {'CPU': 8.0, 'GPU': 0.0} ({'CPU': 8.0, 'GPU': 0.0} free); "
        "the autoscaler is adding nodes (a cold GPU node boots and installs its packages first: minutes)"
    )


def test_engine_adapters_live_in_node_local_storage_and_dead_owners_are_cleaned(tmp_path):
    from actors.rollout import ADAPTER_DIR_PREFIX, adapter_root, private_adapter_dir

    assert adapter_root("") == Path("/dev/shm") or not Path("/dev/shm").is_dir()
    assert adapter_root("/local/nvme") == Path("/local/nvme")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{ADAPTER_DIR_PREFIX}{dead.pid}-abc"
    stale.mkdir()
    alive = tmp_path / f"{ADAPTER_DIR_PREFIX}1-abc"  # pid 1 is alive
    alive.mkdir()
    mine = private_adapter_dir(tmp_path)
    assert mine.is_dir() and mine.name.startswith(f"{ADAPTER_DIR_PREFIX}{os.getpid()}-")
    assert not stale.exists() and alive.exists()


# --- the start errors, end to end: a real driver on a Ray head that advertises a GPU it does not have ----


@pytest.fixture(scope="module")
def fake_gpu_head():
    import shutil
    import tempfile

    from ray_helpers import ray_cli, stop_ray_in

    temp_dir = tempfile.mkdtemp(prefix="rg", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    subprocess.run(
        [
            ray_cli(),
            "start",
            "--head",
            "--port=6392",
            "--num-cpus=2",
            "--num-gpus=1",
            "--include-dashboard=false",
            f"--temp-dir={temp_dir}",
        ],
        check=True,
        capture_output=True,
        env=env,
        timeout=180,
    )
    try:
        yield "127.0.0.1:6392"
    finally:
        stop_ray_in(temp_dir)  # this cluster only, not every Ray on the machine
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.parametrize(
    "backend,gpus,actors,expected",
    [
        ("nccl", 1, 1, "cannot start: resources.collective_backend=nccl needs cupy on every GPU node"),
        # NCCL refuses two ranks on one device, but only at the first allreduce: refused before anything starts
        ("nccl", 0.5, 0, "config error: resources.collective_backend: nccl cannot place two ranks on one GPU"),
        ("gloo", 0.5, 0, "cannot start: resources.gpus_per_client=0.5, but torch on node"),
    ],
)
def test_a_gpu_run_that_cannot_start_says_why_in_one_line(
    fake_gpu_head, tiny_model_dir, tmp_path, backend, gpus, actors, expected
):
    run_dir = tmp_path / "run"
    env = {**os.environ, "RAY_ADDRESS": fake_gpu_head, "RAY_AUTH_MODE": "token", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.train",
            f"model.path={tiny_model_dir}",
            "model.dtype=float32",
            "model.max_prompt_len=256",
            "model.max_response_len=4",
            "lora.r=8",
            "lora.alpha=16",
            "grpo.K=2",
            "grpo.b=1",
            "federation.num_clients=2",
            "federation.rounds=1",
            "federation.tau=3",
            "data.tasks=[chain_sum]",
            "data.per_client=4",
            "data.public_size=2",
            "data.test_size=2",
            "rollout.backend=hf",
            f"resources.gpus_per_client={gpus}",
            f"resources.num_actors={actors}",
            "resources.cpus_per_client=0.5",
            f"resources.collective_backend={backend}",
            f"run_dir={run_dir}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith(("cannot start", "config error"))]
    assert len(errors) == 1 and errors[0].startswith(expected), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (run_dir / "checkpoints").exists()


def test_full_parameter_methods_budget_every_weight_and_each_clients_adamw(qwen3):
    """dsgd / chocosgd train every weight: fp32 weights + gradient, AdamW moments per hosted client and a
    frozen base for the KL term; seedflood's zeroth-order steps need neither gradients nor moments."""
    lora = trainer_need(qwen3, "bfloat16", 4, 4096, 1024, True)
    full = trainer_need(qwen3, "bfloat16", 4, 4096, 1024, True, full="adamw", kl_reference=True)
    zo = trainer_need(qwen3, "bfloat16", 4, 4096, 1024, True, full="zo")
    assert full["fp32 weights+grad"] == 8 * qwen3.params and full["AdamW"] == 4 * 8 * qwen3.params
    assert full["KL reference"] == 2 * qwen3.params and "LoRA+AdamW" not in full
    assert zo["fp32 weights+grad"] == 4 * qwen3.params and "AdamW" not in zo
    assert sum(lora.values()) < sum(zo.values()) < sum(full.values())
    # 4 clients of Qwen3-1.7B full-parameter on one 80 GiB card: the one-line refusal names AdamW
    cfg = load_config(PAPER, ["federation.method=dsgd", "rollout.backend=hf", "federation.num_clients=4"])
    with pytest.raises(GpuBudgetError, match=r"AdamW 51\.3"):
        plan(cfg, qwen3, 80 * GIB, 1.0, 4)
