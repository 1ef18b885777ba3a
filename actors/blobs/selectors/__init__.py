"""The ``inspect`` engine: read exactly the part of a blob the model asks for.

``inspect_blob(reader, blob_id, selector, limits)`` is the whole tool minus
the actor plumbing; the ``inspect`` tool wrapper calls it on the blocking
lane and turns :class:`InspectError` into an error tool result whose text is
``error.message`` (every message says what to do instead).

Selectors::

    (none)          overview: type, size in bytes, line/entry/key count, a preview
    lines:N-M       text: lines N..M, 1-based, inclusive, M clamped to the end
    lines:N-        text: line N to the end
    bytes:N..M      text: bytes N..M-1 (0-based, end-exclusive, clamped): parts of long lines
    bytes:N..       text: byte N to the end
    slice:N..M      array: entries N..M-1 (0-based, end-exclusive, M clamped), as JSON
    slice:N..       array: entry N to the end
    key:NAME        object: the value of NAME (everything after "key:" is the name)
    pointer:/a/0/b  any JSON: an RFC 6901 pointer (~0 is "~", ~1 is "/"; "" is the root)

Outputs:

* ``lines`` returns the exact original text of the lines, terminators
  (``\\n`` / ``\\r\\n``) included, so ``lines:1-N`` of an N-line text is the
  text itself. A line too long for the cap shows its beginning, and the
  marker names the ``bytes:`` selector that reads on *within* the line:
  every byte of a 100 MB single-line blob is reachable, 16 KB at a time.
* ``bytes`` returns the text of that byte range, both ends moved inward to
  the nearest character boundary (a multi-byte character is never split).
* ``slice`` returns a JSON array with one compact element per line, so
  ``json.loads`` of it equals Python's ``array[N:M]``.
* ``key`` / ``pointer`` return a string value as its raw text and any other
  value as JSON (arrays one element per line, objects one member per line).
* Every output is capped at ``limits.inspect_output_cap`` UTF-8 bytes,
  marker included. Line, slice, array and object outputs are cut after the
  last whole line/entry/member that fits (never inside a number), and the
  marker names the exact selector that reads on; a single line, entry or
  string too big for the cap shows its beginning, cut on a character
  boundary, with a marker that says so.

Cost: nothing here reads or parses a whole big blob per call. Line ranges
seek through the store's line index and read at most about the cap
(:meth:`~fore.actors.blobs.fs_store.FsBlobStore.line_offsets`,
:meth:`~fore.actors.blobs.fs_store.FsBlobStore.read_range`); big JSON arrays and
objects are read through their top-level index
(:mod:`fore.actors.blobs.json_index`), parsing only the entries shown; smaller
JSON blobs come parsed from the store's cache.

A slice or line range that *starts* past the end is an error (it tells the
model the real size) rather than an empty answer.

Hostile input is bounded before it costs anything: a selector is at most
:data:`MAX_SELECTOR_CHARS` characters, a number in it at most
:data:`MAX_NUMBER_DIGITS` significant digits (``int()`` of a 5,000-digit
string would otherwise raise Python's own "Exceeds the limit (4300 digits)"),
a pointer at most :data:`MAX_POINTER_DEPTH` tokens deep; every error is one
line, and quotes the selector (or a key, a token) cut to a readable length.
Whatever the text, :func:`parse_selector` raises nothing but
:class:`InspectError`.

The package is split by concern: :mod:`.grammar` (the selectors and their
parser), :mod:`.reader` (the store interface and the output rules both
readers share), :mod:`.text` and :mod:`.json` (the readers), and
:mod:`.engine` (:func:`inspect_blob`, which dispatches to them). The public
names are re-exported here.
"""

from fore.actors.blobs.selectors.engine import MAX_BLOB_ID_CHARS, inspect_blob, normalize_blob_id
from fore.actors.blobs.selectors.grammar import (
    MAX_NUMBER_DIGITS,
    MAX_POINTER_DEPTH,
    MAX_SELECTOR_CHARS,
    SELECTOR_HELP,
    Bytes,
    InspectError,
    Key,
    Lines,
    Overview,
    Pointer,
    Selector,
    Slice,
    escape_pointer_token,
    parse_selector,
)
from fore.actors.blobs.selectors.json import (
    MAX_LISTED_KEYS,
    MAX_OVERVIEW_KEYS,
    IndexedTop,
    MemoryTop,
    TopLevel,
    render_value,
)
from fore.actors.blobs.selectors.reader import PREVIEW_WIDTH, BlobReader

__all__ = [
    "MAX_BLOB_ID_CHARS",
    "MAX_LISTED_KEYS",
    "MAX_NUMBER_DIGITS",
    "MAX_OVERVIEW_KEYS",
    "MAX_POINTER_DEPTH",
    "MAX_SELECTOR_CHARS",
    "PREVIEW_WIDTH",
    "SELECTOR_HELP",
    "BlobReader",
    "Bytes",
    "IndexedTop",
    "InspectError",
    "Key",
    "Lines",
    "MemoryTop",
    "Overview",
    "Pointer",
    "Selector",
    "Slice",
    "TopLevel",
    "escape_pointer_token",
    "inspect_blob",
    "normalize_blob_id",
    "parse_selector",
    "render_value",
]
