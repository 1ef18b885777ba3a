"""The ``@path`` resolver: file references on submit become system messages.

A user who types ``see @src/app.py and @docs/`` expects the model to see those
files at once. On submit every :class:`~messages.conversation.FileRef` is
resolved on the session's :class:`~actors.tools.fs.FsView`; each one that
resolves becomes one system message placed right after the user message, and
each one that does not becomes a Warn alert plus a placeholder in the user
message -- a typo must be visible at once, never a silent fallback.

Scope and safety
----------------
The resolver never touches the filesystem itself: every path goes through the
view, which owns the scope rules (relative paths against the workspace,
absolute paths only inside it, no ``..`` past the root, no symlink leading
out) and opens exactly what it checked (``O_NOFOLLOW``), so a symlink swapped
in between the check and the read is refused instead of followed. The view's
errors map onto four kinds (:class:`ResolveErrorKind`): ``out_of_scope``,
``not_found``, ``binary`` and ``io`` (FIFOs, devices, sockets, permission
problems, symlink loops, a path that changed under us).

Files
-----
``[File: <path>]\n<body>`` with ``<path>`` exactly as the user typed it. The
body is at most ``cap`` bytes, cut on a character boundary; when cut, the
message ends with ``\n[...truncated, <total> bytes total — use read_file for
the rest]``. The total reported is the size ``stat`` gave (or more, if the
read proved the file grew).

Binary detection judges the whole attached body *and* what follows it, up to
``scan_limit`` bytes of the file (1 MiB by default, never less than the
cap): content with a NUL byte or invalid UTF-8 anywhere in that window is
refused as binary, so a text head on a binary file (an archive with a text
header, a log with a NUL at 20 KB) is not attached as "text". One read of
``max(cap, scan_limit) + 1`` bytes does both jobs; the extra byte tells
whether the file goes on past the window. Bytes past the window are not
judged -- reading a multi-gigabyte file in full to attach its first 16 KB
would turn a submit into a long I/O wait -- so a file that is text for its
first MiB is attached (truncated) whatever comes later. When the window ends
inside a multi-byte character, the partial character must be a *valid
incomplete* sequence (a prefix of some well-formed character, e.g. ``E2 82``
of ``€``); an impossible prefix (``C0``, ``ED A0`` -- a surrogate, ``F4 90``
-- beyond U+10FFFF) is invalid UTF-8 and hence binary. A valid file whose
cap falls inside a multi-byte character is text: the body simply stops
before that character.

Directories
-----------
``[Dir: <path>]\\n<listing>``: a shallow listing, directories first as
``name/``, then every other entry (files, and entries the view cannot
classify: FIFOs, broken or out-of-scope symlinks) by name, at most
``dir_limit`` entries in total and at most ``cap`` bytes (the file cap: 100
long names must not cost more context than a file would), then
``… N more entries not shown``. The marker always fits: entries are dropped
to make room for it (only a cap smaller than the marker itself is exceeded,
by the marker alone). An empty directory lists as ``(empty directory)``.
The listing shows **no sizes**: sizes change with every edit, which would
make an otherwise unchanged attachment differ across turns, and the model
can ask a tool for them.
"""

from __future__ import annotations

from collections.abc import Sequence

from fore.actors.filerefs.tokenizer import file_refs, render_user_text
from fore.actors.tools.fs import FsView, IsADirectory, NotADirectory, NotFound
from fore.actors.tools.paths import FsError, PathOutOfScope
from fore.actors.worker.state import PreparedInput, submit_segments
from fore.errors import ResolveError, ResolveErrorKind, alert_text
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import Item, Segment, SystemMessage
from fore.messages.session import Submit

DEFAULT_CAP = 16_384
"""Bytes of a file's body shown inline (the tool-output limit)."""

DEFAULT_DIR_LIMIT = 100
"""Entries of a directory listing shown inline."""

