"""``inspect``: read exactly the part of a stored output the model needs.

Registered automatically whenever a blob store is configured. It runs on a
tool-pool thread and reads through the store's thread-safe reader (line
index, no full rescans), so a 50-line range of a 100 MB blob costs
milliseconds.
"""

from __future__ import annotations

from pydantic import Field

from actors.blobs.selectors import InspectError, inspect_blob
from actors.tools.base import Tool, ToolArgs, ToolContext, ToolError
from messages.blobs import BlobLimits


class InspectArgs(ToolArgs):
    blob_id: str = Field(description="The id from a [blob:<id>] summary.")
    selector: str | None = Field(
        default=None,
        description=(
            "Omit for an overview. Text: 'lines:N-M' or 'lines:N-' (1-based, inclusive). "
            "Arrays: 'slice:N..M' (0-based, end-exclusive). Objects: 'key:NAME'. "
            "Nested values: 'pointer:/a/0/b' (JSON Pointer)."
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

    def execute(self, args: InspectArgs, ctx: ToolContext) -> str:
        reader = ctx.services.blobs
        if reader is None:
            raise ToolError("No blob store is configured in this runtime; nothing to inspect.")
        try:
            return inspect_blob(reader, args.blob_id, args.selector, self.limits)
        except InspectError as exc:
            raise ToolError(str(exc)) from None
