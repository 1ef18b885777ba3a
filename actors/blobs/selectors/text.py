"""``inspect`` on text blobs: the overview, ``lines:N-M`` and ``bytes:N..M``.

Line ranges seek through the store's line index and read at most about the
output cap; a line too long for the cap shows its beginning, and the marker
names the ``bytes:`` selector that reads on within the line.
"""

from __future__ import annotations

import uuid

from fore.actors.blobs.selectors.grammar import (
    Bytes,
    InspectError,
    Key,
    Overview,
    Pointer,
    Selector,
    Slice,
)
from fore.actors.blobs.selectors.reader import (
    PREVIEW_WIDTH,
    BlobReader,
    _cap,
    _decode,
    _lead_skip,
    _marker,
    _whole_chars,
    _wrong_type,
)
from fore.actors.blobs.summary import cut_utf8, plural, utf8_size
from fore.messages.blobs import BlobLimits

_PREVIEW_BYTES = PREVIEW_WIDTH * 4 + 4
"""Bytes read per preview line: enough for PREVIEW_WIDTH + 1 characters of any width."""


_TEXT_INSTEAD = (
    "use lines:N-M (1-based, inclusive) or lines:N- to read lines, or bytes:N..M for parts "
    "of long lines"
)


def _inspect_text(reader: BlobReader, key: uuid.UUID, sel: Selector, limits: BlobLimits) -> str:
    n = reader.line_count(key)
    desc = f"text ({plural(n, 'line')})"
    if isinstance(sel, Overview):
        return _text_overview(reader, key, n, limits)
    if isinstance(sel, Slice):
        raise _wrong_type("slice", "selects entries of a JSON array", desc, _TEXT_INSTEAD)
    if isinstance(sel, Key):
        raise _wrong_type("key", "selects a value of a JSON object", desc, _TEXT_INSTEAD)
    if isinstance(sel, Pointer):
        raise _wrong_type("pointer", "navigates JSON values", desc, _TEXT_INSTEAD)
    if n == 0:
        raise InspectError(f"Blob {key} is empty text (0 lines): there is nothing to read.")
    if isinstance(sel, Bytes):
        return _read_bytes_capped(reader, key, sel, limits)
    if sel.start > n:
        first = max(1, n - 49)
        raise InspectError(
            f"lines:{sel.start}-{'' if sel.end is None else sel.end} starts past the end: the "
            f"blob has {plural(n, 'line')}. Use a start between 1 and {n}, e.g. "
            f"lines:{first}-{n}."
        )
    end = n if sel.end is None else min(sel.end, n)
    return _read_lines_capped(reader, key, sel.start, end, limits)


def _text_overview(reader: BlobReader, key: uuid.UUID, n: int, limits: BlobLimits) -> str:
    out = [f"blob {key}", "type: text", f"size: {reader.size(key)} bytes", f"lines: {n}"]
    head = min(n, limits.head_lines)
    tail_start = max(head, n - limits.tail_lines)
    shown = [*range(head), *range(tail_start, n)]
    wanted = sorted({*shown, *(i + 1 for i in shown)})
    offsets = dict(zip(wanted, reader.line_offsets(key, wanted), strict=True))
    if head:
        out.append(f"── head (lines 1-{head}) ──")
        out.extend(_preview_line(reader, key, offsets[i], offsets[i + 1]) for i in range(head))
    if tail_start < n:
        out.append(f"── tail (lines {tail_start + 1}-{n}) ──")
        out.extend(
            _preview_line(reader, key, offsets[i], offsets[i + 1]) for i in range(tail_start, n)
        )
    if n:
        out.append(
            f"Read lines with lines:N-M (1-based, inclusive, e.g. lines:1-{min(n, 100)}) "
            "or lines:N- to the end."
        )
    return _cap("\n".join(out), limits, "read the text with lines:N-M")


def _preview_line(reader: BlobReader, key: uuid.UUID, start: int, stop: int) -> str:
    """One line for the overview: at most PREVIEW_WIDTH characters, read in bounded bytes."""
    if stop - start > _PREVIEW_BYTES:
        text = _decode(_whole_chars(reader.read_range(key, start, start + _PREVIEW_BYTES)))
        return text[:PREVIEW_WIDTH] + "…"
    line = _decode(reader.read_range(key, start, stop))
    if line.endswith("\n"):
        line = line.removesuffix("\n").removesuffix("\r")
    return line if len(line) <= PREVIEW_WIDTH else line[:PREVIEW_WIDTH] + "…"


