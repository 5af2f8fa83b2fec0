"""Generated code runs in pubswap/sandbox.py: a separate process with limits, in its own temporary
directory. Code that loops, forks, fills memory, reaches the network, or reads or deletes files
outside its directory is stopped and scored as a failure; nothing of it is left behind."""

import socket
import threading
import time

import psutil
import pytest

from pubswap.sandbox import network_namespace, run_program


def test_a_correct_program_passes_and_a_failing_one_fails():
    ok = run_program("def add(a, b):\n    return a + b\nassert add(2, 3) == 5\nprint('fine')\n")
    assert ok.passed and ok.reason == "passed" and ok.stdout == "fine\n"
    bad = run_program("def add(a, b):\n    return a - b\nassert add(2, 3) == 5\n")
    assert not bad.passed and bad.reason == "failed (exit 1)" and "AssertionError" in bad.stderr
    # its own directory is its to use, and the standard library is readable
    own = run_program("import json, collections\nopen('x.txt', 'w').write('1')\nassert open('x.txt').read() == '1'\n")
    assert own.passed, own.stderr


def test_an_endless_loop_is_stopped_at_the_time_limit_and_nothing_is_left():
    t = time.perf_counter()
    out = run_program("import time\nwhile True:\n    time.sleep(0.01)\n", timeout_s=2)
    assert not out.passed and out.reason == "timeout" and time.perf_counter() - t < 10
    assert not [p for p in psutil.process_iter(["cmdline"]) if "pubswap-sandbox-" in " ".join(p.info["cmdline"] or [])]


def test_filling_memory_fails_within_the_memory_limit():
    out = run_program("x = bytearray(4 * 1024**3)\n", memory_mb=512)
    assert not out.passed and "MemoryError" in out.stderr


@pytest.mark.parametrize(
    "program",
    [
        "import os\nos.fork()\n",
        "import subprocess\nsubprocess.run(['true'])\n",
        "import os\nos.system('true')\n",
        "import ctypes\nctypes.CDLL(None)\n",
    ],
)
def test_processes_and_native_calls_are_refused(program):
    out = run_program(program)
    assert not out.passed and "sandbox:" in out.stderr


def test_files_outside_its_directory_can_be_neither_read_nor_deleted(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the run's private rows")
    read = run_program(f"print(open({str(secret)!r}).read())\n")
    assert not read.passed and "private rows" not in read.stdout and "sandbox:" in read.stderr
    for program in (
        f"import os\nos.remove({str(secret)!r})\n",
        f"import shutil\nshutil.rmtree({str(tmp_path)!r})\n",
        f"open({str(tmp_path / 'new.txt')!r}, 'w').write('x')\n",
        f"import os\nos.open({str(tmp_path / 'new.txt')!r}, os.O_WRONLY | os.O_CREAT)\n",
        "import os\nprint(os.listdir('/'))\n",
    ):
        out = run_program(program)
        assert not out.passed and "sandbox:" in out.stderr, program
    assert secret.read_text() == "the run's private rows" and sorted(p.name for p in tmp_path.iterdir()) == [
        "secret.txt"
    ]


def test_the_network_is_unreachable():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(5)
    port = server.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True).start()
    out = run_program(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'x')\n")
    time.sleep(0.5)
    assert not out.passed and accepted in ([], [None])
    server.close()


def test_network_namespace_probe_is_a_bool():
    assert network_namespace() in (True, False)


def _accept(server):
    try:
        return server.accept()
    except OSError:
        return None