DEFAULT_SCAN_LIMIT = 1024 * 1024
"""Bytes of a file judged for binary content (never less than the cap); see the module docs."""

ALERT_SOURCE = "file_ref"
"""The ``source`` of every alert this module raises."""

TRUNCATION_TEMPLATE = "\n[...truncated, {total} bytes total — use read_file for the rest]"
"""Appended to a file's body when the cap cut it."""

EMPTY_DIR_TEXT = "(empty directory)"
"""The listing of a directory without entries."""

__all__ = [
    "ALERT_SOURCE",
    "DEFAULT_CAP",
    "DEFAULT_DIR_LIMIT",
    "DEFAULT_SCAN_LIMIT",
    "EMPTY_DIR_TEXT",
    "TRUNCATION_TEMPLATE",
    "ResolveError",
    "ResolveErrorKind",
    "alert_text",
    "prepare_submit",
    "resolve_file_ref",
    "resolve_input",
]


# --------------------------------------------------------------------------- #
# One reference
# --------------------------------------------------------------------------- #


def resolve_file_ref(
    fs: FsView,
    path: str,
    *,
    cap: int = DEFAULT_CAP,
    dir_limit: int = DEFAULT_DIR_LIMIT,
    scan_limit: int = DEFAULT_SCAN_LIMIT,
) -> SystemMessage:
    """The system message for one ``@path`` reference, or :class:`ResolveError`.

    ``path`` is as the user typed it; the view resolves it (relative to the
    workspace, absolute only inside it) and enforces the scope.
    """
    if cap < 0:
        raise ValueError(f"cap must be >= 0, not {cap}")
    if dir_limit < 0:
        raise ValueError(f"dir_limit must be >= 0, not {dir_limit}")
    if scan_limit < 0:
        raise ValueError(f"scan_limit must be >= 0, not {scan_limit}")
    canonical = ""
    try:
        canonical = fs.resolve(path)
        info = fs.stat(canonical)
        if info is None:
            raise ResolveError(ResolveErrorKind.NOT_FOUND, path)
        if info.kind == "dir":
            listing = _listing(fs, canonical, dir_limit, cap)
            return SystemMessage(text=f"[Dir: {path}]\n{listing}")
        if info.kind != "file":
            # Never open a FIFO or a device: opening or reading it can block
            # or have side effects. The view would refuse too; this is cheaper.
            raise ResolveError(
                ResolveErrorKind.IO, path, "I/O error: not a regular file (device, FIFO or socket)"
            )
        window = max(cap, scan_limit)
        data = fs.read_bytes(canonical, limit=window + 1)
        _check_text(data, window, path)
        body = _body(data, cap)
        if len(data) <= cap:
            return SystemMessage(text=f"[File: {path}]\n{body}")
        total = max(info.size, len(data))
        return SystemMessage(
            text=f"[File: {path}]\n{body}{TRUNCATION_TEMPLATE.format(total=total)}"
        )
    except PathOutOfScope as exc:
        raise ResolveError(ResolveErrorKind.OUT_OF_SCOPE, path) from exc
    except (NotFound, NotADirectory, FileNotFoundError, NotADirectoryError) as exc:
        # A missing component, or a file used as a directory (``a.txt/b``):
        # either way no such path exists.
        raise ResolveError(ResolveErrorKind.NOT_FOUND, path) from exc
    except IsADirectory as exc:
        # stat said "file" but the open found a directory: it changed under us.
        raise ResolveError(ResolveErrorKind.IO, path, "I/O error: changed while reading") from exc
    except FsError as exc:
        raise ResolveError(
            ResolveErrorKind.IO, path, _io_reason(str(exc), path, canonical)
        ) from exc
    except OSError as exc:
        detail = exc.strerror or str(exc)
        raise ResolveError(ResolveErrorKind.IO, path, f"I/O error: {detail.lower()}") from exc
    except UnicodeError as exc:
        # A path the filesystem encoding cannot express (a lone surrogate in
        # an explicit FileRef): no file can have that name.
        raise ResolveError(ResolveErrorKind.NOT_FOUND, path) from exc


