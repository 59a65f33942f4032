"""Zero-shot requests between ``pre_process`` and ``post_process``, each found again by what only it can show.

How vLLM 0.32 calls an IO processor (``vllm/entrypoints/pooling/pooling/io_processor.py``,
``PluginWithIOProcessorPlugins``): online, ``pre_process(prompt, request_id=ctx.request_id)`` on the server's event
loop, then, once the engine has answered every prompt, ``post_process(ctx.final_res_batch,
request_id=ctx.request_id)`` on a worker thread; offline (``LLM.encode``) both without a request id. Nothing else of
the request reaches ``post_process``. ``ctx.request_id`` is ``"pooling-"`` plus the ``X-Request-Id`` header (or the body's
``request_id``) when the client sends one (``BaseServing._base_request_id``): two requests in flight can share it (a
proxy that retries a request with its id), so a request id alone finds another request's state.

What ``post_process`` gets that is the request's own: the engine's outputs, each with the token ids of the prompt it
answers (``PoolingRequestOutput.prompt_token_ids``), in the order ``pre_process`` gave the prompts (vLLM's
``_collect_batch`` puts each result at its prompt's index). So a request is registered under its id *and* its prompts,
and found again by both. Two requests in flight under one id with the same prompts (the same texts and the same
uncached labels, with other ``multi_label``, names or cached labels) would still be ambiguous: the second gets one
more prompt, a tag (``tag(nonce)``: ids no tokenizer gives, from a counter), which makes its prompts its own. Prompts
that come back changed (vLLM truncates or pads a request's prompts when the request sets ``truncate_prompt_tokens``,
``truncation_side`` or ``padding``) match no request: the request is refused (HTTP 400), never answered with what
another request's or a cut label reads.

Requests the engine refuses after ``pre_process`` (or that the client abandons) never reach ``post_process``: at most
``MAX_IN_FLIGHT`` requests are kept, the oldest dropped first.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["InFlightRequests", "MAX_IN_FLIGHT", "Prompts"]

MAX_IN_FLIGHT = 4096
Prompts = tuple[tuple[int, ...], ...]  # the token ids of every prompt of a request, in order


@dataclass(eq=False)
class _Entry:
    request_id: str | None
    prompts: Prompts
    state: Any


class InFlightRequests:
    def __init__(self, limit: int = MAX_IN_FLIGHT):
        self.limit = limit
        self._by_id: dict[str | None, list[_Entry]] = {}
        self._oldest_first: OrderedDict[_Entry, None] = (
            OrderedDict()
        )  # entries compare by identity (eq=False)
        self._nonces = itertools.count(1)
        self._lock = threading.Lock()

    def add(
        self, request_id: str | None, prompts: Prompts, state: Any, tag: Callable[[int], tuple[int, ...]]
    ) -> Prompts:
        """Keep ``state`` until ``take``; returns the prompts to send: ``prompts``, and a tag prompt after them when a
        request in flight under the same id has the same prompts."""
        with self._lock:
            same_id = self._by_id.setdefault(request_id, [])
            sent = prompts
            if any(entry.prompts == sent for entry in same_id):
                sent = (*prompts, tag(next(self._nonces)))  # a nonce no other request in flight has
            entry = _Entry(request_id, sent, state)
            same_id.append(entry)
            self._oldest_first[entry] = None
            while len(self._oldest_first) > self.limit:
                self._forget(self._oldest_first.popitem(last=False)[0])
        return sent

    def take(self, request_id: str | None, prompts: Prompts) -> Any:
        """The state of the request in flight under ``request_id`` whose prompts are ``prompts`` (forgotten here)."""
        with self._lock:
            same_id = self._by_id.get(request_id, [])
            for entry in same_id:
                if entry.prompts == prompts:
                    del self._oldest_first[entry]
                    self._forget(entry)
                    return entry.state
            known = bool(same_id)
        if known:
            raise ValueError(
                "the engine ran other prompts than the zero-shot route sent for this request: vLLM truncates or pads "
                "a request's prompts when the request sets truncate_prompt_tokens, truncation_side or padding, which "
                "would cut the labels' texts; send the request without them."
            )
        raise RuntimeError(
            f"the zero-shot route no longer holds this request: more than {self.limit} requests were in flight at "
            "once (the oldest are dropped); send it again."
        )

    def __len__(self) -> int:
        with self._lock:
            return len(self._oldest_first)

    def _forget(self, entry: _Entry) -> None:
        same_id = self._by_id[entry.request_id]
        same_id.remove(entry)
        if not same_id:
            del self._by_id[entry.request_id]
