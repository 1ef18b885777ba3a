"""Turning tool outputs into history text: thresholds, summaries, references.

Pure functions, no I/O. The worker integration is::

    output = decide_tool_output(raw_value, limits)    # after post_tool_call hooks
    if isinstance(output, Inline):
        history = output.text                          # kept as is, whatever its size
    else:
        blob_id = store.store(output.content)          # via the blob-store actor
        history = history_text(blob_id, output.summary)
    # on a store failure: history = truncated_fallback(output.content, limits)

Summary formats (the *body*, i.e. what follows ``[blob:<id>] ``)::

    text | {N} lines             json_array | {N} entries      json_object | {N} keys
    ── head ──                   ── schema ──                  ── keys ──
    {first head_lines lines}     {key: type per line}          {key: type (size) per line}
    ── tail ──                   ── head ──
    {last tail_lines lines}      {head_entries elements,
                                  compact JSON, one per line}

Decisions the spec leaves open:

* Text: lines split on ``\\n``; a ``\\r`` right before a ``\\n`` is not shown
  (CRLF); a trailing newline does not add an empty line. The tail shows only
  lines the head did not, and there is no tail section at all when
  ``N <= head_lines``. Empty text renders as ``text | 0 lines`` alone.
* Array schema: a first element that is an object shows one ``key: type``
  line per key (``(object with no keys)`` if it has none); any other first
  element shows its type in parentheses, e.g. ``(string)``. An empty array
  renders as ``json_array | 0 entries`` alone.
* Object keys: strings, arrays and objects carry their size --
  ``name: string (12 chars)``, ``items: array (3 entries)``,
  ``meta: object (2 keys)``, singular for one (``1 key``); other values just
  their type. (The headers keep the spec's fixed ``{N} lines`` /
  ``{N} entries`` / ``{N} keys`` form.) An empty object
  renders as ``json_object | 0 keys`` alone.
* Type names are JSON Schema's: ``string``, ``integer``, ``number``,
  ``boolean``, ``null``, ``array``, ``object``.
* A key that is empty, has surrounding whitespace, a control character or
  ``": "`` is shown JSON-quoted so every line stays unambiguous.
* A structured scalar (only possible with an explicit ``Stored``) renders as
  ``json_{type}`` (``json_string | {N} chars`` for strings), ``── value ──``
  and its compact JSON.
* The cap (``summary_cap`` bytes, UTF-8) applies to the whole body; a longer
  body is cut on a character boundary and ends with ``…``, the result
  including ``…`` being at most the cap.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterable

from pydantic import BaseModel, JsonValue

from fore.actors.blobs.fs_store import ENCODING, ENCODING_ERRORS, parse_blob_id
from fore.actors.blobs.json_index import describe_shape, json_type_name, value_shape
from fore.actors.blobs.line_index import count_lines
from fore.messages.blobs import BlobLimits, Content, Inline, Stored, Structured, Text, ToolOutput

DEFAULT_LIMITS = BlobLimits()
ELLIPSIS = "…"
RULE_HEAD = "── head ──"
RULE_TAIL = "── tail ──"
RULE_SCHEMA = "── schema ──"
RULE_KEYS = "── keys ──"
RULE_VALUE = "── value ──"

BLOB_REF_RE = re.compile(
    r"\[blob:([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\]"
)
"""Matches a ``[blob:<uuid>]`` reference; group 1 is the id."""


# ---------------------------------------------------------------- utf-8 sizes


def utf8_size(text: str) -> int:
    """Size of ``text`` in UTF-8 bytes (lone surrogates count 3, as stored)."""
    return len(text.encode(ENCODING, ENCODING_ERRORS))


def fits_utf8(text: str, max_bytes: int) -> bool:
    """Whether ``utf8_size(text) <= max_bytes``, without encoding a huge text."""
    if len(text) > max_bytes:  # every character is at least one byte
        return False
    return len(text) * 4 <= max_bytes or utf8_size(text) <= max_bytes


def cut_utf8(text: str, max_bytes: int, marker: str = ELLIPSIS) -> str:
    """``text`` if it fits in ``max_bytes``, else a prefix + ``marker`` that fits.

    The cut is on a character boundary (never inside a multi-byte
    character) and the result, marker included, is at most ``max_bytes``
    bytes. If even the marker does not fit, the text is cut without it.
    Cost is bounded by ``max_bytes``, not by the size of ``text``.
    """
    if max_bytes < 0:
        raise ValueError("max_bytes must be >= 0")
    if len(text) * 4 <= max_bytes:  # a character is at most 4 bytes
        return text
    head = text[: max_bytes + 1]  # enough characters to exceed max_bytes if text does
    data = head.encode(ENCODING, ENCODING_ERRORS)
    if len(data) <= max_bytes and len(head) == len(text):
        return text
    marker_size = utf8_size(marker)
    if marker_size > max_bytes:
        return _cut_bytes(data, max_bytes)
    return _cut_bytes(data, max_bytes - marker_size) + marker


def _cut_bytes(data: bytes, limit: int) -> str:
    """The longest prefix of UTF-8 ``data`` of at most ``limit`` bytes, decoded."""
    end = min(limit, len(data))
    while end > 0 and end < len(data) and (data[end] & 0xC0) == 0x80:
        end -= 1  # never start the cut inside a continuation byte sequence
    return data[:end].decode(ENCODING, ENCODING_ERRORS)


# ------------------------------------------------------------------ json bits


def compact_json(value: JsonValue) -> str:
    """Compact JSON (no spaces, non-ASCII kept): the format of stored blobs."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``1 key``, ``2 keys``, ``0 entries`` (``plural_form`` when not just ``+s``)."""
    word = singular if count == 1 else (plural_form or singular + "s")
    return f"{count} {word}"


