"""User text and numbers as the card shows them."""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["code_span", "rounded"]

LINE_BREAK = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # what str.splitlines() splits on


BACKTICKS = re.compile(r"`+")


def code_span(text: Any, table: bool = False) -> str:
    """``text`` as a Markdown code span that shows it as it is, for user text in the card (label names, settings).

    A backtick would end a span opened with one, so the span is fenced by one backtick more than the longest run
    inside, padded with spaces when the text starts or ends with a backtick or a space (CommonMark strips one space
    from each side). Line breaks, which would end a table row or start a new block, are shown escaped (``\\n``);
    train.py refuses labels holding them, but a config written by other code may have one. In a table cell (``table``)
    a ``|`` is escaped as ``\\|``, which GitHub-flavoured Markdown reads as a pipe even inside a code span."""
    text = LINE_BREAK.sub(lambda match: repr(match.group())[1:-1], str(text))
    if table:
        text = text.replace("|", "\\|")
    fence = "`" * (1 + max((len(run) for run in BACKTICKS.findall(text)), default=0))
    padding = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{padding}{text}{padding}{fence}"


def rounded(value: float) -> float | str:
    """A metric as the card shows it: 4 decimals, or ``n/a`` when it is undefined."""
    return (
        "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 4)
    )
