"""Does the repository's own git config make "read-only" git commands run programs?

``git log``, ``git diff`` and ``git status`` only read -- unless the
repository's local configuration names a program for them to run: a pager, an
external diff or textconv driver, an fsmonitor hook, a credential helper, a gpg
program ... A repository cloned from somewhere else cannot carry such config,
but one the agent (or an earlier speculation) wrote to can. So before a
speculative git command may run, the local config files are read -- with a
small tolerant reader of our own; running ``git config`` to ask would itself run
git in that repository -- and any key that names a program makes the command
``unknown``. Anything the reader is unsure about is doubt, and doubt is
``unknown`` too.

Only the repository's files are read (``config``, ``config.worktree``, the
common directory's of a linked worktree, and those of submodules under
``modules/``); the user's global and system config are the user's own choice.
"""

from __future__ import annotations

import os
import re
from fnmatch import fnmatchcase

_MAX_CONFIG_BYTES = 1 << 20
_MAX_PARENT_HOPS = 256
_MAX_MODULE_CONFIGS = 64

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

_SECTION = re.compile(r'\[\s*([A-Za-z0-9.-]+)\s*(?:"((?:[^"\\\n]|\\.)*)"\s*)?\]')
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9-]*)\s*(?:$|[=#;])")


class _Doubt(Exception):
    """The reader cannot tell for sure what the config says."""


def program_setting(cwd: str | os.PathLike[str]) -> str | None:
    """Why git in ``cwd`` might run a program, or ``None`` when its config is clean.

    ``None`` also when ``cwd`` is in no repository at all (git then refuses to
    run repository commands). Every read problem is reported as doubt.
    """
    try:
        gitdir = _discover(os.path.abspath(os.fspath(cwd)))
        if gitdir is None:
            return None
        for path in _config_files(gitdir):
            for key in _config_keys(path):
                if any(fnmatchcase(key, pattern) for pattern in PROGRAM_KEYS):
                    return f"the repository's git config sets {key}, which can run a program"
    except _Doubt as exc:
        return f"the repository's git config could not be checked: {exc}"
    except (OSError, ValueError) as exc:
        return f"the repository's git config could not be read: {exc}"
    return None


def _discover(start: str) -> str | None:
    """The git directory git would use from ``start``, like git's own discovery."""
    if not os.path.isdir(start):
        raise _Doubt(f"{start!r} is not a directory")
    directory = start
    for _ in range(_MAX_PARENT_HOPS):
        dotgit = os.path.join(directory, ".git")
        if os.path.isdir(dotgit):
            return dotgit
        if os.path.isfile(dotgit):
            return _gitdir_from_file(dotgit)
        if os.path.lexists(dotgit):
            raise _Doubt(f"{dotgit!r} is neither a directory nor a file")
        if _is_gitdir(directory):
            return directory
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


def _read_text(path: str) -> str:
    with open(path, "rb") as handle:
        data = handle.read(_MAX_CONFIG_BYTES + 1)
    if len(data) > _MAX_CONFIG_BYTES:
        raise _Doubt(f"{path!r} is too large")
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")


def _gitdir_from_file(dotgit: str) -> str:
    """Follow a ``.git`` file (``gitdir: <path>``) as worktrees and submodules use."""
    text = _read_text(dotgit).strip()
    if not text.startswith("gitdir:") or "\n" in text:
        raise _Doubt(f"{dotgit!r} is not a 'gitdir:' file")
    target = text.removeprefix("gitdir:").strip()
    gitdir = os.path.join(os.path.dirname(dotgit), target)
    if not os.path.isdir(gitdir):
        raise _Doubt(f"{dotgit!r} points to a missing git directory")
    return os.path.normpath(gitdir)


def _config_files(gitdir: str) -> list[str]:
    directories = [gitdir]
    commondir = os.path.join(gitdir, "commondir")
    if os.path.isfile(commondir):
        target = _read_text(commondir).strip()
        directories.append(os.path.normpath(os.path.join(gitdir, target)))
    files = [
        os.path.join(directory, name)
        for directory in directories
        for name in ("config", "config.worktree")
    ]
    for directory in directories:
        files.extend(_module_configs(os.path.join(directory, "modules")))
    return [path for path in files if os.path.exists(path)]


def _module_configs(modules: str) -> list[str]:
    """Config files of submodules, which ``git status``/``git diff`` recurse into."""
    if not os.path.isdir(modules):
        return []
    found: list[str] = []
    for root, _dirs, names in os.walk(modules):
        if "config" in names:
            found.append(os.path.join(root, "config"))
            if len(found) > _MAX_MODULE_CONFIGS:
                raise _Doubt("too many submodule configs")
    return found


def _config_keys(path: str) -> list[str]:
    """The lower-cased ``section[.subsection].key`` names set in one config file.

    Values are skipped; only which keys appear matters. Constructs whose key
    could be misread -- a value continued with a trailing backslash, an
    unbalanced quote, a line that is neither a section, a key nor a comment --
    are doubt rather than guesses.
    """
    keys: list[str] = []
    section: str | None = None
    for line in _read_text(path).splitlines():
        rest = line.strip()
        if rest.startswith("["):
            match = _SECTION.match(rest)
            if match is None:
                raise _Doubt(f"an unreadable section header in {path!r}")
            name, subsection = match.group(1).lower(), match.group(2)
            section = name if subsection is None else f"{name}.{subsection.lower()}"
            rest = rest[match.end() :].strip()
        if not rest or rest[0] in "#;":
            continue
        match = _KEY.match(rest)
        if match is None or section is None:
            raise _Doubt(f"an unreadable line in {path!r}")
        _check_value(rest[match.end(1) :], path)
        keys.append(f"{section}.{match.group(1).lower()}")
    return keys


def _check_value(value: str, path: str) -> None:
    """Refuse values whose end we might misjudge (continuations, open quotes)."""
    quoted = False
    escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char in "#;" and not quoted:
            return
    if quoted or escaped:
        raise _Doubt(f"a multi-line or unterminated value in {path!r}")