def _read_lines_capped(
    reader: BlobReader, key: uuid.UUID, first: int, last: int, limits: BlobLimits
) -> str:
    """Lines ``first..last`` (1-based, inclusive) exactly, or the whole lines that fit.

    Two offset lookups and one read of at most the cap, however long the
    lines are: a range over the cap reads a cap-sized window and shows the
    whole lines in it.
    """
    cap = limits.inspect_output_cap
    start, stop = reader.line_offsets(key, [first - 1, last])
    if stop - start <= cap:
        return _decode(reader.read_range(key, start, stop))
    window = reader.read_range(key, start, start + cap)
    ends: list[int] = []  # window offsets just past each whole line
    pos = window.find(b"\n")
    while pos != -1:
        ends.append(pos + 1)
        pos = window.find(b"\n", pos + 1)
    # Drop whole lines until the shown ones plus the marker fit. (The shown
    # text ends a line, so the marker needs no newline of its own.)
    for count in range(len(ends), 0, -1):
        marker = _marker(limits, _lines_hint(first, first + count - 1, last)).removeprefix("\n")
        if ends[count - 1] + utf8_size(marker) <= cap:
            return _decode(window[: ends[count - 1]]) + marker
    # Not even the first line fits: show its beginning, and how to read on inside it.
    line_stop = stop if first == last else reader.line_offsets(key, [first])[0]
    return _long_line(window, first, last, start=start, stop=line_stop, limits=limits)


def _long_line(
    window: bytes, first: int, last: int, *, start: int, stop: int, limits: BlobLimits
) -> str:
    """The beginning of line ``first`` (bytes ``start..stop``), which alone exceeds the cap."""

    def marker(shown: int) -> str:
        hint = (
            f"line {first} alone is {stop - start} bytes, so only its beginning is shown; "
            f"read more of it with bytes:{start + shown}..{stop}"
        )
        if first < last:
            hint += f"; read on with lines:{first + 1}-{last}"
        return _marker(limits, hint)

    widest = marker(len(window))  # the longest numbers it can hold
    budget = limits.inspect_output_cap - utf8_size(widest)
    if budget <= 0:
        return cut_utf8(_decode(_whole_chars(window)), limits.inspect_output_cap, widest)
    shown = _whole_chars(window[:budget])
    return _decode(shown) + marker(len(shown))


def _lines_hint(first: int, shown_last: int, last: int) -> str:
    width = shown_last - first + 1
    nxt = shown_last + 1
    return (
        f"showing lines {first}-{shown_last} of {first}-{last}; "
        f"read on with lines:{nxt}-{min(last, shown_last + width)}"
    )


def _read_bytes_capped(reader: BlobReader, key: uuid.UUID, sel: Bytes, limits: BlobLimits) -> str:
    """Bytes ``sel.start..sel.stop`` as text, ends moved inward to character boundaries."""
    size = reader.size(key)
    shown_stop = "" if sel.stop is None else sel.stop
    if sel.start >= size:
        raise InspectError(
            f"bytes:{sel.start}..{shown_stop} starts past the end: the blob has {size} bytes. "
            f"Use a start between 0 and {size - 1}, e.g. bytes:{max(0, size - 4000)}..{size}."
        )
    stop = size if sel.stop is None else min(sel.stop, size)
    cap = limits.inspect_output_cap
    window = reader.read_range(key, sel.start, min(stop, sel.start + cap + 3))
    skip = _lead_skip(window)
    first = sel.start + skip
    if stop - first <= cap:
        body = window[skip : stop - sel.start]
        if stop < size:
            body = _whole_chars(body)
        if not body:
            raise InspectError(
                f"bytes:{sel.start}..{shown_stop} holds no whole character (a character is up "
                f"to 4 bytes); widen the range, e.g. bytes:{sel.start}..{sel.start + 4}."
            )
        return _decode(body)

    def marker(end: int) -> str:
        # The rest of the range, not a window: its own answer is capped again, with a
        # marker of its own, so following the markers reads every byte.
        return _marker(
            limits,
            f"showing bytes {first}..{end} of {sel.start}..{stop}; "
            f"read on with bytes:{end}..{stop}",
        )

    widest = marker(first + cap)
    budget = max(0, cap - utf8_size(widest))
    body = _whole_chars(window[skip : skip + budget])
    return _decode(body) + marker(first + len(body))
