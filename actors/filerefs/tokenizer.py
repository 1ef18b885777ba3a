"""The ``@path`` tokenizer: plain submitted text to typed input segments and back.

A UI that knows about file references sends :class:`~messages.conversation.FileRef`
segments itself; a plain-text client (a pipe, a script, a terminal without
completion) sends text in which ``@path`` tokens must be recognised. This
module is that recognition, and its inverse, the text of the user message.

Grammar (exactly what :func:`parse_input` recognises)
-----------------------------------------------------
* A reference starts with ``@`` at the start of the text or right after a
  whitespace character (``str.isspace``). An ``@`` after anything else -- the
  ``@`` of ``user@example.com``, of ``foo@bar`` or of ``x"@y`` -- is text, so
  e-mail addresses are never references.
* **Unquoted**: ``@`` followed by a run of non-whitespace characters. Trailing
  sentence punctuation is not part of the path: characters from
  ``, ; : ! ? ) ] } ' "`` are stripped from the end repeatedly, and at most one
  ``.`` among them -- unless what remains consists only of dots and slashes
  (``@.``, ``@..``, ``@../``), which are paths in their own right. The
  stripped characters stay in the text. Backslashes are literal
  (``@src\\app.py`` is the path ``src\\app.py``).
* **Quoted**: ``@"`` ... ``"``. Inside, ``\\"`` is a quote and ``\\\\`` a
  backslash; any other backslash is literal. Every other character, including
  whitespace and line breaks, belongs to the path. The reference ends at the
  closing quote, whatever follows it.
* Not a reference (plain text): a lone ``@``, ``@`` followed by whitespace, a
  token that is empty after stripping (``@,``), an unterminated quote
  (``@"no end``), an empty quoted path (``@""``) and a path holding a lone
  surrogate (no file system can name it, and ``FileRef`` rejects it).
  Scanning resumes right after such an ``@``, so a later ``@path`` in the
  same text is still found.

Round trips (proven by ``tests/filerefs/test_fileref_tokenizer.py``)
-----------------------------------------------------------
:func:`render_user_text` writes a reference unquoted whenever the unquoted
form re-parses to the same path *in its context* (the text that follows it),
and quoted with canonical escapes otherwise. Hence:

* ``render_user_text(parse_input(s)) == s`` for every ``s`` without a ``"``
  character -- backslashes included. It fails only where ``s`` spells a
  quoted reference non-canonically (``@"abc"`` renders as ``@abc``,
  ``@"a\\b"`` as ``@"a\\\\b"``): a ``FileRef`` keeps the path, not its spelling.
* ``parse_input(render_user_text(parse_input(s))) == parse_input(s)`` for
  every ``s``: the rendered text is a fixed point of the tokenizer.
* For segments built by a caller, ``render_user_text`` re-parses to the same
  paths provided every ``FileRef`` is preceded by the start of the text or by
  whitespace and no text segment itself contains an ``@`` reference: an
  ``@`` glued to the preceding word cannot be a reference in any spelling.
* :func:`segment_spans` tiles the input: the spans are contiguous, cover the
  whole text, text segments are their span verbatim and each reference's span
  re-parses to exactly that reference -- no character is ever lost.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

from fore.messages.conversation import FileRef, Segment, TextSegment

_AT = "@"
_QUOTE = '"'
_BACKSLASH = "\\"

_STRIPPABLE = frozenset(",;:!?)]}'\"")
"""Sentence punctuation that never ends an unquoted path (besides one ``.``)."""

_DOTS_AND_SLASHES = frozenset("./")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")

UNRESOLVED_TEMPLATE = "[unresolved file ref: {path}]"
"""What the model sees instead of ``@path`` when the reference did not resolve."""


def parse_input(text: str) -> tuple[Segment, ...]:
    """Split submitted text into text segments and ``FileRef`` segments.

    Adjacent text is merged into one ``TextSegment`` and no text segment is
    empty, so the result is canonical: two inputs with the same references and
    the same text between them yield equal tuples.
    """
    return tuple(segment for segment, _, _ in segment_spans(text))


def segment_spans(text: str) -> tuple[tuple[Segment, int, int], ...]:
    """:func:`parse_input` with the source span ``[start, end)`` of every segment.

    A UI uses the spans to highlight references in what the user typed; the
    tests use them to prove that tokenizing never drops or invents a character.
    """
    out: list[tuple[Segment, int, int]] = []
    text_start = 0  # start of the pending run of plain text
    i = 0
    n = len(text)
    while i < n:
        if text[i] != _AT or (i > 0 and not text[i - 1].isspace()):
            i += 1
            continue
        ref = _reference_at(text, i)
        if ref is None:
            i += 1
            continue
        path, end = ref
        if text_start < i:
            out.append((TextSegment(text=text[text_start:i]), text_start, i))
        out.append((FileRef(path=path), i, end))
        text_start = i = end
    if text_start < n:
        out.append((TextSegment(text=text[text_start:]), text_start, n))
    return tuple(out)


def render_user_text(segments: Iterable[Segment], unresolved: Collection[str] = ()) -> str:
    """The text of the user message for these segments.

    Text and pastes are verbatim; a reference is written ``@<path>`` (quoted
    and escaped when the bare form would not re-parse to the same path given
    what follows it), and a reference whose path is in ``unresolved`` becomes
    ``[unresolved file ref: <path>]`` so the model is told it is missing
    instead of seeing a dangling ``@``.

    Rendering runs right to left because whether a bare ``@path`` is safe
    depends on the characters that follow it (``@a`` followed by ``.x`` would
    re-parse as ``a.x``).
    """
    pieces: list[str] = []
    following_head = ""  # the non-whitespace run the rendered tail starts with
    for segment in reversed(_as_sequence(segments)):
        if isinstance(segment, FileRef):
            if segment.path in unresolved:
                piece = UNRESOLVED_TEMPLATE.format(path=segment.path)
            else:
                piece = _render_ref(segment.path, following_head)
        else:
            piece = segment.text
        pieces.append(piece)
        following_head = _head_of(piece, following_head)
    return "".join(reversed(pieces))


def file_refs(segments: Iterable[Segment]) -> list[str]:
    """The referenced paths in order of first appearance, each path once.

    A path referenced twice is attached once: the second mention adds no
    information and would double the context it costs.
    """
    seen: set[str] = set()
    paths: list[str] = []
    for segment in segments:
        if isinstance(segment, FileRef) and segment.path not in seen:
            seen.add(segment.path)
            paths.append(segment.path)
    return paths


# --------------------------------------------------------------------------- #
# Scanning
# --------------------------------------------------------------------------- #


def _reference_at(text: str, at: int) -> tuple[str, int] | None:
    """The reference starting at the ``@`` at index ``at``: ``(path, end)``, or None."""
    start = at + 1
    if start < len(text) and text[start] == _QUOTE:
        ref = _quoted_at(text, start + 1)
    else:
        end = start
        while end < len(text) and not text[end].isspace():
            end += 1
        path = _strip_trailing(text[start:end])
        ref = (path, start + len(path)) if path else None
    if ref is None or _SURROGATE_RE.search(ref[0]):
        return None
    return ref


def _quoted_at(text: str, start: int) -> tuple[str, int] | None:
    """Decode a quoted path whose first character is at ``start``.

    Returns ``(path, index after the closing quote)``; None when the quote is
    never closed or the path is empty.
    """
    chars: list[str] = []
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if c == _QUOTE:
            if not chars:
                return None
            return "".join(chars), i + 1
        if c == _BACKSLASH and i + 1 < n and text[i + 1] in (_QUOTE, _BACKSLASH):
            chars.append(text[i + 1])
            i += 2
            continue
        chars.append(c)
        i += 1
    return None


def _strip_trailing(token: str) -> str:
    """Drop trailing sentence punctuation from an unquoted token (see module doc)."""
    end = len(token)
    dot_stripped = False
    while end > 0:
        c = token[end - 1]
        if c in _STRIPPABLE:
            end -= 1
        elif c == "." and not dot_stripped and not _only_dots_and_slashes(token[:end]):
            dot_stripped = True
            end -= 1
        else:
            break
    return token[:end]


def _only_dots_and_slashes(token: str) -> bool:
    return all(c in _DOTS_AND_SLASHES for c in token)


# --------------------------------------------------------------------------- #
# Rendering
# --------------------------------------------------------------------------- #


def _as_sequence(segments: Iterable[Segment]) -> Sequence[Segment]:
    return segments if isinstance(segments, Sequence) else list(segments)


def _render_ref(path: str, following_head: str) -> str:
    """``@path`` when that re-parses to ``path`` before ``following_head``, else quoted."""
    if _bare_is_safe(path, following_head):
        return _AT + path
    escaped = path.replace(_BACKSLASH, _BACKSLASH * 2).replace(_QUOTE, _BACKSLASH + _QUOTE)
    return f'{_AT}"{escaped}"'


def _bare_is_safe(path: str, following_head: str) -> bool:
    if not path or path.startswith(_QUOTE) or any(c.isspace() for c in path):
        return False
    # The parser reads the whole non-whitespace run, which continues into
    # whatever text follows; the path must survive trailing-punctuation
    # stripping of that run unchanged.
    return _strip_trailing(path + following_head) == path


def _head_of(piece: str, following_head: str) -> str:
    """The leading non-whitespace run of ``piece + tail`` given the tail's run."""
    for index, c in enumerate(piece):
        if c.isspace():
            return piece[:index]
    return piece + following_head


__all__ = [
    "UNRESOLVED_TEMPLATE",
    "file_refs",
    "parse_input",
    "render_user_text",
    "segment_spans",
]
