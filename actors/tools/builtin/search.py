"""``list_directory``, ``glob`` and ``grep``.

All three work through the session's :class:`~actors.tools.fs.FsView` only, so
they see exactly what the view shows -- the real tree, or the speculation
overlay's union view.

``grep`` runs a regular expression the model wrote, so it must stay
cancellable and bounded even for a pattern that backtracks catastrophically
(``(a|aa)+$`` on a line of forty ``a``s would run for hours). Python's ``re``
cannot be interrupted, so the search uses the ``regex`` package -- it accepts
``re``'s syntax (its default VERSION0 mode is ``re``-compatible) and takes a
``timeout`` per search -- and releases the GIL while matching. Each line is
searched in short slices (:data:`GREP_SLICE` seconds, doubling), and between
slices the call's token and deadline are checked: a cancelled or timed-out
grep returns within one slice. A single line that needs more than
:data:`GREP_LINE_BUDGET` seconds fails the call with an error naming it.

A search with a timeout costs about a microsecond more per call than
``re``'s, which on a large tree made ``grep`` several times slower. Most
patterns contain a literal every match must include (``def main``,
``TODO``, ``qux delta \\d+``): :func:`required_literal` finds it, and lines
without it are skipped by a plain substring test, exactly -- only lines that
may match pay for the regex.
"""

from __future__ import annotations

import importlib
import re
import time
import warnings
from typing import Any

from pydantic import Field

from fore.actors.tools.base import Tool, ToolArgs, ToolContext, ToolError
from fore.actors.tools.cancel import ToolCancelled
from fore.actors.tools.fs import FsError
from fore.actors.tools.paths import glob_regex, split_lines

_regex: Any = importlib.import_module("regex")
"""The ``regex`` package (untyped, so imported as ``Any``: no stubs needed)."""

_re_parser: Any = importlib.import_module("re._parser")
"""The stdlib's pattern parser (private, untyped): used to find a pattern's literals."""

_PLAIN_PATTERN = re.compile(
    r"(?:[A-Za-z0-9_ \t\-.,:;'\"/<>=!@#%&~^$*+?()|\[\]]|\\[!-/:-@\[-`{-~]|\\[dDwWsSbB])*"
)
"""Patterns that ``re`` and ``regex`` (VERSION0) read identically: no ``(?``
constructs, no ``{}``, escapes only of punctuation or the classic classes."""

MAX_LIST_ENTRIES = 1000
MAX_GLOB_RESULTS = 1000
MAX_GREP_FILE_BYTES = 8 * 1024 * 1024
GREP_OUTPUT_CAP = 64 * 1024
MAX_GREP_LINE = 500
GREP_SLICE = 0.05
"""First time slice (seconds) one line's search gets before the token is checked."""
GREP_MAX_SLICE = 0.4
"""Slices double up to this, so a cancel is seen within it even on a slow line."""
GREP_LINE_BUDGET = 2.0
"""Seconds one line may take in all; beyond, the pattern is refused as pathological."""


class ListDirectoryArgs(ToolArgs):
    path: str = Field(default=".", description="Directory, relative to the workspace root.")


class ListDirectory(Tool[ListDirectoryArgs]):
    name = "list_directory"
    description = "List a directory: subdirectories first (with a trailing /), then files."
    args_model = ListDirectoryArgs

    def execute(self, args: ListDirectoryArgs, ctx: ToolContext) -> str:
        rel = ctx.fs.resolve(args.path)
        st = ctx.fs.stat(rel)
        if st is None:
            raise ToolError(f"{rel or '.'}: no such directory")
        if st.kind != "dir":
            raise ToolError(f"{rel} is not a directory")
        entries = ctx.fs.list_dir(rel)
        dirs = [f"{e.name}/" for e in entries if e.kind == "dir"]
        files = [
            f"{e.name} ({e.size} bytes)" if e.kind == "file" else e.name
            for e in entries
            if e.kind != "dir"
        ]
        lines = (dirs + files)[:MAX_LIST_ENTRIES]
        header = f"{rel or '.'}/ ({_plural(len(dirs), 'directory', 'directories')}, " + (
            f"{_plural(len(files), 'file', 'files')})"
        )
        if not lines:
            return f"{header}\n(empty)"
        more = len(dirs) + len(files) - len(lines)
        tail = [f"… {more} more entries not shown"] if more > 0 else []
        return "\n".join([header, *lines, *tail])


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


class GlobArgs(ToolArgs):
    pattern: str = Field(min_length=1, description="Glob, e.g. '**/*.py' or 'src/*.ts'.")
    path: str = Field(default=".", description="Directory to search from.")


class Glob(Tool[GlobArgs]):
    name = "glob"
    description = (
        "Find files by glob pattern ('*' stays within a directory, '**' spans directories; "
        "a pattern without '/' matches file names at any depth)."
    )
    args_model = GlobArgs

    def execute(self, args: GlobArgs, ctx: ToolContext) -> str:
        base = ctx.fs.resolve(args.path)
        regex = glob_regex(args.pattern)
        matches = []
        for rel in ctx.fs.iter_files(base):
            ctx.cancel.raise_if_cancelled()
            relative = rel[len(base) + 1 :] if base else rel
            if regex.match(relative):
                matches.append(rel)
        if not matches:
            return f"No files match {args.pattern!r} under {base or '.'}."
        shown = matches[:MAX_GLOB_RESULTS]
        tail = (
            [f"… {len(matches) - len(shown)} more matches; narrow the pattern"]
            if len(matches) > len(shown)
            else []
        )
        return "\n".join([*shown, *tail])