def _io_reason(message: str, path: str, canonical: str) -> str:
    """``I/O error: <detail>`` without the ``<path>: `` the view's message starts with.

    The alert already names the path as typed; repeating it (in canonical
    form) would only confuse.
    """
    for prefix in (canonical, path):
        if prefix and message.startswith(prefix + ": "):
            message = message[len(prefix) + 2 :]
            break
    return f"I/O error: {message}"


def _check_text(data: bytes, window: int, path: str) -> None:
    """Refuse ``data`` (the first ``window + 1`` bytes at most) unless it is UTF-8 text.

    Only the first ``window`` bytes are judged; when the file goes on past
    them, a character cut by the window end must be a valid beginning.
    """
    judged = data
    if len(data) > window:
        judged = data[:window]
        tail = _incomplete_tail(judged)
        if tail:
            if not _is_valid_prefix(tail):
                raise ResolveError(ResolveErrorKind.BINARY, path)
            judged = judged[: len(judged) - len(tail)]
    if b"\x00" in judged:
        raise ResolveError(ResolveErrorKind.BINARY, path)
    try:
        judged.decode("utf-8")
    except UnicodeDecodeError:
        raise ResolveError(ResolveErrorKind.BINARY, path) from None


def _body(data: bytes, cap: int) -> str:
    """The shown text: at most ``cap`` bytes of already-judged ``data``, whole characters."""
    shown = data
    if len(data) > cap:
        head = data[:cap]
        shown = head[: len(head) - len(_incomplete_tail(head))]
    return shown.decode("utf-8")


def _sequence_length(lead: int) -> int:
    """Bytes in a UTF-8 sequence starting with ``lead`` (0: not a lead byte)."""
    if lead < 0x80:
        return 1
    if 0xC0 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF7:
        return 4
    return 0  # a continuation byte or 0xF8..0xFF


def _incomplete_tail(head: bytes) -> bytes:
    """The trailing bytes of ``head`` that start a character ``head`` does not finish.

    Empty when ``head`` ends on a character boundary (or ends in garbage the
    strict decode will reject anyway). Only the last three bytes can belong
    to an unfinished character, since none is longer than four.
    """
    end = len(head)
    for start in range(end - 1, max(end - 4, -1), -1):
        length = _sequence_length(head[start])
        if length == 0:
            if head[start] & 0xC0 == 0x80:
                continue  # a continuation byte: the lead is further back
            return b""  # 0xF8..0xFF: invalid, left to the strict decode
        return head[start:] if length > end - start else b""
    return b""


def _is_valid_prefix(tail: bytes) -> bool:
    """Whether some continuation turns ``tail`` into one well-formed character.

    Only the second byte of a sequence has a restricted range (``E0 A0..BF``,
    ``ED 80..9F``, ``F0 90..BF``, ``F4 80..8F``); trying ``80``, ``90`` and
    ``A0`` there covers every lead byte, and later bytes are any of
    ``80..BF``. The codec itself then judges the completed sequence, so the
    rules stay exactly Python's (and Unicode's) well-formedness rules.
    """
    missing = _sequence_length(tail[0]) - len(tail)
    if missing <= 0:
        return False
    if len(tail) == 1:
        candidates = [
            tail + bytes([second]) + b"\x80" * (missing - 1) for second in (0x80, 0x90, 0xA0)
        ]
    else:
        candidates = [tail + b"\x80" * missing]
    for candidate in candidates:
        try:
            candidate.decode("utf-8")
        except UnicodeDecodeError:
            continue
        return True
    return False


