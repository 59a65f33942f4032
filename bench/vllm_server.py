"""vLLM's OpenAI-compatible HTTP server on a pooled checkpoint, started with the command docs/serving.md prints (read
from the page, "The HTTP server"), with the checkpoint's folder for its model and a free port for its 8000. Used by
bench/serving.py and tests/serving_vllm; it binds 127.0.0.1 only, and stops the server on exit."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

__all__ = ["Server", "free_port", "documented_command", "DOCUMENTED_PORT", "SERVING_PAGE"]

SERVING_PAGE = Path(__file__).resolve().parent.parent / "docs" / "serving.md"
# The section whose first command is the server, and the port and model name that command names.
SERVER_SECTION = "## The HTTP server"
DOCUMENTED_PORT = "8000"
# Set by make test-vllm and tests/serving_vllm/conftest.py for the tests' own engines; the server gets the documented
# command's settings instead (and extra_env's), so that it runs as a user's does.
HARNESS_ONLY = ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def documented_command(page: Path = SERVING_PAGE) -> tuple[dict[str, str], list[str]]:
    """``(environment, argv)`` of the server command docs/serving.md prints: the first line of the first bash block
    under "The HTTP server", its ``NAME=value`` prefix as the environment."""
    text = page.read_text(encoding="utf-8")
    section = text[text.index(SERVER_SECTION) :]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    if block is None:
        raise ValueError(f"{page}: no bash block under {SERVER_SECTION!r}")
    words = shlex.split(block.group(1).splitlines()[0])
    environment = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, value = words.pop(0).split("=", 1)
        environment[name] = value
    return environment, words


class Server:
    """The server on ``folder``, bound to 127.0.0.1 on a free port, its output in ``log``; ready when constructed."""

    def __init__(
        self,
        folder: Path,
        log: Path,
        extra_env: dict[str, str] | None = None,
        start_timeout: float = 300,
        extra_args: list[str] | None = None,
    ):
        self.port = free_port()
        self.folder = folder
        documented_environment, words = documented_command()
        command = [_as_run(word, folder, self.port) for word in _with_values(words)]
        command += extra_args or []  # more server flags: --tensor-parallel-size 2, --hf-overrides '{...}'
        self.command = command
        environment = {name: value for name, value in os.environ.items() if name not in HARNESS_ONLY}
        self.environment = {**environment, **documented_environment, **(extra_env or {})}
        self.log = log
        self.process = subprocess.Popen(
            command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=self.environment
        )
        self._wait(start_timeout)

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the server exited ({self.process.returncode}):\n{self.log.read_text()[-4000:]}"
                )
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            time.sleep(1)
        self.stop()
        raise TimeoutError(f"the server did not answer in {timeout} s:\n{self.log.read_text()[-4000:]}")

    def post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=json.dumps({"model": str(self.folder), **body}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _with_values(words: list[str]) -> list[tuple[str, str | None]]:
    """Each word with the flag it is the value of (None for a flag or the program)."""
    return [
        (word, words[index - 1] if index and words[index - 1].startswith("--") else None)
        for index, word in enumerate(words)
    ]


def _as_run(item: tuple[str, str | None], folder: Path, port: int) -> str:
    """A documented word as the test runs it: this Python for ``python``, the folder for the model, a free port."""
    word, flag = item
    if flag is None and word == "python":
        return sys.executable
    if flag == "--model":
        return str(folder)
    if flag == "--port":
        if word != DOCUMENTED_PORT:
            raise ValueError(f"docs/serving.md's server command binds port {word}, not {DOCUMENTED_PORT}")
        return str(port)
    return word
