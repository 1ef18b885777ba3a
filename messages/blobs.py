"""Large tool outputs: what a tool produced and how it enters history.

A tool's output size is unpredictable. Small outputs go into history as they
are (:class:`Inline`); big ones go to the blob store and history keeps only a
short summary that names the blob (:class:`Stored`), which the model reads
piecewise with the ``inspect`` tool.

Both unions are tagged on ``kind`` and round-trip losslessly through JSON
(``model_dump_json`` / ``TypeAdapter(...).validate_json``), so a ``Stored``
output can be shipped between actors, logged and replayed unchanged.

The pure functions that build these values live in
:mod:`actors.blobs.summary` (``to_tool_output``, ``summarize``,
``history_text``); this module only holds the data.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, JsonValue, PositiveInt, TypeAdapter, field_validator

from fore.messages.base import Message

BlobKind = Literal["text", "structured"]
"""How a blob is stored: ``text`` (``<id>.txt``) or ``structured`` (``<id>.json``)."""


def _reject_non_finite(value: JsonValue) -> None:
    """Raise if ``value`` holds a NaN or an infinity anywhere.

    JSON has no spelling for them (pydantic would serialize them as ``null``),
    so accepting them would break the lossless round trip silently.
    """
    stack: list[JsonValue] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError("JSON values cannot hold NaN or infinity")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class Text(Message):
    """Blob content that is plain text (stored byte-exact as UTF-8)."""

    kind: Literal["text"] = "text"
    text: str


class Structured(Message):
    """Blob content that is a JSON value (usually an array or an object).

    The model is frozen, but ``value`` itself is an ordinary ``dict``/``list``:
    treat it as read-only -- it may be shared between threads.
    """

    kind: Literal["structured"] = "structured"
    value: JsonValue

    @field_validator("value")
    @classmethod
    def _finite(cls, value: JsonValue) -> JsonValue:
        _reject_non_finite(value)
        return value


Content = Annotated[Text | Structured, Field(discriminator="kind")]
"""What a blob holds: :class:`Text` or :class:`Structured`."""


class Inline(Message):
    """A small tool output that enters history verbatim."""

    kind: Literal["inline"] = "inline"
    text: str


class Stored(Message):
    """A large tool output: the full content goes to the blob store.

    ``summary`` is the summary *body* -- everything that follows
    ``[blob:<id>] `` in the history text -- so it can be computed before the
    blob has an id. The history text is ``history_text(id, summary)``, i.e.
    ``f"[blob:{id}] {summary}"``.
    """

    kind: Literal["stored"] = "stored"
    summary: str
    content: Content


ToolOutput = Annotated[Inline | Stored, Field(discriminator="kind")]
"""A tool's output as the worker sees it: :class:`Inline` or :class:`Stored`."""

CONTENT_ADAPTER: TypeAdapter[Text | Structured] = TypeAdapter(Content)
"""Validates / (de)serializes a :data:`Content` (e.g. ``CONTENT_ADAPTER.validate_json``)."""

TOOL_OUTPUT_ADAPTER: TypeAdapter[Inline | Stored] = TypeAdapter(ToolOutput)
"""Validates / (de)serializes a :data:`ToolOutput`."""


class BlobLimits(Message):
    """Thresholds of the blob machinery (defaults are the spec's table).

    * ``inline_threshold`` -- outputs whose UTF-8 size is at most this many
      bytes stay inline (800: exactly 800 bytes is inline, 801 is stored);
    * ``summary_cap`` -- maximum UTF-8 size of a summary body, ``…`` included;
    * ``head_lines`` / ``tail_lines`` -- lines shown by a text summary;
    * ``head_entries`` -- array elements shown by a ``json_array`` summary;
    * ``inspect_output_cap`` -- maximum UTF-8 size of one ``inspect`` answer,
      truncation marker included.
    """

    inline_threshold: PositiveInt = 800
    summary_cap: PositiveInt = 400
    head_lines: PositiveInt = 5
    tail_lines: PositiveInt = 3
    head_entries: PositiveInt = 2
    inspect_output_cap: PositiveInt = 16384
