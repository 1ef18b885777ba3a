"""Where a repository's submodules are, for the git-config probe.

``git status`` and ``git diff`` run git inside every populated submodule --
every gitlink of the index, whether ``.gitmodules`` lists it or not -- and
that git reads the submodule's own config. This module finds them: the
gitlinks of the index (a parser of git's index format, versions 2 to 4) and
the paths ``.gitmodules`` names, and the git directory git would use in each
one. An unusual layout (a symlinked submodule, a linked worktree, a
``gitdir:`` outside ``modules/``, a split index) is doubt.
"""

from __future__ import annotations

import os
import stat
import struct
import threading
from collections import OrderedDict

from fore.actors.gate.git_files import _config_entries, _Doubt, _gitdir_from_file, _read_text

_MAX_GITLINKS = 256
"""Gitlinks one repository may have before the probe gives up (doubt)."""
_MAX_INDEX_BYTES = 64 << 20
_GITLINK_MODE = 0o160000
_GITLINK_MODE_BYTES = struct.pack(">I", _GITLINK_MODE)
_INDEX_VERSIONS = frozenset(struct.pack(">I", version) for version in (2, 3, 4))


def _gitlinks(gitdir: str, worktree: str, hash_size: int) -> set[str]:
    """Work-tree-relative paths of the repository's submodules.

    The index decides where ``git status`` and ``git diff`` recurse; paths
    ``.gitmodules`` names are added, so a submodule not yet staged counts too.
    """
    links = set(_index_gitlinks(os.path.join(gitdir, "index"), hash_size))
    links.update(_gitmodules_paths(os.path.join(worktree, ".gitmodules")))
    if len(links) > _MAX_GITLINKS:
        raise _Doubt("the repository has too many submodules to check")
    for rel in links:
        parts = rel.split("/")
        if not rel or rel.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise _Doubt(f"an unusual submodule path {rel!r}")
    return links


def _gitmodules_paths(path: str) -> list[str]:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return []
    if not stat.S_ISREG(mode):
        raise _Doubt("'.gitmodules' is not a regular file")
    return [
        value or ""
        for key, value in _config_entries(path)
        if key.startswith("submodule.") and key.endswith(".path")
    ]


def _submodule_gitdir(worktree: str, rel: str, super_gitdir: str) -> str | None:
    """The git directory git would use in the submodule at ``rel``; None when not populated."""
    directory = os.path.join(worktree, rel)
    try:
        mode = os.lstat(directory).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None  # a deleted submodule: git does not look inside
    if stat.S_ISLNK(mode):
        raise _Doubt(f"the submodule path {rel!r} is a symlink")
    if not stat.S_ISDIR(mode):
        return None  # replaced by a file: a type change, git does not recurse
    dotgit = os.path.join(directory, ".git")
    try:
        mode = os.lstat(dotgit).st_mode
    except FileNotFoundError:
        return None  # not checked out: git treats it as clean without running there
    if stat.S_ISDIR(mode):
        if os.path.exists(os.path.join(dotgit, "commondir")):
            raise _Doubt(f"the submodule {rel!r} is a linked worktree")
        return dotgit
    if not stat.S_ISREG(mode):
        raise _Doubt(f"the submodule {rel!r} has an unusual '.git'")
    target = _gitdir_from_file(dotgit)
    real = os.path.realpath(target)
    homes = {
        os.path.join(os.path.realpath(directory), "modules")
        for directory in (super_gitdir, _common_dir(super_gitdir))
    }  # a linked worktree keeps its submodules under its own git directory
    if not any(os.path.commonpath([home, real]) == home for home in homes):
        raise _Doubt(f"the submodule {rel!r} keeps its git directory outside 'modules/'")
    if os.path.exists(os.path.join(real, "commondir")):
        raise _Doubt(f"the submodule {rel!r} is a linked worktree")
    return target


def _common_dir(gitdir: str) -> str:
    commondir = os.path.join(gitdir, "commondir")
    if os.path.isfile(commondir):
        return os.path.normpath(os.path.join(gitdir, _read_text(commondir).strip()))
    return gitdir


