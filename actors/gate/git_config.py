"""Does the repository's own git config make "read-only" git commands run programs?

``git log``, ``git diff`` and ``git status`` only read -- unless the
repository's local configuration names a program for them to run: a pager, an
external diff or textconv driver, an fsmonitor hook, a credential helper, a gpg
program ... A repository cloned from somewhere else cannot carry such config,
but one the agent (or an earlier speculation) wrote to can. So before a
speculative git command may run, the local config files are read -- with a
small tolerant reader of our own; running ``git config`` to ask would itself run
git in that repository -- and any key that names a program makes the command
``unknown``. So does any executable hook in the git directory (``git status``
runs ``post-index-change`` when it refreshes the index), and a log format with
a signature placeholder (``format.pretty = %G?`` runs gpg from ``git log``), and
a partial clone's promisor remote (reading a missing object fetches it).
Anything the reader is unsure about is doubt, and doubt is ``unknown`` too.

``git status`` and ``git diff`` also run git inside every populated submodule
-- every gitlink of the index, whether ``.gitmodules`` lists it or not -- and
that git reads the submodule's own config. So the probe reads the config of
the repository (``config``, ``config.worktree``, the common directory's of a
linked worktree, those under ``modules/``) and then, within a bound, of every
populated gitlink (found in the index and in ``.gitmodules``), recursively.
An unusual layout -- a submodule's ``.git`` that is a symlink, a linked
worktree, or a ``gitdir:`` file pointing outside the superproject's
``modules/`` -- a ``core.worktree`` elsewhere, a split index, an index the
reader cannot follow, too many submodules, or environment variables that send
git to another repository, index or config, are all doubt. The user's global
and system config are the user's own choice and are not read.

The config files are read by :mod:`fore.actors.gate.git_files`; the
submodules are found by :mod:`fore.actors.gate.git_submodules`.
"""

from __future__ import annotations

import os
import re
import stat
from fnmatch import translate

from fore.actors.gate.git_files import _config_entries, _Doubt, _gitdir_from_file, _read_text
from fore.actors.gate.git_submodules import _gitlinks, _submodule_gitdir

_MAX_PARENT_HOPS = 256
_MAX_MODULE_CONFIGS = 64
_MAX_REPOSITORIES = 64
"""Repositories probed per command: the repository itself and its submodules, recursively."""

RISKY_ENVIRONMENT: tuple[str, ...] = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_EXTERNAL_DIFF",
)
"""Environment variables (of this process, which shell commands inherit) that send git
to another repository, index or config than the probe reads, or make it run a program."""

PROGRAM_KEYS: tuple[str, ...] = (
    "core.pager",
    "pager.*",
    "core.editor",
    "sequence.editor",
    "core.askpass",
    "core.sshcommand",
    "core.fsmonitor",
    "core.hookspath",
    "core.gitproxy",
    "core.alternaterefscommand",
    "credential.helper",
    "credential.*.helper",
    "diff.external",
    "diff.*.textconv",
    "diff.*.command",
    "diff.tool",
    "diff.guitool",
    "difftool.*",
    "merge.tool",
    "merge.*.driver",
    "mergetool.*",
    "filter.*.*",
    "gpg.program",
    "gpg.*.program",
    "interactive.difffilter",
    "log.showsignature",
    "include.*",
    "includeif.*",
    "uploadpack.packobjectshook",
    "remote.*.uploadpack",
    "remote.*.receivepack",
    "remote.*.vcs",
    "submodule.*.update",
    "trailer.*.command",
    "trailer.*.cmd",
    "web.browser",
    "browser.*",
    "man.*",
)
"""Config keys (lower-cased, ``fnmatch`` patterns) that name programs or other config."""

PROGRAM_SUFFIXES: tuple[str, ...] = (
    "command",
    "cmd",
    "program",
    "helper",
    "driver",
    "tool",
    "textconv",
    "editor",
    "pager",
    "askpass",
    "hook",
    "hookspath",
    "fsmonitor",
    "external",
    "browser",
    "viewer",
    "filter",
)
"""The last part of a key that names a program, in any section: ``*.command``, ``*.cmd``
(``sendemail.toCmd`` too), ``*.program``, ``*.helper``, ``*.driver``, ``*.tool`` ... Matched
by pattern, not by a list of known keys, so a key a newer git adds is caught too."""

PROGRAM_SECTIONS: frozenset[str] = frozenset(
    {"hook", "pager", "filter", "difftool", "mergetool", "man", "include", "includeif", "browser"}
)
"""Sections where every key can run a program or pull in other config: ``[hook "name"]``
(git 2.54's config-based hooks: ``event = post-index-change`` with ``command = ...`` runs on
``git status``), ``[pager]``, ``[filter "x"]``, ``[include]`` ..."""

