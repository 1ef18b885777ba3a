"""Previewed multi-file edits: stage now, write on ``resolve(apply)``, never stale.

``multi_edit`` (and ``edit`` with ``preview: true``) computes every replacement,
records each file's content hash, shows a diff, and stages a pending action.
Applying first re-reads every file: if any changed since the preview, nothing
is written and the error names the stale files; otherwise each file is
written atomically.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from actors.tools.base import Tool, ToolArgs, ToolContext, ToolError
from actors.tools.builtin.files import apply_edit, decode_text

DIFF_CAP = 12_000


class StalePreview(ToolError):
    """A file changed between the preview and the apply."""


@dataclass(frozen=True)
class StagedFile:
    path: str
    sha256: str
    new_text: str
    replacements: int


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class EditSpec(ToolArgs):
    path: str = Field(description="File path, relative to the workspace root.")
    old_string: str = Field(min_length=1, description="Exact text to replace.")
    new_string: str = Field(description="Replacement text.")
    replace_all: bool = Field(default=False, description="Replace every occurrence.")


def stage(ctx: ToolContext, edits: Sequence[EditSpec]) -> tuple[list[StagedFile], str]:
    """Compute every file's new content (edits to one file apply in order) and a diff."""
    order: list[str] = []
    originals: dict[str, bytes] = {}
    texts: dict[str, str] = {}
    counts: dict[str, int] = {}
    for spec in edits:
        rel = ctx.fs.resolve(spec.path)
        if rel not in texts:
            data = ctx.fs.read_bytes(rel)
            originals[rel] = data
            texts[rel] = decode_text(data, rel)
            counts[rel] = 0
            order.append(rel)
        texts[rel], n = apply_edit(
            texts[rel], rel, spec.old_string, spec.new_string, spec.replace_all
        )
        counts[rel] += n
    staged = [StagedFile(rel, sha256(originals[rel]), texts[rel], counts[rel]) for rel in order]
    diff = "".join(
        "".join(
            difflib.unified_diff(
                originals[f.path].decode("utf-8").splitlines(keepends=True),
                f.new_text.splitlines(keepends=True),
                fromfile=f"a/{f.path}",
                tofile=f"b/{f.path}",
            )
        )
        for f in staged
    )
    if len(diff) > DIFF_CAP:
        diff = diff[:DIFF_CAP] + f"\n… diff truncated ({len(diff)} characters)\n"
    return staged, diff


def apply_staged(ctx: ToolContext, staged: Sequence[StagedFile]) -> str:
    """Write the staged files, or nothing if any of them changed since the preview."""
    stale = []
    for item in staged:
        st = ctx.fs.stat(item.path)
        if st is None or st.kind != "file" or sha256(ctx.fs.read_bytes(item.path)) != item.sha256:
            stale.append(item.path)
    if stale:
        raise StalePreview(
            f"Preview is stale: {', '.join(stale)} changed since the preview; nothing was written. "
            "Discard it and preview again."
        )
    for item in staged:
        ctx.fs.write_bytes(item.path, item.new_text.encode("utf-8"))
    total = sum(f.replacements for f in staged)
    return (
        f"Applied {total} replacements in {len(staged)} files: {', '.join(f.path for f in staged)}."
    )


def queue_preview(ctx: ToolContext, staged: list[StagedFile], diff: str, tool: str) -> str:
    total = sum(f.replacements for f in staged)
    label = f"{total} replacements in {len(staged)} file{'s' if len(staged) != 1 else ''}"

    def apply(reason: str, extra: Mapping[str, Any] | None) -> str:
        return apply_staged(ctx, staged)

    action_id = ctx.push_pending_action(
        label=label,
        apply=apply,
        details={"files": [f.path for f in staged], "replacements": total},
        source_tool_name=tool,
    )
    return (
        f"Preview ({action_id}): {label}, not written yet. Call resolve with action 'apply' "
        f"or 'discard'.\n{diff}"
    )


class MultiEditArgs(ToolArgs):
    edits: list[EditSpec] = Field(min_length=1, description="Replacements, applied in order.")
    preview: bool = Field(
        default=False, description="Stage the edits and show a diff; apply them with resolve."
    )


class MultiEdit(Tool[MultiEditArgs]):
    name = "multi_edit"
    description = (
        "Replace exact strings in one or more files at once. With preview: true, nothing "
        "is written until you call resolve (apply or discard)."
    )
    args_model = MultiEditArgs

    def write_paths(self, args: MultiEditArgs) -> frozenset[str]:
        return frozenset(spec.path for spec in args.edits)

    def execute(self, args: MultiEditArgs, ctx: ToolContext) -> str:
        staged, diff = stage(ctx, args.edits)
        if args.preview:
            return queue_preview(ctx, staged, diff, self.name)
        ctx.cancel.raise_if_cancelled()
        return apply_staged(ctx, staged)
