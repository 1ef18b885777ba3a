"""A sparse line index for text blobs, so a line range is a seek, not a scan.

``inspect`` reads line ranges of text blobs that may be 100 MB and millions of
lines long. Scanning the blob for newlines on every call would cost hundreds
of milliseconds; keeping the offset of *every* line would cost 8 bytes per
line. The compromise: remember the byte offset of every ``stride``-th line
(128 by default -- 2 million lines give ~125 KB of index). Reading lines
``start..stop`` seeks to the nearest indexed line at or before ``start`` and
skips at most ``stride - 1`` lines.

Lines follow the one definition used by the whole blob package: a line ends
with ``\\n`` (which belongs to it, together with a ``\\r`` before it); the
last line may lack the terminator; a trailing newline does not start an
extra empty line. ``""`` has 0 lines, ``"a"`` and ``"a\\n"`` have 1.

Sidecar format (``<id>.lines``, little-endian)::

    8 bytes   magic  b"FORELIX1"
    uint64    stride
    uint64    size of the text blob in bytes (detects a stale index)
    uint64    line count
    uint64[]  offsets: offsets[i] is the byte offset of line i * stride
"""

from __future__ import annotations

import mmap
import re
import struct
import sys
from array import array
from dataclasses import dataclass
from typing import IO

INDEX_STRIDE = 128
"""Default distance (in lines) between two indexed lines."""

SKIP_CHUNK = 64 * 1024
"""Bytes read at a time while skipping a line: a 100 MB line is never held in memory."""

_MAGIC = b"FORELIX1"
_HEADER = struct.Struct("<8sQQQ")
_NL = 0x0A
_BIG_ENDIAN = sys.byteorder == "big"
_PATTERNS: dict[int, re.Pattern[bytes]] = {}


def _stride_pattern(stride: int) -> re.Pattern[bytes]:
    """A regex matching exactly ``stride`` complete lines.

    Matching ``stride`` lines per regex call keeps the Python-level loop to
    one iteration per *indexed* line: ~0.1 s for 100 MB instead of ~1 s for a
    ``find`` per newline. Each match is anchored (``match`` at a position), so
    a short remainder is never rescanned from every start position.
    """
    pattern = _PATTERNS.get(stride)
    if pattern is None:
        pattern = re.compile(rb"(?:[^\n]*\n){%d}" % stride)
        _PATTERNS[stride] = pattern
    return pattern


def count_lines(data: bytes | str) -> int:
    """Number of lines of ``data`` under the package's line definition."""
    if not data:
        return 0
    if isinstance(data, bytes):
        return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    return data.count("\n") + (0 if data.endswith("\n") else 1)


@dataclass(frozen=True)
class LineIndex:
    """Byte offsets of every ``stride``-th line of one text blob.

    Immutable once built, so one instance can be cached and shared by every
    reader thread.
    """

    stride: int
    size: int
    line_count: int
    offsets: tuple[int, ...]

    @classmethod
    def build(
        cls, data: bytes | bytearray | memoryview | mmap.mmap, stride: int = INDEX_STRIDE
    ) -> LineIndex:
        """Index ``data`` (bytes or any buffer, e.g. an ``mmap`` of the blob)."""
        if stride <= 0:
            raise ValueError("stride must be positive")
        view = memoryview(data)
        size = view.nbytes
        match = _stride_pattern(stride).match
        offsets = [0]
        pos = 0
        while (found := match(view, pos)) is not None:
            pos = found.end()
            offsets.append(pos)
        rest = bytes(view[pos:])
        view.release()
        newlines = (len(offsets) - 1) * stride + rest.count(b"\n")
        trailing = 1 if rest and rest[-1] != _NL else 0
        return cls(stride=stride, size=size, line_count=newlines + trailing, offsets=tuple(offsets))

    def to_bytes(self) -> bytes:
        """The sidecar encoding (see the module docstring)."""
        body = array("Q", self.offsets)
        if _BIG_ENDIAN:
            body.byteswap()
        header = _HEADER.pack(_MAGIC, self.stride, self.size, self.line_count)
        return header + body.tobytes()

    @classmethod
    def from_bytes(cls, raw: bytes) -> LineIndex:
        """Decode a sidecar; ``ValueError`` if it is not a valid index."""
        if len(raw) < _HEADER.size:
            raise ValueError("line index too short")
        magic, stride, size, line_count = _HEADER.unpack_from(raw)
        if magic != _MAGIC or stride <= 0:
            raise ValueError("not a line index")
        body = raw[_HEADER.size :]
        if len(body) % 8:
            raise ValueError("truncated line index")
        offsets = array("Q")
        offsets.frombytes(body)
        if _BIG_ENDIAN:
            offsets.byteswap()
        if not offsets or offsets[0] != 0 or (len(offsets) - 1) * stride > line_count:
            raise ValueError("inconsistent line index")
        return cls(stride=stride, size=size, line_count=line_count, offsets=tuple(offsets))

    def read_range(self, fh: IO[bytes], start: int, stop: int) -> bytes:
        """Bytes of lines ``start..stop`` (0-based, half-open) from ``fh``.

        The range is clamped to ``[0, line_count]``; an empty range gives
        ``b""``. Line terminators are kept, so concatenating consecutive
        ranges reproduces the blob byte for byte.
        """
        if start < 0 or stop < 0:
            raise ValueError("line numbers must be non-negative")
        stop = min(stop, self.line_count)
        if start >= stop:
            return b""
        fh.seek(self.offset_of(fh, start))
        readline = fh.readline
        return b"".join(readline() for _ in range(stop - start))

    def offset_of(self, fh: IO[bytes], line: int) -> int:
        """Byte offset where line ``line`` (0-based) starts; ``size`` past the last line.

        A seek to the nearest indexed line, then at most ``stride - 1``
        skipped lines, each read in :data:`SKIP_CHUNK` pieces: the cost of a
        very long skipped line is a read, never its size in memory. Leaves
        ``fh`` anywhere.
        """
        if line < 0:
            raise ValueError("line numbers must be non-negative")
        if line >= self.line_count:
            return self.size
        anchor = line // self.stride
        pos = self.offsets[anchor]
        if line == anchor * self.stride:
            return pos
        fh.seek(pos)
        readline = fh.readline
        for _ in range(line - anchor * self.stride):
            while True:
                chunk = readline(SKIP_CHUNK)
                pos += len(chunk)
                if not chunk or chunk[-1] == _NL:
                    break
        return pos
