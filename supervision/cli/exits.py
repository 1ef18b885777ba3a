"""How a ``fore`` command ends: its exit codes, and a failure as one line.

A user mistake is a :class:`~fore.errors.UsageError` (exit code 2), a failure
to set up a :class:`_Failed` (exit code 1; private to the package: it never
leaves the ``fore`` command); :func:`~supervision.cli.main` writes either as
one line on stderr, never a traceback.
"""

from __future__ import annotations

from fore.errors import UsageError

PROG = "fore"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class _Failed(Exception):
    """A failure to set up, reported as one line, exit code 1."""


def one_line(exc: BaseException) -> str:
    """An exception as one line (an OSError with its file name, without the errno noise)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}"
    return " ".join(str(exc).split()) or type(exc).__name__


def needs_extra(command: str, extra: str, modules: tuple[str, ...]) -> None:
    """A clear usage error when an optional dependency of ``command`` is missing."""
    import importlib.util

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"{PROG} {command}: needs the {extra!r} extra ({', '.join(missing)} missing): "
            f"pip install 'fore-runtime[{extra}]'"
        )
