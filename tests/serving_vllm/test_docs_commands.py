"""Every command docs/serving.md prints runs as printed, on this CPU machine: in a folder that holds the checkpoints the
commands name (sentiment, embedder, manuals, tagger, support, topics, intents), with `python` this venv's, in this machine's
environment without the test suite's own vLLM settings (make test-vllm's VLLM_CPU_KVCACHE_SPACE and
VLLM_ENABLE_V1_MULTIPROCESSING): what a command needs, it must say itself. A server is started as printed, on the port
it names, and the requests that follow it in its block are sent as printed (curl), each answered with JSON that is not
an error. The parallel engines' servers are started as printed by tests/serving_vllm/test_parallel.py.

Also: the documented server command sets what vLLM's CPU build needs to start on a machine whose memory is partly in
use (its KV cache size; vLLM's own config code, run here, says so), and its launcher prints no DeprecationWarning
(issue 42, item 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from label_helpers import ensure_zero_shot_entry_point
from transformers import AutoTokenizer
from vllm_helpers import LABELS, Server, save_checkpoint, tiny_backbone
from vllm_server import HARNESS_ONLY, page_commands, parse_command, section_commands

from pooled_models import (
    PooledForMultiTask,
    PooledForSequenceClassification,
    PooledForTokenClassification,
    PooledModel,
    PooledMultiTaskConfig,
)

RUN_ELSEWHERE = {"## Parallel engines": "tests/serving_vllm/test_parallel.py starts these servers as printed"}
BLOCKS = [block for block in page_commands() if block[0] not in RUN_ELSEWHERE]
SERVER = "vllm.entrypoints.launchers.api_server.entry"


@pytest.fixture(scope="module")
def checkpoints(minilm_path, tmp_path_factory):
    """The folder the commands run in, with every checkpoint they name, and their environment."""
    folder = tmp_path_factory.mktemp("docs_commands")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    save_checkpoint(folder / "sentiment", tokenizer, "mean")
    save_checkpoint(folder / "embedder", tokenizer, "mean", model_class=PooledModel)
    save_checkpoint(folder / "manuals", tokenizer, "mean", document_window=64, document_pooling="transformer")
    save_checkpoint(
        folder / "tagger", tokenizer, "mean", model_class=PooledForTokenClassification, id2label=LABELS
    )
    tasks = {
        "team": {"kind": "sequence", "id2label": LABELS},
        "entities": {"kind": "token", "id2label": LABELS},
    }
    torch.manual_seed(0)
    backbone = tiny_backbone("bert", len(tokenizer), tokenizer.pad_token_id)
    PooledForMultiTask(PooledMultiTaskConfig(backbone_config=backbone, tasks=tasks)).save_pretrained(
        folder / "support"
    )
    tokenizer.save_pretrained(folder / "support")
    for name, pooling in (("topics", "label_text"), ("intents", "label_tokens")):
        model = PooledForSequenceClassification.from_backbone(minilm_path, pooling=pooling, id2label=LABELS)
        model.save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
    environment = {name: value for name, value in os.environ.items() if name not in HARNESS_ONLY}
    environment["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), environment.get("PATH", "")])
    environment.update(ensure_zero_shot_entry_point(tmp_path_factory.mktemp("entry_point")))
    return folder, environment


@pytest.mark.parametrize("section, line, commands", BLOCKS, ids=[f"line{line}" for _, line, _ in BLOCKS])
def test_the_block_runs_as_printed(section, line, commands, checkpoints, tmp_path):
    folder, environment = checkpoints
    servers: dict[int, Server] = {}
    try:
        for index, command in enumerate(commands):
            where = f"docs/serving.md:{line} ({section}), command {index + 1}"
            if SERVER in command:
                log = tmp_path / f"server{index}.log"
                server = Server.as_printed(command, folder, log, extra_env=environment)
                servers[server.port] = server
                continue
            completed = subprocess.run(
                ["bash", "-c", command],
                cwd=folder,
                env=environment,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert completed.returncode == 0, (
                f"{where} failed:\n{completed.stdout[-3000:]}{completed.stderr[-3000:]}"
            )
            if command.startswith("curl"):
                answer = json.loads(completed.stdout)
                assert "error" not in answer and answer["data"], f"{where} answered {answer}"
    finally:
        for server in servers.values():
            server.stop()
    for server in servers.values():  # the launcher the page prints is not the deprecated one
        assert "DeprecationWarning" not in server.log.read_text()


def test_every_bash_block_of_the_page_runs_here_or_in_the_test_named():
    sections = {section for section, _, _ in page_commands()}
    assert set(RUN_ELSEWHERE) <= sections
    assert len(BLOCKS) >= 7 and all(commands for _, _, commands in BLOCKS)
    assert any(SERVER in command for command in section_commands("## Parallel engines"))


def test_the_documented_server_command_sets_a_kv_cache_size_so_vllm_cpu_needs_no_free_memory_share(
    checkpoints, monkeypatch
):
    """vLLM's CPU worker requires --gpu-memory-utilization (0.9) of the machine's memory to be free at start unless the
    KV cache's size is set (vllm/v1/worker/cpu_worker.py: `kv_cache_memory_bytes is None and requested > available`):
    the documented command's settings, applied by vLLM's own config code, set it."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    folder, _ = checkpoints
    settings, words = parse_command(section_commands("## The HTTP server")[0])
    for name in HARNESS_ONLY:
        monkeypatch.delenv(name, raising=False)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(folder)
    arguments = make_arg_parser(FlexibleArgumentParser()).parse_args(words[words.index("--model") :])
    config = AsyncEngineArgs.from_cli_args(arguments).create_engine_config()
    assert config.cache_config.kv_cache_memory_bytes == 2**30
    # Control: the same command without the page's settings leaves vLLM to ask for the share of free memory.
    for name in settings:
        monkeypatch.delenv(name)
    assert (
        AsyncEngineArgs.from_cli_args(arguments).create_engine_config().cache_config.kv_cache_memory_bytes
        is None
    )