NETWORK_KEYS: tuple[str, ...] = (
    "extensions.partialclone",
    "remote.*.promisor",
    "remote.*.partialclonefilter",
)
"""Keys of a partial clone: ``git log -p`` or ``git show`` there fetch missing objects
from the remote (network access and writes to the object store)."""

FORMAT_KEYS: tuple[str, ...] = ("format.pretty", "pretty.*")
"""Keys whose value is a log format: one with a signature placeholder (``%G?``) makes a
plain ``git log``/``git show`` run gpg, like ``log.showSignature``."""

LAYOUT_KEYS: tuple[str, ...] = ("core.splitindex",)
"""Keys that change where git finds what the probe reads: doubt whatever their value."""


def _any_of(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex for a set of ``fnmatch`` patterns (a probe checks every key against all)."""
    return re.compile("|".join(f"(?:{translate(pattern)})" for pattern in patterns))


_PROGRAM_KEY = _any_of(PROGRAM_KEYS)
_NETWORK_KEY = _any_of(NETWORK_KEYS)
_FORMAT_KEY = _any_of(FORMAT_KEYS)
_LAYOUT_KEY = _any_of(LAYOUT_KEYS)
_SIGNATURE_PLACEHOLDER = re.compile(r"%G|%\(\*?signature")
_MAX_HOOK_ENTRIES = 256


def program_setting(cwd: str | os.PathLike[str]) -> str | None:
    """Why git in ``cwd`` might run a program, or ``None`` when its config is clean.

    ``None`` also when ``cwd`` is in no repository at all (git then refuses to
    run repository commands). Every read problem is reported as doubt, and so
    is a relative ``cwd``: it would be resolved against this process's working
    directory, which need not be where the command runs.
    """
    try:
        for name in RISKY_ENVIRONMENT:
            if name in os.environ:
                raise _Doubt(f"the environment sets {name}")
        directory = os.fspath(cwd)
        if not os.path.isabs(directory):
            raise _Doubt(f"the directory {directory!r} is relative")
        found = _discover(os.path.normpath(directory))
        if found is None:
            return None
        return _probe(*found)
    except _Doubt as exc:
        return f"the repository's git config could not be checked: {exc}"
    except (OSError, ValueError) as exc:
        return f"the repository's git config could not be read: {exc}"


def _probe(gitdir: str, worktree: str | None) -> str | None:
    """Check a repository's config, then that of each populated submodule (recursively)."""
    pending: list[tuple[str, str | None, str]] = [(gitdir, worktree, "")]
    seen: set[str] = set()
    while pending:
        gitdir, worktree, where = pending.pop()
        real = os.path.realpath(gitdir)
        if real in seen:
            continue
        seen.add(real)
        if len(seen) > _MAX_REPOSITORIES:
            raise _Doubt("the repository has too many submodules to check")
        own, modules = _config_files(gitdir)
        entries = [entry for path in own for entry in _config_entries(path)]
        module_entries = [entry for path in modules for entry in _config_entries(path)]
        owner = f"of the submodule {where!r}" if where else "of the repository"
        for key, value in [*entries, *module_entries]:
            problem = _risky_setting(key, value)
            if problem is not None:
                return f"the git config {owner} sets {key}, which {problem}"
        directories = {*_git_directories(gitdir), *(os.path.dirname(path) for path in modules)}
        for directory in sorted(directories):
            hook = _executable_hook(directory)
            if hook is not None:
                return f"the git directory {owner} has an executable hook {hook!r}, which can run"
        settings = dict(entries)
        _check_layout(entries, gitdir, worktree)
        if worktree is None:
            continue
        hash_size = _hash_size(settings.get("extensions.objectformat"))
        for rel in sorted(_gitlinks(gitdir, worktree, hash_size)):
            sub_gitdir = _submodule_gitdir(worktree, rel, gitdir)
            if sub_gitdir is not None:
                label = f"{where}/{rel}" if where else rel
                pending.append((sub_gitdir, os.path.join(worktree, rel), label))
    return None


def runs_program(key: str) -> bool:
    """Whether config ``key`` (lower-cased) names a program or other config, by pattern."""
    section = key.split(".", 1)[0]
    last = key.rsplit(".", 1)[-1]
    return (
        section in PROGRAM_SECTIONS
        or last.endswith(PROGRAM_SUFFIXES)
        or _PROGRAM_KEY.match(key) is not None
    )


def _risky_setting(key: str, value: str | None) -> str | None:
    """What a config entry makes "read-only" git do, or ``None`` when it is harmless."""
    if runs_program(key):
        return "can run a program"
    if _NETWORK_KEY.match(key):
        return "makes reading commands fetch from a remote"
    if _FORMAT_KEY.match(key) and value is not None and _SIGNATURE_PLACEHOLDER.search(value):
        return "has a signature placeholder that runs gpg"
    return None


def _executable_hook(directory: str) -> str | None:
    """The name of an executable hook in ``directory/hooks``, or ``None``.

    ``git status``, ``git diff`` and ``git describe --dirty`` refresh the index
    and run ``post-index-change``; other hooks (``reference-transaction``,
    ``fsmonitor-watchman`` ...) run from other paths of "read-only" commands.
    Rather than track which command runs which hook, any executable file there
    is doubt. Git runs a hook only under its exact name, so ``*.sample`` files
    (executable in git's default template) never run.
    """
    hooks = os.path.join(directory, "hooks")
    try:
        mode = os.stat(hooks).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISDIR(mode):
        return None  # git looks for hooks/<name> and finds nothing
    names = os.listdir(hooks)
    if len(names) > _MAX_HOOK_ENTRIES:
        raise _Doubt(f"{hooks!r} holds too many files to check")
    for name in sorted(names):
        if name.endswith(".sample"):
            continue
        path = os.path.join(hooks, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return name
    return None


def _check_layout(entries: list[tuple[str, str | None]], gitdir: str, worktree: str | None) -> None:
    """Doubt when the config moves the work tree or the index somewhere unusual."""
    for key, value in entries:
        if _LAYOUT_KEY.match(key):
            raise _Doubt(f"the config sets {key}")
        if key == "core.worktree":
            # Absorbed submodules point back at their own directory; anything
            # else makes git work on a tree the probe did not look at.
            target = os.path.realpath(os.path.join(gitdir, value or ""))
            if worktree is None or target != os.path.realpath(worktree):
                raise _Doubt("core.worktree names another work tree")


def _hash_size(object_format: str | None) -> int:
    if object_format is None or object_format.lower() == "sha1":
        return 20
    if object_format.lower() == "sha256":
        return 32
    raise _Doubt(f"an unknown object format {object_format!r}")


def _discover(start: str) -> tuple[str, str | None] | None:
    """The git directory git would use from ``start`` and its work tree, like git's discovery."""
    if not os.path.isdir(start):
        raise _Doubt(f"{start!r} is not a directory")
    directory = start
    for _ in range(_MAX_PARENT_HOPS):
        dotgit = os.path.join(directory, ".git")
        if os.path.isdir(dotgit):
            return dotgit, directory
        if os.path.isfile(dotgit):
            return _gitdir_from_file(dotgit), directory
        if os.path.lexists(dotgit):
            raise _Doubt(f"{dotgit!r} is neither a directory nor a file")
        if _is_gitdir(directory):
            return directory, None
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent
    raise _Doubt("the directory is nested too deeply")


def _is_gitdir(directory: str) -> bool:
    return (
        os.path.isfile(os.path.join(directory, "HEAD"))
        and os.path.isdir(os.path.join(directory, "objects"))
        and os.path.isdir(os.path.join(directory, "refs"))
    )


def _git_directories(gitdir: str) -> list[str]:
    """The git directory and, for a linked worktree, its common directory (hooks live there)."""
    directories = [gitdir]
    commondir = os.path.join(gitdir, "commondir")
    if os.path.isfile(commondir):
        target = _read_text(commondir).strip()
        directories.append(os.path.normpath(os.path.join(gitdir, target)))
    return directories


def _config_files(gitdir: str) -> tuple[list[str], list[str]]:
    """The repository's own config files, and those of its absorbed submodules."""
    directories = _git_directories(gitdir)
    own = [
        os.path.join(directory, name)
        for directory in directories
        for name in ("config", "config.worktree")
    ]
    modules: list[str] = []
    for directory in directories:
        modules.extend(_module_configs(os.path.join(directory, "modules")))
    return [path for path in own if os.path.exists(path)], modules


def _module_configs(modules: str) -> list[str]:
    """Config files of absorbed submodules (``modules/<name>/config``, nested too)."""
    if not os.path.isdir(modules):
        return []
    found: list[str] = []
    for root, dirs, names in os.walk(modules):
        if "config" in names:
            found.append(os.path.join(root, "config"))
            if len(found) > _MAX_MODULE_CONFIGS:
                raise _Doubt("too many submodule configs")
        if "HEAD" in names:
            # A submodule's git directory: only its own modules/ can hold more
            # configs; its objects, refs and logs are not walked.
            dirs[:] = [name for name in dirs if name == "modules"]
    return found
