"""``inspect``: read exactly the part of a stored output the model needs.

Registered automatically whenever a blob store is configured. It runs on a
tool-pool thread and reads the :class:`~actors.blobs.fs_store.FsBlobStore`
directly (thread-safe; line index, bounded byte windows for long lines, a
top-level index for big JSON, parsed JSON cached), so a 50-line range of a
100 MB blob costs milliseconds and no call reads or parses a whole big blob.
Blocking there is fine: a tool-pool thread is not a dispatcher thread, and
going through the blob-store actor would only add a hop.

It reads as the calling session (``ctx.session_id``) through
:class:`~actors.blobs.ownership.SessionBlobs`: a blob another session stored
is answered exactly like one that does not exist (:mod:`actors.blobs.ownership`).
A blob store that cannot say who stored a blob is not read at all.

Its answer is an explicit ``Inline``: it is already capped (16 KB) and is the
part the model asked for, so the worker must keep it inline rather than
store it as a new blob and hand the model a summary of what it just asked to
read.
"""

from __future__ import annotations

from pydantic import Field

from fore.actors.blobs.ownership import SessionBlobs
from fore.actors.blobs.selectors import InspectError, inspect_blob
from fore.actors.tools.base import Tool, ToolArgs, ToolContext, ToolError
from fore.messages.blobs import BlobLimits, Inline


class InspectArgs(ToolArgs):
    blob_id: str = Field(description="The id from a [blob:<id>] summary.")
    selector: str | None = Field(
        default=None,
        description=(
            "Omit for an overview. Text: 'lines:N-M' or 'lines:N-' (1-based, inclusive); "
            "'bytes:N..M' or 'bytes:N..' (0-based byte offsets, end-exclusive) reads part of "
            "a line too long to show whole -- the output's truncation marker names the exact "
            "selector to read on with. Arrays: 'slice:N..M' (0-based, end-exclusive). "
            "Objects: 'key:NAME'. Nested values: 'pointer:/a/0/b' (JSON Pointer)."
        ),
    )


class Inspect(Tool[InspectArgs]):
    name = "inspect"
    description = (
        "Read part of a large tool output that history shows only as a [blob:<id>] summary."
    )
    args_model = InspectArgs

    def __init__(self, limits: BlobLimits | None = None) -> None:
        self.limits = limits or BlobLimits()

    def execute(self, args: InspectArgs, ctx: ToolContext) -> Inline:
        store = ctx.services.blobs
        if store is None:
            raise ToolError("No blob store is configured in this runtime; nothing to inspect.")
        if not callable(getattr(store, "owner", None)):
            raise ToolError(
                "This runtime's blob store cannot tell which session stored a blob, so inspect "
                "cannot read from it."
            )
        reader = SessionBlobs(store, ctx.session_id)
        try:
            return Inline(text=inspect_blob(reader, args.blob_id, args.selector, self.limits))
        except InspectError as exc:
            raise ToolError(str(exc)) from None