def with_article(word: str) -> str:
    """``a string``, ``an integer``, ``an object`` (for type names in messages)."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def describe_value(value: JsonValue) -> str:
    """A value's type with its size: ``string (12 chars)``, ``array (3 entries)``."""
    return describe_shape(value_shape(value))


def render_key(key: str) -> str:
    """A key as shown in ``key: type`` lines, JSON-quoted when it would be ambiguous."""
    if not key or key != key.strip() or ": " in key or any(ord(c) < 32 for c in key):
        return json.dumps(key, ensure_ascii=False)
    return key


# ---------------------------------------------------------------- conversion


def _parse_json_container(text: str) -> JsonValue | None:
    """``text`` parsed if it is strictly a JSON array or object, else ``None``.

    Strict means: no NaN/Infinity (nor numbers that overflow to infinity) and
    no duplicate keys -- they would make the stored value differ from what
    the tool printed, or be unstorable as JSON.
    """
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return None

    def no_constants(name: str) -> JsonValue:
        raise ValueError(name)

    def finite_float(literal: str) -> float:
        number = float(literal)
        if not math.isfinite(number):  # 1e400 overflows to inf
            raise ValueError(literal)
        return number

    def no_duplicates(pairs: list[tuple[str, JsonValue]]) -> dict[str, JsonValue]:
        result = dict(pairs)
        if len(result) != len(pairs):
            raise ValueError("duplicate key")
        return result

    try:
        value: JsonValue = json.loads(
            text,
            parse_constant=no_constants,
            parse_float=finite_float,
            object_pairs_hook=no_duplicates,
        )
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, list | dict) else None


def to_tool_output(
    value: str | JsonValue | Inline | Stored, limits: BlobLimits = DEFAULT_LIMITS
) -> ToolOutput:
    """Convert whatever a tool returned into a :data:`ToolOutput`.

    * an :class:`Inline`/:class:`Stored` passes through unchanged (a tool
      that wants to control its summary builds a ``Stored`` itself);
    * a ``str`` of at most ``inline_threshold`` UTF-8 bytes is ``Inline``;
      a larger one that parses as a JSON array or object becomes
      ``Stored(Structured)``, any other ``Stored(Text)``;
    * any other JSON value (dict, list, number, ...) is measured as compact
      JSON: ``Inline(compact JSON)`` if small, else ``Stored(Structured)``.

    Raises ``pydantic.ValidationError`` (a ``ValueError``) for values that
    are not JSON (tuples, sets, non-string keys, NaN, ...).
    """
    if isinstance(value, Inline | Stored):
        return value
    if isinstance(value, str):
        if fits_utf8(value, limits.inline_threshold):
            return Inline(text=value)
        parsed = _parse_json_container(value)
        content: Content = (
            Text(text=value) if parsed is None else Structured.model_construct(value=parsed)
        )
        return Stored(summary=summarize(content, limits), content=content)
    structured = Structured(value=value)
    text = compact_json(structured.value)
    if fits_utf8(text, limits.inline_threshold):
        return Inline(text=text)
    return Stored(summary=summarize(structured, limits), content=structured)


