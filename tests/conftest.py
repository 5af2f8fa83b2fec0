import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test leaves os.environ as it found it. vLLM (and `import vllm`) rewrites the calling
    process's environment: LD_PRELOAD of torch's libgomp, LD_LIBRARY_PATH, VLLM_CPU_KVCACHE_SPACE,
    TORCHINDUCTOR_* and more. The drivers and Ray heads later tests start copy os.environ, and a
    driver started with that environment trains to different bits than the reference it is compared
    with, so one in-process engine made every later bitwise drill fail."""
    import os

    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def digit_model_dir(tmp_path_factory):
    from tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("digit_model"), digits_only=True)


@pytest.fixture(scope="session")
def base_model_dir(tmp_path_factory):
    """The digit model with a base model's tokenizer: no chat template."""
    from tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("base_model"), digits_only=True, chat_template=False)


@pytest.fixture(scope="session")
def ft_reference_of(digit_model_dir, tmp_path_factory):
    """Uninterrupted fault-tolerance reference runs (see ray_helpers.ft_config), each made once per
    session: `ft_reference_of(*overrides)` is the run dir of the run with those extra overrides."""
    from ray_helpers import ft_config, metrics, run_driver

    made = {}

    def reference(*overrides: str):
        if overrides not in made:
            run_dir = tmp_path_factory.mktemp("ft-ref") / "reference"
            proc = run_driver(ft_config(digit_model_dir, run_dir, *overrides))
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert all(r["recoveries"] == 0 for r in metrics(run_dir))
            made[overrides] = run_dir
        return made[overrides]

    return reference


@pytest.fixture(scope="session")
def ft_reference(ft_reference_of):
    """The uninterrupted run with ft_config's defaults; its run dir."""
    return ft_reference_of()


@pytest.fixture(scope="module")
def local_ray():
    """Ray in this process (2 CPUs, no dashboard) for the tests of one module."""
    import ray
    from ray_helpers import RAY_ENV

    ray.init(num_cpus=2, include_dashboard=False, runtime_env=RAY_ENV)
    yield
    ray.shutdown()


@pytest.fixture
def ray_head():
    """A local `ray start --head` cluster (2 CPUs, dashboard on 127.0.0.1); yields the dashboard address."""
    import os
    import shutil
    import subprocess
    import tempfile

    from ray_helpers import ray_cli, stop_ray_in

    port, dash = 6390, 8275
    temp_dir = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's socket paths must fit 107 chars
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    subprocess.run(
        [
            ray_cli(),
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=true",
            f"--dashboard-port={dash}",
            "--dashboard-host=127.0.0.1",
            f"--temp-dir={temp_dir}",
        ],
        check=True,
        capture_output=True,
        env=env,
        timeout=180,
    )
    try:
        yield f"http://127.0.0.1:{dash}"
    finally:
        stop_ray_in(temp_dir)  # this cluster only, not every Ray on the machine
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server (moto's standalone server) on 127.0.0.1 with a bucket `runs`; yields the
    environment a driver needs to reach it (endpoint, credentials, region)."""
    import os
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).with_name("moto_server")
    log = open(tmp_path_factory.mktemp("moto") / "server.log", "w")
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start (exit {proc.poll()})") from None
                time.sleep(0.2)
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # this process's pyarrow reads them too
        import pyarrow.fs as pafs

        pafs.S3FileSystem(
            allow_bucket_creation=True,
            endpoint_override=f"127.0.0.1:{port}",
            scheme="http",
            access_key="test",
            secret_key="test",
            region="us-east-1",
        ).create_dir("runs")
        yield env
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
