"""``read_file``, ``write_file`` and ``edit``: the file tools, named as coding agents name them."""

from __future__ import annotations

from pydantic import Field

from fore.actors.tools.base import Tool, ToolArgs, ToolContext, ToolError
from fore.actors.tools.fs import NotFound
from fore.actors.tools.paths import split_lines

MAX_READ_BYTES = 50 * 1024 * 1024
MAX_LINE_CHARS = 2000
DEFAULT_READ_LINES = 2000


def decode_text(data: bytes, rel: str) -> str:
    """UTF-8 text, or a clear error for binary content."""
    if b"\x00" in data[:8192]:
        raise ToolError(f"{rel} is a binary file ({len(data)} bytes); read_file shows text only")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(
            f"{rel} is not valid UTF-8 ({len(data)} bytes); read_file shows text only"
        ) from None


def read_text(ctx: ToolContext, path: str) -> tuple[str, str]:
    rel = ctx.fs.resolve(path)
    st = ctx.fs.stat(rel)
    if st is None:
        raise NotFound(f"{rel or path}: no such file")
    if st.kind == "dir":
        raise ToolError(f"{rel} is a directory; use list_directory")
    if st.size > MAX_READ_BYTES:
        raise ToolError(f"{rel} is {st.size} bytes, too large to read; use grep or shell")
    return rel, decode_text(ctx.fs.read_bytes(rel), rel)


class ReadFileArgs(ToolArgs):
    path: str = Field(description="File path, relative to the workspace root.")
    offset: int = Field(default=1, ge=1, description="First line to show (1-based).")
    limit: int = Field(
        default=DEFAULT_READ_LINES, ge=1, le=20_000, description="Maximum number of lines."
    )


class ReadFile(Tool[ReadFileArgs]):
    name = "read_file"
    description = (
        "Read a text file. Lines are numbered (1-based); use offset and limit to page "
        "through large files."
    )
    args_model = ReadFileArgs

    def execute(self, args: ReadFileArgs, ctx: ToolContext) -> str:
        rel, text = read_text(ctx, args.path)
        if text == "":
            return f"{rel} is empty."
        lines = split_lines(text)
        total = len(lines)
        if args.offset > total:
            raise ToolError(f"offset {args.offset} is past the end of {rel} ({total} lines)")
        first = args.offset - 1
        shown = lines[first : first + args.limit]
        out = []
        for number, line in enumerate(shown, start=args.offset):
            text_line = (
                line
                if len(line) <= MAX_LINE_CHARS
                else line[:MAX_LINE_CHARS] + " … [line truncated]"
            )
            out.append(f"{number:>6}\t{text_line}")
        last = first + len(shown)
        if last < total:
            out.append(
                f"… showing lines {args.offset}-{last} of {total}; use offset={last + 1} to read on"
            )
        return "\n".join(out)


class WriteFileArgs(ToolArgs):
    path: str = Field(description="File path, relative to the workspace root.")
    content: str = Field(description="The complete new content of the file.")


class WriteFile(Tool[WriteFileArgs]):
    name = "write_file"
    description = (
        "Create or overwrite a file with the given content (parent directories are created)."
    )
    args_model = WriteFileArgs

    def write_paths(self, args: WriteFileArgs) -> frozenset[str]:
        return frozenset({args.path})

    def execute(self, args: WriteFileArgs, ctx: ToolContext) -> str:
        rel = ctx.fs.resolve(args.path)
        existed = ctx.fs.stat(rel) is not None
        data = args.content.encode("utf-8")
        ctx.cancel.raise_if_cancelled()
        ctx.fs.write_bytes(rel, data)
        return f"{'Overwrote' if existed else 'Created'} {rel} ({len(data)} bytes)."


class EditArgs(ToolArgs):
    path: str = Field(description="File path, relative to the workspace root.")
    old_string: str = Field(min_length=1, description="Exact text to replace.")
    new_string: str = Field(description="Replacement text.")
    replace_all: bool = Field(default=False, description="Replace every occurrence.")
    preview: bool = Field(
        default=False,
        description="Stage the edit and show a diff; nothing is written until resolve applies it.",
    )


def apply_edit(text: str, rel: str, old: str, new: str, replace_all: bool) -> tuple[str, int]:
    """The edited text and the number of replacements, or a clear ToolError."""
    if old == new:
        raise ToolError("old_string and new_string are identical; nothing to change")
    count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old_string was not found in {rel}. It must match the file exactly, "
            "including whitespace and indentation; read the file first."
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {rel}; include more surrounding "
            "context to make it unique, or set replace_all to true."
        )
    return text.replace(old, new), count


class Edit(Tool[EditArgs]):
    name = "edit"
    description = (
        "Replace an exact string in a file. old_string must be unique in the file "
        "unless replace_all is true."
    )
    args_model = EditArgs

    def write_paths(self, args: EditArgs) -> frozenset[str]:
        return frozenset({args.path})

    def execute(self, args: EditArgs, ctx: ToolContext) -> str:
        if args.preview:
            from fore.actors.resolve.preview import EditSpec, queue_preview, stage

            spec = EditSpec(
                path=args.path,
                old_string=args.old_string,
                new_string=args.new_string,
                replace_all=args.replace_all,
            )
            staged, diff = stage(ctx, [spec])
            return queue_preview(ctx, staged, diff, self.name)
        rel, text = read_text(ctx, args.path)
        new_text, count = apply_edit(text, rel, args.old_string, args.new_string, args.replace_all)
        ctx.cancel.raise_if_cancelled()
        ctx.fs.write_bytes(rel, new_text.encode("utf-8"))
        return f"Edited {rel}: replaced {count} occurrence{'s' if count != 1 else ''}."