def _listing(fs: FsView, canonical: str, dir_limit: int, byte_cap: int) -> str:
    """A shallow, size-free listing: directories (``name/``) first, then the rest.

    At most ``dir_limit`` entries and ``byte_cap`` bytes, marker included
    (see the module docs).
    """
    entries = fs.list_dir(canonical)
    if not entries:
        return EMPTY_DIR_TEXT
    dirs = sorted(entry.name + "/" for entry in entries if entry.kind == "dir")
    others = sorted(entry.name for entry in entries if entry.kind != "dir")
    names = dirs + others
    sizes = [len(name.encode("utf-8", "surrogatepass")) for name in names]
    shown = min(dir_limit, len(names))
    used = sum(sizes[:shown]) + max(0, shown - 1)  # names joined by "\n"
    while shown:
        left_out = len(names) - shown
        extra = len(_more(left_out).encode("utf-8")) + 1 if left_out else 0
        if used + extra <= byte_cap:
            break
        shown -= 1
        used -= sizes[shown] + (1 if shown else 0)
    lines = names[:shown]
    if len(names) > shown:
        lines.append(_more(len(names) - shown))
    return "\n".join(lines)


def _more(left_out: int) -> str:
    noun = "entry" if left_out == 1 else "entries"
    return f"… {left_out} more {noun} not shown"


# --------------------------------------------------------------------------- #
# A whole submit
# --------------------------------------------------------------------------- #


def resolve_input(
    fs: FsView,
    segments: Sequence[Segment],
    *,
    cap: int = DEFAULT_CAP,
    dir_limit: int = DEFAULT_DIR_LIMIT,
    scan_limit: int = DEFAULT_SCAN_LIMIT,
) -> PreparedInput:
    """Resolve every reference in ``segments`` into the worker's prepared input.

    References are resolved in order of first appearance, each path once (a
    second mention would only double the context it costs). "The same path"
    means the same workspace-relative path once normalised by the view, so
    ``@a``, ``@./a`` and ``@/abs/ws/a`` are one file: it is attached once,
    under the spelling first typed. The stash holds one system message per
    resolved reference, in that order; each unresolved reference yields one
    Warn alert and, in the user text, the ``[unresolved file ref: <path>]``
    placeholder (for every spelling) so the model is told too.
    """
    stash: list[Item] = []
    alerts: list[tuple[AlertLevel, str, str]] = []
    unresolved: set[str] = set()
    outcome: dict[tuple[bool, str], bool] = {}  # normalised path -> resolved?
    for path in file_refs(segments):
        key = _dedupe_key(fs, path)
        if key in outcome:
            if not outcome[key]:
                unresolved.add(path)  # same placeholder, no second alert
            continue
        try:
            stash.append(
                resolve_file_ref(fs, path, cap=cap, dir_limit=dir_limit, scan_limit=scan_limit)
            )
            outcome[key] = True
        except ResolveError as exc:
            outcome[key] = False
            unresolved.add(path)
            alerts.append((AlertLevel.WARN, alert_text(path, exc.reason), ALERT_SOURCE))
    return PreparedInput(
        text=render_user_text(segments, unresolved=unresolved),
        segments=tuple(segments),
        stash=tuple(stash),
        alerts=tuple(alerts),
    )


def _dedupe_key(fs: FsView, path: str) -> tuple[bool, str]:
    """The workspace-relative form of ``path``, or the typed path if the view refuses it.

    Refused paths (out of scope, unencodable) stay keyed by their spelling:
    they resolve to nothing, so there is nothing to share.
    """
    try:
        return (True, fs.resolve(path))
    except (FsError, OSError, UnicodeError, ValueError):
        return (False, path)


def prepare_submit(
    fs: FsView,
    submit: Submit,
    *,
    cap: int = DEFAULT_CAP,
    dir_limit: int = DEFAULT_DIR_LIMIT,
    scan_limit: int = DEFAULT_SCAN_LIMIT,
) -> PreparedInput:
    """The worker's preparer: a submit's segments (given or parsed), resolved on ``fs``."""
    return resolve_input(
        fs, submit_segments(submit), cap=cap, dir_limit=dir_limit, scan_limit=scan_limit
    )
