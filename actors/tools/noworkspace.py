"""The filesystem view of a session opened without a workspace.

``open_session(workspace=None)`` is for sessions whose tools touch no files
(a weather lookup, a database query, MCP servers): it has no built-in file
tools, no ``@path`` references and no speculation. A custom tool that still
reaches for ``ctx.fs`` gets one clear error instead of a path somewhere on
the machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NoReturn

from fore.actors.tools.fs import DirEntry, FileStat
from fore.actors.tools.paths import FsError

NO_WORKSPACE = (
    "this session has no workspace (it was opened with workspace=None), so tools cannot "
    "read or write files"
)


class NoWorkspace:
    """An :class:`~actors.tools.fs.FsView` on which every operation fails (see module docs)."""

    root = None

    def __repr__(self) -> str:
        return "NoWorkspace()"

    @staticmethod
    def _refuse() -> NoReturn:
        raise FsError(NO_WORKSPACE)

    def resolve(self, path: str) -> str:
        self._refuse()

    def stat(self, path: str) -> FileStat | None:
        self._refuse()

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        self._refuse()

    def write_bytes(self, path: str, data: bytes) -> None:
        self._refuse()

    def delete(self, path: str) -> None:
        self._refuse()

    def mkdir(self, path: str) -> None:
        self._refuse()

    def list_dir(self, path: str) -> list[DirEntry]:
        self._refuse()

    def iter_files(self, path: str = "") -> Iterator[str]:
        self._refuse()

    def exec_dir(self, path: str) -> str:
        self._refuse()


__all__ = ["NO_WORKSPACE", "NoWorkspace"]
