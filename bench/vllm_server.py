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
import urllib.error
import urllib.request
from pathlib import Path

__all__ = [
    "Server",
    "free_port",
    "page_commands",
    "section_commands",
    "parse_command",
    "DOCUMENTED_PORT",
    "SERVING_PAGE",
    "HARNESS_ONLY",
]

SERVING_PAGE = Path(__file__).resolve().parent.parent / "docs" / "serving.md"
# The section whose first command is the server, and the port its commands name.
SERVER_SECTION = "## The HTTP server"
DOCUMENTED_PORT = "8000"
# Set by make test-vllm and tests/serving_vllm/conftest.py for the tests' own engines; the server gets the documented
# command's settings instead (and extra_env's), so that it runs as a user's does.
HARNESS_ONLY = ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE")
HEREDOC = re.compile(r"<<'?(\w+)'?\s*$")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def page_commands(page: Path = SERVING_PAGE) -> list[tuple[str, int, list[str]]]:
    """``(section, line, commands)`` for each ```bash block of ``page``: the ``## `` section it is in, the page's line
    of its first command, and its commands as a shell reads them (continued lines joined, a heredoc with its
    command, comments left out)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, section, index = [], "", 0
    while index < len(lines):
        if lines[index].startswith("## "):
            section = lines[index]
        if lines[index] != "```bash":
            index += 1
            continue
        end = lines.index("```", index + 1)
        blocks.append((section, index + 2, _commands(lines[index + 1 : end])))
        index = end + 1
    return blocks


def _commands(lines: list[str]) -> list[str]:
    commands: list[str] = []
    index = 0
    while index < len(lines):
        command = lines[index]
        while command.endswith("\\"):
            index += 1
            command = command[:-1] + lines[index].lstrip()
        heredoc = HEREDOC.search(command)
        if heredoc:
            end = lines.index(heredoc.group(1), index + 1)
            command = "\n".join([command, *lines[index + 1 : end + 1]])
            index = end
        if command.strip() and not command.lstrip().startswith("#"):
            commands.append(command)
        index += 1
    return commands


def section_commands(section: str, page: Path = SERVING_PAGE) -> list[str]:
    """The commands of the bash blocks under the ``## `` heading ``section``, in order."""
    return [command for name, _, commands in page_commands(page) if name == section for command in commands]


def parse_command(command: str) -> tuple[dict[str, str], list[str]]:
    """``(environment, argv)`` of a one-line command: its ``NAME=value`` prefix as the environment."""
    words = shlex.split(command)
    environment = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, value = words.pop(0).split("=", 1)
        environment[name] = value
    return environment, words


class Server:
    """The server on ``folder``, bound to 127.0.0.1 on a free port, its output in ``log``; ready when constructed.
    Started with a command docs/serving.md prints (``command``; by default the one of "The HTTP server"), in the
    environment it sets and ``extra_env``, without the test harness's own vLLM settings (``HARNESS_ONLY``)."""

    def __init__(
        self,
        folder: Path,
        log: Path,
        extra_env: dict[str, str] | None = None,
        start_timeout: float = 300,
        extra_args: list[str] | None = None,
        command: str | None = None,
    ):
        self.port = free_port()
        self.folder = folder
        # The documented server command (default: the HTTP server's), with this folder and port.
        documented_environment, words = parse_command(command or section_commands(SERVER_SECTION)[0])
        command = [_as_run(word, folder, self.port) for word in _with_values(words)]
        command += extra_args or []  # more server flags: --tensor-parallel-size 2, --hf-overrides '{...}'
        self._start(command, {**documented_environment, **(extra_env or {})}, log, start_timeout)

    @classmethod
    def as_printed(
        cls,
        command: str,
        cwd: Path,
        log: Path,
        extra_env: dict[str, str] | None = None,
        start_timeout: float = 300,
    ) -> Server:
        """The documented ``command`` exactly as printed, run in ``cwd`` (which holds the folder it names as its
        model), on the port it names, with ``python`` found on the ``PATH`` (``extra_env``'s, else this process's)."""
        server = cls.__new__(cls)
        environment, words = parse_command(command)
        values = dict((flag, word) for word, flag in _with_values(words) if flag is not None)
        server.port, server.folder = int(values["--port"]), Path(values["--model"])
        server._start(words, {**environment, **(extra_env or {})}, log, start_timeout, cwd)
        return server

    def _start(
        self, command: list[str], settings: dict[str, str], log: Path, timeout: float, cwd: Path | None = None
    ) -> None:
        self.command = command
        environment = {name: value for name, value in os.environ.items() if name not in HARNESS_ONLY}
        self.environment = {**environment, **settings}
        self.log = log
        self.process = subprocess.Popen(
            command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=self.environment, cwd=cwd
        )
        self._wait(timeout)

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

    def post(self, path: str, body: dict, headers: dict[str, str] | None = None) -> dict:
        """The JSON answer to ``body`` (the served model named in it); an HTTP error raises ``HTTPError``."""
        with urllib.request.urlopen(self._request(path, body, headers), timeout=60) as response:
            return json.loads(response.read())

    def send(
        self, path: str, body: dict | bytes, headers: dict[str, str] | None = None
    ) -> tuple[int, object]:
        """The HTTP status and the answer (JSON, else text) to ``body`` (a dict, the served model named in it unless
        it names one, or raw bytes), an error status included."""
        try:
            with urllib.request.urlopen(self._request(path, body, headers), timeout=60) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def _request(
        self, path: str, body: dict | bytes, headers: dict[str, str] | None
    ) -> urllib.request.Request:
        data = body if isinstance(body, bytes) else json.dumps({"model": str(self.folder), **body}).encode()
        return urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            headers={"Content-Type": "application/json", **(headers or {})},
        )

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