class GrepArgs(ToolArgs):
    pattern: str = Field(min_length=1, description="Regular expression (Python syntax).")
    path: str = Field(default=".", description="File or directory to search.")
    include: str | None = Field(default=None, description="Only files matching this glob.")
    case_insensitive: bool = Field(default=False, description="Ignore case.")
    max_results: int = Field(default=200, ge=1, le=5000, description="Maximum matching lines.")


class Grep(Tool[GrepArgs]):
    name = "grep"
    description = (
        "Search file contents with a regular expression; prints path:line: text for each "
        "matching line (binary files are skipped, output is capped)."
    )
    args_model = GrepArgs

    def execute(self, args: GrepArgs, ctx: ToolContext) -> str:
        try:
            regex = _regex.compile(args.pattern, _regex.IGNORECASE if args.case_insensitive else 0)
        except _regex.error as exc:
            raise ToolError(f"invalid regular expression {args.pattern!r}: {exc}") from None
        include = glob_regex(args.include) if args.include else None
        needle = required_literal(args.pattern, args.case_insensitive)
        base = ctx.fs.resolve(args.path)
        out: list[str] = []
        size = 0
        hits = 0
        capped = False
        for rel in ctx.fs.iter_files(base):
            ctx.cancel.raise_if_cancelled()
            if (
                include is not None
                and not include.match(rel.rsplit("/", 1)[-1])
                and not (include.match(rel))
            ):
                continue
            try:
                data = ctx.fs.read_bytes(rel, limit=MAX_GREP_FILE_BYTES)
            except FsError:
                continue
            if b"\x00" in data[:8192]:
                continue
            text = data.decode("utf-8", errors="replace")
            if needle is not None and needle not in text:
                continue
            for number, line in enumerate(split_lines(text), start=1):
                if needle is not None and needle not in line:
                    continue  # it cannot match: every match contains the needle
                if not _search(regex, line, ctx, f"{rel}:{number}"):
                    continue
                shown = line if len(line) <= MAX_GREP_LINE else line[:MAX_GREP_LINE] + " …"
                entry = f"{rel}:{number}: {shown}"
                hits += 1
                if hits > args.max_results or size + len(entry) > GREP_OUTPUT_CAP:
                    capped = True
                    break
                out.append(entry)
                size += len(entry) + 1
            if capped:
                break
        if not out:
            return f"No matches for {args.pattern!r} under {base or '.'}."
        if capped:
            out.append(f"… output capped at {len(out)} lines; narrow the pattern, path or include")
        return "\n".join(out)


def required_literal(pattern: str, ignore_case: bool = False) -> str | None:
    """The longest text every match of ``pattern`` contains, or None if unsure.

    Only top-level literals count: the pattern is a sequence, so each of
    them is part of every match. Anything out of the plain subset both
    engines read alike (:data:`_PLAIN_PATTERN`), case-insensitive search,
    and patterns ``re`` cannot parse give None -- the filter is then off,
    never wrong.
    """
    if ignore_case or any(mark in pattern for mark in ("(?", "(*", "[[", "[:")):
        return None
    if _PLAIN_PATTERN.fullmatch(pattern) is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            parsed = _re_parser.parse(pattern, 0)
    except (re.error, Warning, RecursionError):
        return None
    if parsed.state.flags & re.IGNORECASE:
        return None
    best = run = ""
    for op, value in parsed:
        if str(op) == "LITERAL":
            run += chr(value)
            best = max(best, run, key=len)
        else:
            run = ""
    return best or None


def _search(regex: Any, line: str, ctx: ToolContext, where: str) -> bool:
    """Whether ``regex`` matches ``line``, searched in slices that watch token and deadline.

    A slice that times out throws its work away and the next one starts over
    with twice the time, so a line costs at most about twice what it needs,
    and a cancel or the deadline is noticed within one slice.
    """
    spent = 0.0
    slice_s = GREP_SLICE
    while True:
        if ctx.cancel.cancelled:
            raise ToolCancelled(ctx.cancel.reason or "cancelled")
        left = ctx.deadline - time.monotonic()
        if left <= 0:
            raise ToolError(f"grep ran out of time (the call's deadline passed while at {where})")
        budget = min(slice_s, left, GREP_LINE_BUDGET - spent)
        try:
            return regex.search(line, timeout=budget, concurrent=True) is not None
        except TimeoutError:
            spent += budget
        if spent >= GREP_LINE_BUDGET - 1e-9:
            raise ToolError(
                f"the pattern took more than {GREP_LINE_BUDGET:g}s on a single line ({where}); "
                "it backtracks catastrophically there -- simplify it (avoid nested or "
                "overlapping repetition such as (a+)+ or (a|aa)+) or narrow the search"
            )
        slice_s = min(slice_s * 2, GREP_MAX_SLICE)