_index_cache: OrderedDict[tuple[str, int, int, int, int], tuple[str, ...]] = OrderedDict()
_index_cache_lock = threading.Lock()
_INDEX_CACHE_SIZE = 64


def _index_gitlinks(path: str, hash_size: int) -> tuple[str, ...]:
    """Paths of the gitlink entries (mode 160000) of a git index file.

    Cached by the file's identity and change time: the index of a large
    repository takes a while to walk, and the gate asks before every
    speculative git command.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return ()
    if st.st_size > _MAX_INDEX_BYTES:
        raise _Doubt("the index is too large to check")
    key = (path, st.st_ino, st.st_size, st.st_mtime_ns, hash_size)
    with _index_cache_lock:
        cached = _index_cache.get(key)
        if cached is not None:
            _index_cache.move_to_end(key)
            return cached
    directory = os.path.dirname(path)
    if any(name.startswith("sharedindex.") for name in os.listdir(directory)):
        raise _Doubt("a split index keeps entries in another file")
    with open(path, "rb") as handle:
        data = handle.read(_MAX_INDEX_BYTES + 1)
    if data[:4] == b"DIRC" and data[4:8] in _INDEX_VERSIONS and _GITLINK_MODE_BYTES not in data:
        links: tuple[str, ...] = ()  # no entry can have the gitlink mode: skip the walk
    else:
        links = parse_index_gitlinks(data, hash_size)
    with _index_cache_lock:
        _index_cache[key] = links
        while len(_index_cache) > _INDEX_CACHE_SIZE:
            _index_cache.popitem(last=False)
    return links


def parse_index_gitlinks(data: bytes, hash_size: int = 20) -> tuple[str, ...]:
    """The gitlink paths of an index file's bytes (versions 2, 3 and 4).

    A file the parser cannot follow completely -- a bad header, a truncated
    entry, a split index whose entries live in another file -- is doubt.
    """
    if len(data) < 12 + hash_size or data[:4] != b"DIRC":
        raise _Doubt("the index is not in a format the probe reads")
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        raise _Doubt(f"index version {version} is not supported")
    end = len(data) - hash_size
    fixed = 40 + hash_size + 2  # stat data, mode ... size, object id, flags
    position = 12
    previous = b""
    links: list[str] = []
    try:
        for _ in range(count):
            if position + fixed > end:
                raise _Doubt("the index is truncated")
            (mode,) = struct.unpack_from(">I", data, position + 24)
            (flags,) = struct.unpack_from(">H", data, position + 40 + hash_size)
            start = position + fixed
            if flags & 0x4000:
                if version < 3:
                    raise _Doubt("an extended index entry in a version 2 index")
                start += 2
            if version == 4:
                strip, start = _varint(data, start, end)
                if strip > len(previous):
                    raise _Doubt("a malformed index entry")
                stop = data.index(b"\0", start, end)
                name = previous[: len(previous) - strip] + data[start:stop]
                position = stop + 1
            else:
                stop = data.index(b"\0", start, end)
                name = data[start:stop]
                header = start - position
                position += (header + len(name) + 8) & ~7
            previous = name
            if mode == _GITLINK_MODE:
                links.append(os.fsdecode(name))
        while position + 8 <= end:
            signature = data[position : position + 4]
            (size,) = struct.unpack_from(">I", data, position + 4)
            if signature == b"link":
                raise _Doubt("a split index keeps entries in another file")
            position += 8 + size
    except (ValueError, struct.error):
        raise _Doubt("a malformed index entry") from None
    if position > end:
        raise _Doubt("the index is truncated")
    return tuple(links)


def _varint(data: bytes, position: int, end: int) -> tuple[int, int]:
    """Git's offset varint (index v4 path prefix lengths)."""
    if position >= end:
        raise _Doubt("the index is truncated")
    byte = data[position]
    position += 1
    value = byte & 0x7F
    while byte & 0x80:
        if position >= end or value > 1 << 32:
            raise _Doubt("a malformed index entry")
        byte = data[position]
        position += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, position