def decide_tool_output(value: object, limits: BlobLimits = DEFAULT_LIMITS) -> ToolOutput:
    """The worker's decision for one tool result: keep it inline, or store it.

    Returns ``Inline(text)`` -- history keeps ``text`` as it is -- or
    ``Stored(summary, content)`` -- store ``content`` and put
    ``history_text(id, summary)`` in history, ``summary`` being at most
    ``summary_cap`` UTF-8 bytes. Total: never raises.

    * an explicit :class:`Inline` stays inline *whatever its size*: the tool
      decided (``inspect`` returns its capped answer this way, so it is not
      stored again as a blob of a blob);
    * an explicit :class:`Stored` is stored with its own content unchanged --
      a ``Structured`` stays structured, even a scalar or a small one -- and
      its own summary cut to the cap on a character boundary (``…`` marks
      the cut); a blank summary is replaced by the computed one;
    * a ``str`` or any JSON value goes through :func:`to_tool_output`
      (threshold, JSON detection, computed summary);
    * a pydantic model is dumped to JSON first; anything else that is not
      JSON (tuples, sets, NaN, ...) is treated as its ``str()``.
    """
    if isinstance(value, Inline):
        return value
    if isinstance(value, Stored):
        summary = value.summary
        if not summary.strip():
            summary = summarize(value.content, limits)
        else:
            summary = cut_utf8(summary, limits.summary_cap)
        if summary == value.summary:
            return value
        return value.model_copy(update={"summary": summary})
    if isinstance(value, BaseModel):
        try:
            value = value.model_dump(mode="json")
        except Exception:  # a model that cannot be dumped is still an output
            value = str(value)
    if isinstance(value, str):
        return to_tool_output(value, limits)
    try:
        return to_tool_output(value, limits)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return to_tool_output(str(value), limits)


# ----------------------------------------------------------------- summaries


class _Body:
    """Lines of a summary body that stop growing once the cap is surely exceeded.

    A body longer than ``cap`` characters is longer than ``cap`` bytes, so
    anything appended after that point would be cut anyway; stopping early
    keeps summaries of huge objects (100k keys) cheap.
    """

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._lines: list[str] = []
        self._chars = -1

    @property
    def full(self) -> bool:
        return self._chars > self._cap

    def add(self, line: str) -> None:
        if self.full:
            return
        line = line[: self._cap + 1]
        self._lines.append(line)
        self._chars += len(line) + 1

    def text(self) -> str:
        return "\n".join(self._lines)


def summarize(content: Content, limits: BlobLimits = DEFAULT_LIMITS) -> str:
    """The summary body of ``content`` (module docstring), capped at ``summary_cap``."""
    body = _Body(limits.summary_cap)
    if isinstance(content, Text):
        _summarize_text(content.text, limits, body)
    else:
        _summarize_json(content.value, limits, body)
    return cut_utf8(body.text(), limits.summary_cap)


