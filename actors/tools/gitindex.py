"""A private copy of the git index for a speculation's shell command.

``GIT_OPTIONAL_LOCKS=0`` (set for every ``shell`` command) stops ``git
status`` from refreshing and rewriting ``.git/index``; but older git (2.39,
for one) still refreshes it opportunistically in ``git diff`` and ``git
describe --dirty`` whatever that setting says (newer git checks it in
``diff``). A speculation -- commands the user never approved, running
while the user works -- must not touch the user's index at all: a rewrite
under ``index.lock`` at the wrong moment fails the user's own ``git commit``.

So a speculation's command gets ``GIT_INDEX_FILE`` pointing at a private copy
of the repository's index, taken just before it runs: git reads the same
entries (a read-only command sees exactly what it would have), and any
refresh it writes goes to the copy, which is deleted with the call. The
repository is found the way git finds it (``GIT_DIR``, else walking up from
the working directory to a ``.git`` directory or a ``gitdir:`` file, as in a
linked worktree). Submodules are unaffected: git clears ``GIT_INDEX_FILE``
for the processes it runs inside them, and ``GIT_OPTIONAL_LOCKS=0`` applies
there. An index larger than :data:`MAX_INDEX_BYTES` is not copied (the
command then relies on ``GIT_OPTIONAL_LOCKS`` alone, and the event is logged).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

import structlog

log = structlog.get_logger(__name__)

MAX_INDEX_BYTES = 64 * 1024 * 1024
_MAX_DEPTH = 256


def git_dir(cwd: str, environ: Mapping[str, str]) -> str | None:
    """The git directory a command started in ``cwd`` would use, or None."""
    if environ.get("GIT_DIR"):
        path = environ["GIT_DIR"]
        return os.path.normpath(os.path.join(cwd, path))
    here = os.path.abspath(cwd)
    for _ in range(_MAX_DEPTH):
        dotgit = os.path.join(here, ".git")
        if os.path.isdir(dotgit):
            return dotgit
        if os.path.isfile(dotgit):
            try:
                with open(dotgit, encoding="utf-8", errors="replace") as f:
                    line = f.readline(4096).strip()
            except OSError:
                return None
            if line.startswith("gitdir:"):
                return os.path.normpath(os.path.join(here, line[len("gitdir:") :].strip()))
            return None
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent
    return None


def private_index(cwd: str, environ: Mapping[str, str], scratch: str) -> dict[str, str]:
    """Environment additions giving a command a private copy of its repository's index.

    ``scratch`` is a directory the caller owns and removes after the command.
    Returns ``{}`` outside a repository, without an index, or for a huge one.
    """
    gitdir = git_dir(cwd, environ)
    if gitdir is None:
        return {}
    index = environ.get("GIT_INDEX_FILE") or os.path.join(gitdir, "index")
    try:
        size = os.stat(index).st_size
    except OSError:
        return {}
    if size > MAX_INDEX_BYTES:
        log.info("shell_git_index_not_copied", index=index, size=size)
        return {}
    copy = os.path.join(scratch, "index")
    try:
        shutil.copyfile(index, copy)
    except OSError as exc:
        log.info("shell_git_index_copy_failed", index=index, error=str(exc))
        return {}
    return {"GIT_INDEX_FILE": copy}
