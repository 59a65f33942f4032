"""The engine as deployed: vLLM's HTTP server with tensor parallelism (2 ranks) and data parallelism (2 engines) on the
CPU (gloo), each in vLLM's default multi-process engine, gives the scores of the single-process engine and of
transformers (1e-4, float32).

The checkpoint reads every layer (a layer pooling): under tensor parallelism vLLM's BERT layers are sharded across the
ranks, and the plugin's pooler and head (plain torch modules, whole on every rank) must read full-width states, which
vLLM's row-parallel layers all-reduce. Each server is one small engine: on a 2-core machine each costs tens of seconds
to start (every rank is a process importing torch and vLLM).
"""

import os
import re
import urllib.request

import pytest
import torch
from transformers import AutoTokenizer
from vllm_helpers import (
    TEXTS,
    TOLERANCE,
    Server,
    classify,
    offline_engine,
    save_checkpoint,
    section_commands,
    transformers_logits,
)


def omp_binding() -> str:
    """VLLM_CPU_OMP_THREADS_BIND for two ranks: one allowed CPU each ('|' separates the ranks' lists). vLLM's 'auto'
    binds each rank to a NUMA node of its own and refuses two ranks on a one-node machine."""
    cpus = sorted(os.sched_getaffinity(0))
    return f"{cpus[0]}|{cpus[-1]}" if len(cpus) > 1 else "nobind"


# Each deployment's server command, as docs/serving.md prints it ("Parallel engines"); the multi-process engine is
# vLLM's default (the test suite's environment turns it off for the in-process engines, and the server leaves that out).
DEPLOYMENTS = {
    deployment: next(command for command in section_commands("## Parallel engines") if flag in command)
    for deployment, flag in (
        ("tensor-parallel-2", "--tensor-parallel-size 2"),
        ("data-parallel-2", "--data-parallel-size 2"),
    )
}


@pytest.fixture(scope="module")
def checkpoint(minilm_path, tmp_path_factory):
    """A classifier reading every layer (weighted_layer) with a dense head, its transformers logits, and the scores
    of the single-process engine (this process)."""
    folder = tmp_path_factory.mktemp("parallel")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    save_checkpoint(folder, tokenizer, "weighted_layer", layer_token_pooling="mean", classifier_head="dense")
    with offline_engine(folder) as llm:
        single_process = classify(llm)
    return folder, transformers_logits(folder).softmax(-1), single_process


def requests_per_engine(server: Server) -> dict[str, float]:
    """Finished requests by engine index, from the server's Prometheus metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for labels, value in re.findall(r"^vllm:request_success_total\{([^}]*)\} (\S+)$", text, re.MULTILINE):
        engine = re.search(r'engine="(\d+)"', labels).group(1)
        counts[engine] = counts.get(engine, 0.0) + float(value)
    return counts


@pytest.mark.parametrize("deployment", sorted(DEPLOYMENTS))
def test_a_parallel_server_gives_the_single_process_scores(deployment, checkpoint, tmp_path):
    folder, expected, single_process = checkpoint
    # The page's '0|1' names this 2-core machine's cores; elsewhere, the first and the last core the test may use.
    environment = {"VLLM_CPU_OMP_THREADS_BIND": omp_binding()}
    with Server(
        folder, tmp_path / "server.log", extra_env=environment, command=DEPLOYMENTS[deployment]
    ) as server:
        answer = server.post("/pooling", {"input": TEXTS})  # one burst: spread over the data-parallel engines
        served_by = requests_per_engine(server)
    served = torch.tensor([item["data"] for item in sorted(answer["data"], key=lambda item: item["index"])])
    torch.testing.assert_close(served, single_process, atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(served, expected, atol=TOLERANCE, rtol=0)
    if deployment == "data-parallel-2":  # both engines answered part of the batch
        assert sorted(served_by) == ["0", "1"] and all(count > 0 for count in served_by.values()), served_by