def text_head_tail(text: str, head: int, tail: int, width: int) -> tuple[int, list[str], list[str]]:
    """``(line count, first head lines, last tail lines not in the head)``.

    Lines are display lines: no terminator, no ``\\r`` of a CRLF, each cut to
    at most ``width`` characters. Works with ``find``/``rfind`` so that a
    100 MB text costs a ``count``, not a ``split``.
    """
    n = count_lines(text)
    terminated = text.endswith("\n")

    def line_at(start: int, end: int, has_newline: bool) -> str:
        if has_newline and end > start and text[end - 1] == "\r":
            end -= 1
        return text[start : min(end, start + width)]

    head_lines: list[str] = []
    pos = 0
    for _ in range(min(head, n)):
        nl = text.find("\n", pos)
        if nl < 0:
            head_lines.append(line_at(pos, len(text), False))
            break
        head_lines.append(line_at(pos, nl, True))
        pos = nl + 1
    tail_lines: list[str] = []
    end = len(text) - 1 if terminated else len(text)
    last = True
    for _ in range(max(0, min(tail, n - head))):
        nl = text.rfind("\n", 0, end)
        tail_lines.append(line_at(nl + 1, end, terminated or not last))
        last = False
        end = nl
    tail_lines.reverse()
    return n, head_lines, tail_lines


def _summarize_text(text: str, limits: BlobLimits, body: _Body) -> None:
    n, head, tail = text_head_tail(text, limits.head_lines, limits.tail_lines, limits.summary_cap)
    body.add(f"text | {n} lines")
    if head:
        body.add(RULE_HEAD)
        for line in head:
            body.add(line)
    if tail:
        body.add(RULE_TAIL)
        for line in tail:
            body.add(line)


def schema_lines(first: JsonValue) -> list[str]:
    """The ``── schema ──`` lines for an array whose first element is ``first``."""
    if isinstance(first, dict):
        if not first:
            return ["(object with no keys)"]
        return [f"{render_key(k)}: {json_type_name(v)}" for k, v in first.items()]
    return [f"({json_type_name(first)})"]


def _summarize_json(value: JsonValue, limits: BlobLimits, body: _Body) -> None:
    if isinstance(value, list):
        body.add(f"json_array | {len(value)} entries")
        if value:
            body.add(RULE_SCHEMA)
            for line in schema_lines(value[0]):
                if body.full:
                    break
                body.add(line)
            body.add(RULE_HEAD)
            for item in value[: limits.head_entries]:
                if body.full:
                    break
                body.add(compact_json(item))
    elif isinstance(value, dict):
        body.add(f"json_object | {len(value)} keys")
        if value:
            body.add(RULE_KEYS)
            for key, item in value.items():
                if body.full:
                    break
                body.add(f"{render_key(key)}: {describe_value(item)}")
    else:
        header = f"json_{json_type_name(value)}"
        if isinstance(value, str):
            header += f" | {len(value)} chars"
        body.add(header)
        body.add(RULE_VALUE)
        body.add(compact_json(value))


# ---------------------------------------------------------------- references


def history_text(blob_id: uuid.UUID | str, summary: str) -> str:
    """The history text of a stored output: ``[blob:<canonical id>] <summary>``.

    Raises :class:`actors.blobs.fs_store.InvalidBlobId` for a non-UUID id.
    """
    return f"[blob:{parse_blob_id(blob_id)}] {summary}"


def referenced_blob_ids(texts: Iterable[str]) -> set[uuid.UUID]:
    """Every blob id referenced as ``[blob:<uuid>]`` anywhere in ``texts``.

    Feed it the tool-result outputs (or, to be conservative, every item's
    text) of every live session's history; the result is what
    ``FsBlobStore.collect`` must keep. Matching anywhere, not only at the
    start of a text, errs on the side of keeping blobs.
    """
    found: set[uuid.UUID] = set()
    for text in texts:
        for match in BLOB_REF_RE.finditer(text):
            found.add(uuid.UUID(match.group(1)))
    return found


def truncated_fallback(
    content: Content,
    limits: BlobLimits = DEFAULT_LIMITS,
    *,
    reason: str = "the blob store failed",
) -> str:
    """History text for a large output that could not be stored.

    The content (text, or compact JSON) cut to ``inspect_output_cap`` bytes
    with a marker saying it was truncated and why -- never the full output.
    """
    text = content.text if isinstance(content, Text) else compact_json(content.value)
    size = utf8_size(text)
    marker = f"\n…[output truncated to {limits.inspect_output_cap} of {size} bytes: {reason}]"
    return cut_utf8(text, limits.inspect_output_cap, marker)
