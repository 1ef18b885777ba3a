"""``list_directory``, ``glob`` and ``grep``.

All three work through the session's :class:`~actors.tools.fs.FsView` only, so
they see exactly what the view shows -- the real tree, or the speculation
overlay's union view.
"""

from __future__ import annotations

import re

from pydantic import Field

from actors.tools.base import Tool, ToolArgs, ToolContext, ToolError
from actors.tools.fs import FsError
from actors.tools.paths import glob_regex, split_lines

MAX_LIST_ENTRIES = 1000
MAX_GLOB_RESULTS = 1000
MAX_GREP_FILE_BYTES = 8 * 1024 * 1024
GREP_OUTPUT_CAP = 64 * 1024
MAX_GREP_LINE = 500


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
            regex = re.compile(args.pattern, re.IGNORECASE if args.case_insensitive else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {args.pattern!r}: {exc}") from None
        include = glob_regex(args.include) if args.include else None
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
            for number, line in enumerate(split_lines(text), start=1):
                if regex.search(line) is None:
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
