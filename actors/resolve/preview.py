"""Previewed multi-file edits: stage now, write on ``resolve(apply)``, never stale.

``multi_edit`` (and ``edit`` with ``preview: true``) computes every replacement,
records each file's content hash, shows a diff, and stages a pending action.
Applying first re-reads every file: if any changed since the preview, nothing
is written and the error names the stale files. Otherwise the apply is
all-or-nothing across files, in two phases:

1. *stage*: every file's new content is written to a temporary file next to
   its target. A failure here (a directory that became a file, a full disk,
   no permission) leaves every target untouched;
2. *replace*: each target is replaced atomically. If one replace fails
   midway, the targets already replaced are restored from the originals
   read in the stale check, so the workspace is as before and a retry is
   not "stale".

The temporaries are removed either way. (``FsView`` has no rename, so the
replace is the view's own atomic write of the staged content; the staging
pass is what proves every target directory writable before any target
changes.)
"""

from __future__ import annotations

import difflib
import hashlib
import posixpath
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from fore.actors.core.logs import get_logger
from fore.actors.tools.base import Tool, ToolArgs, ToolContext, ToolError
from fore.actors.tools.builtin.files import apply_edit, decode_text
from fore.actors.tools.fs import FsView
from fore.errors import PreviewApplyFailed, StalePreview

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["PreviewApplyFailed", "StalePreview"]

DIFF_CAP = 12_000

log = get_logger(__name__)


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
    for rel in order:
        try:
            texts[rel].encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (e.g. a JSON-escaped "\ud800" in new_string) can never
            # be written as UTF-8: refuse now rather than stage an apply that must fail.
            raise ToolError(
                f"The new content of {rel} is not valid Unicode (it holds a lone surrogate, "
                "probably from new_string); fix the replacement text and try again."
            ) from None
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


def _stage_name(path: str) -> str:
    """A hidden temporary next to ``path`` (same directory, so the same filesystem)."""
    parent, name = posixpath.split(path)
    return posixpath.join(parent, f".{name[:64]}.fore-stage-{secrets.token_hex(6)}")


def apply_staged(ctx: ToolContext, staged: Sequence[StagedFile]) -> str:
    """Write all the staged files or none of them (see the module docs)."""
    fs = ctx.fs
    originals: dict[str, bytes] = {}
    stale = []
    for item in staged:
        st = fs.stat(item.path)
        data = fs.read_bytes(item.path) if st is not None and st.kind == "file" else None
        if data is None or sha256(data) != item.sha256:
            stale.append(item.path)
        else:
            originals[item.path] = data
    if stale:
        raise StalePreview(
            f"Preview is stale: {', '.join(stale)} changed since the preview; nothing was written. "
            "Discard it and preview again."
        )
    contents = [(item, item.new_text.encode("utf-8")) for item in staged]
    temps: list[str] = []
    try:
        for item, data in contents:
            temp = _stage_name(item.path)
            try:
                fs.write_bytes(temp, data)
            except Exception as exc:
                raise PreviewApplyFailed(
                    f"Could not stage {item.path} ({exc}); no file was changed."
                ) from exc
            temps.append(temp)
        _replace_all(fs, contents, originals)
    finally:
        for temp in temps:
            try:
                fs.delete(temp)
            except Exception as exc:  # best effort: a hidden leftover, never a target
                log.warning("preview_stage_cleanup_failed", path=temp, error=repr(exc))
    total = sum(f.replacements for f in staged)
    return (
        f"Applied {total} replacements in {len(staged)} files: {', '.join(f.path for f in staged)}."
    )


def _replace_all(
    fs: FsView, contents: Sequence[tuple[StagedFile, bytes]], originals: Mapping[str, bytes]
) -> None:
    """Replace every target; on a failure restore the ones already replaced."""
    replaced: list[str] = []
    for item, data in contents:
        try:
            fs.write_bytes(item.path, data)
        except Exception as exc:
            not_restored = []
            for path in reversed(replaced):
                try:
                    fs.write_bytes(path, originals[path])
                except Exception as undo:
                    log.error("preview_rollback_failed", path=path, error=repr(undo))
                    not_restored.append(path)
            if not_restored:
                raise PreviewApplyFailed(
                    f"Writing {item.path} failed ({exc}) and restoring "
                    f"{', '.join(not_restored)} failed too: those files hold the new "
                    "content, the others are unchanged."
                ) from exc
            raise PreviewApplyFailed(
                f"Writing {item.path} failed ({exc}); the files written before it were "
                "restored, so no file was changed."
            ) from exc
        replaced.append(item.path)


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
