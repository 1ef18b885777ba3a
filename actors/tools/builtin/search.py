"""``list_directory``, ``glob`` and ``grep``.

All three work through the session's :class:`~actors.tools.fs.FsView` only, so
they see exactly what the view shows -- the real tree, or the speculation
overlay's union view.

All three skip what the workspace's ``.gitignore`` files (and
``.git/info/exclude``) ignore, as ``git``, ripgrep and editors do -- a model
grepping ``node_modules`` or ``dist`` wastes its context -- unless the model
names an ignored directory as the ``path`` to search. Globs understand
braces (``**/*.{ts,tsx}``). The rules live in :mod:`actors.tools.matching`.

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
import posixpath
import re
import time
import warnings
from typing import Any

from pydantic import Field

from fore.actors.tools.base import Tool, ToolArgs, ToolContext, ToolError
from fore.actors.tools.cancel import ToolCancelled
from fore.actors.tools.fs import FsError, FsView
from fore.actors.tools.matching import (
    MAX_IGNORE_FILE_BYTES,
    GlobMatcher,
    IgnoreRules,
    PatternError,
    compile_glob,
)
from fore.actors.tools.paths import split_lines

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
    description = (
        "List a directory: subdirectories first (with a trailing /), then files. Entries "
        "the workspace's .gitignore ignores are left out (their number is shown)."
    )
    args_model = ListDirectoryArgs

    def execute(self, args: ListDirectoryArgs, ctx: ToolContext) -> str:
        rel = ctx.fs.resolve(args.path)
        st = ctx.fs.stat(rel)
        if st is None:
            raise ToolError(f"{rel or '.'}: no such directory")
        if st.kind != "dir":
            raise ToolError(f"{rel} is not a directory")
        rules = workspace_ignores(ctx.fs)
        listed = ctx.fs.list_dir(rel)
        entries = [
            e
            for e in listed
            if not rules.ignored(posixpath.join(rel, e.name), is_dir=e.kind == "dir", below=rel)
        ]
        hidden = len(listed) - len(entries)
        dirs = [f"{e.name}/" for e in entries if e.kind == "dir"]
        files = [
            f"{e.name} ({e.size} bytes)" if e.kind == "file" else e.name
            for e in entries
            if e.kind != "dir"
        ]
        lines = (dirs + files)[:MAX_LIST_ENTRIES]
        header = f"{rel or '.'}/ ({_plural(len(dirs), 'directory', 'directories')}, " + (
            f"{_plural(len(files), 'file', 'files')}"
        )
        if hidden:
            header += f"; {hidden} ignored by .gitignore not shown"
        header += ")"
        if not lines:
            return f"{header}\n(empty)"
        more = len(dirs) + len(files) - len(lines)
        tail = [f"… {more} more entries not shown"] if more > 0 else []
        return "\n".join([header, *lines, *tail])


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


class GlobArgs(ToolArgs):
    pattern: str = Field(
        min_length=1, description="Glob, e.g. '**/*.py', 'src/*.ts' or '**/*.{ts,tsx}'."
    )
    path: str = Field(default=".", description="Directory to search from.")


class Glob(Tool[GlobArgs]):
    name = "glob"
    description = (
        "Find files by glob pattern ('*' stays within a directory, '**' spans directories, "
        "'{a,b}' matches either; a pattern without '/' matches file names at any depth). "
        "Files the workspace's .gitignore ignores are skipped unless path names them."
    )
    args_model = GlobArgs

    def execute(self, args: GlobArgs, ctx: ToolContext) -> str:
        matcher = _glob(args.pattern)
        base = ctx.fs.resolve(args.path)
        rules = workspace_ignores(ctx.fs)
        matches = []
        for rel in ctx.fs.iter_files(base):
            ctx.cancel.raise_if_cancelled()
            relative = rel[len(base) + 1 :] if base else rel
            if _matches(matcher, relative) and not rules.ignored(rel, below=base):
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
    include: str | None = Field(
        default=None, description="Only files matching this glob, e.g. '*.py' or '*.{ts,tsx}'."
    )
    case_insensitive: bool = Field(default=False, description="Ignore case.")
    max_results: int = Field(default=200, ge=1, le=5000, description="Maximum matching lines.")


class Grep(Tool[GrepArgs]):
    name = "grep"
    description = (
        "Search file contents with a regular expression; prints path:line: text for each "
        "matching line (binary files and files the workspace's .gitignore ignores are skipped "
        "unless path names them; output is capped)."
    )
    args_model = GrepArgs

    def execute(self, args: GrepArgs, ctx: ToolContext) -> str:
        try:
            regex = _regex.compile(args.pattern, _regex.IGNORECASE if args.case_insensitive else 0)
        except _regex.error as exc:
            raise ToolError(f"invalid regular expression {args.pattern!r}: {exc}") from None
        include = _glob(args.include) if args.include else None
        needle = required_literal(args.pattern, args.case_insensitive)
        base = ctx.fs.resolve(args.path)
        rules = workspace_ignores(ctx.fs)
        out: list[str] = []
        size = 0
        hits = 0
        capped = False
        for rel in ctx.fs.iter_files(base):
            ctx.cancel.raise_if_cancelled()
            if include is not None and not _matches(include, rel):
                continue
            if rules.ignored(rel, below=base):
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


def workspace_ignores(fs: FsView) -> IgnoreRules:
    """The ignore rules of ``fs``'s workspace, read through the view (so an overlay's too)."""

    def read(path: str) -> str | None:
        try:
            data = fs.read_bytes(path, limit=MAX_IGNORE_FILE_BYTES)
        except (FsError, OSError):
            return None
        return data.decode("utf-8", errors="replace")

    return IgnoreRules(read)


def _glob(pattern: str) -> GlobMatcher:
    try:
        return compile_glob(pattern)
    except PatternError as exc:
        raise ToolError(str(exc)) from None


def _matches(matcher: GlobMatcher, path: str) -> bool:
    try:
        return matcher.match(path)
    except PatternError as exc:
        raise ToolError(str(exc)) from None


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
