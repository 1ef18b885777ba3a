"""Which paths the search tools show: glob patterns and ``.gitignore`` rules (pure).

``glob``, ``grep --include`` and the ignore rules of ``glob`` / ``grep`` /
``list_directory`` are decided here, on workspace-relative POSIX paths, so the
rules are unit- and property-tested apart from any filesystem walk (the
walks belong to the :class:`~actors.tools.fs.FsView` implementations).

**Globs** (:func:`compile_glob`) are matched by ``wcmatch`` -- the library
behind ``glob`` patterns users expect from shells and editors -- with
``GLOBSTAR`` (``**`` spans directories), ``BRACE`` (``*.{ts,tsx}``) and
``DOTGLOB`` (``*`` matches dot files, as Fore's globs always did). A pattern
without ``/`` matches file names at any depth (as ``**/pattern``). Two bounds
keep a model's pattern from costing more than a call: brace expansion is
capped at :data:`MAX_GLOB_EXPANSIONS` patterns, and every path is matched by
the ``regex`` package with a per-path timeout (:data:`GLOB_MATCH_TIMEOUT`),
because wcmatch's translation, run by the stdlib ``re``, backtracks
polynomially on patterns such as ``**/a*/**/a*/**/a*/b`` (degree = the
number of such segments: seconds at six, hours at ten) and ``re`` cannot be
interrupted.

**Ignore rules** (:class:`IgnoreRules`) follow git: every directory's
``.gitignore`` applies below it, a deeper file's rules win over a shallower
one's, the last matching line of a file wins (``!`` re-includes), a file
below an ignored directory stays ignored, and ``.git/info/exclude`` applies
at the root with the lowest precedence. ``pathspec`` translates each line
(git's wildmatch rules); :class:`IgnoreFile` matches them with RE2
(``google-re2``), which runs in linear time, so a hostile ``.gitignore``
(which the model can write) cannot stall a search. Rules are read through a callback,
lazily, once per directory, and bounded in size (:data:`MAX_IGNORE_FILE_BYTES`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern
from wcmatch import _wcparse
from wcmatch import glob as wcglob

from fore.errors import PatternError

_regex: Any = importlib.import_module("regex")
"""The ``regex`` package (untyped): matches wcmatch's translation with a timeout."""

GLOB_FLAGS = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB
"""``**`` spans directories, ``{a,b}`` expands, ``*`` matches dot files."""

MAX_GLOB_EXPANSIONS = 256
"""Brace expansion may produce at most this many patterns (``{a,b}{c,d}…`` doubles each time)."""

MAX_GLOB_LENGTH = 4096
"""Longest glob pattern accepted, in characters."""

GLOB_MATCH_TIMEOUT = 0.25
"""Seconds one path may take to match; beyond, the pattern is refused as too expensive."""

MAX_IGNORE_FILE_BYTES = 256 * 1024
"""Bytes of one ``.gitignore`` that are read; the rest is ignored (git has no such file size)."""

IGNORE_FILE = ".gitignore"
EXCLUDE_FILE = ".git/info/exclude"

_re2: Any = importlib.import_module("re2") if importlib.util.find_spec("re2") else None
"""google-re2 (untyped): linear-time matching of ignore rules the model may have written."""


# -- globs ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GlobMatcher:
    """A compiled glob over workspace-relative paths (see module docs)."""

    pattern: str
    _include: tuple[Any, ...]

    def match(self, path: str) -> bool:
        """Whether ``path`` matches; :class:`PatternError` when matching it takes too long."""
        for compiled in self._include:
            try:
                if compiled.match(path, timeout=GLOB_MATCH_TIMEOUT) is not None:
                    return True
            except TimeoutError:
                raise PatternError(
                    f"the glob {_short(self.pattern)} is too expensive to match (more than "
                    f"{GLOB_MATCH_TIMEOUT:g}s on {_short(path)}); simplify it -- fewer '**' and "
                    "'*' segments in a row"
                ) from None
        return False


def _short(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


@functools.lru_cache(maxsize=512)
def compile_glob(pattern: str) -> GlobMatcher:
    """Compile ``pattern``; :class:`PatternError` names what is wrong with it."""
    if len(pattern) > MAX_GLOB_LENGTH:
        raise PatternError(
            f"the glob is {len(pattern)} characters long (at most {MAX_GLOB_LENGTH})"
        )
    text = pattern.strip()
    if not text:
        raise PatternError("the glob is empty")
    # No "/" at all: any depth. Otherwise relative to the search base, which a
    # leading "/" or "./" names too ("./*.py": the base's own files only).
    anchored = "/" in text.rstrip("/")
    text = text.lstrip("/")
    while text.startswith("./"):
        text = text[2:].lstrip("/")
    if not text:
        raise PatternError(f"the glob {_short(pattern)} names no files (try '**/*')")
    if not anchored:
        text = "**/" + text
    try:
        include, _exclude = wcglob.translate(text, flags=GLOB_FLAGS, limit=MAX_GLOB_EXPANSIONS)
    except _wcparse.PatternLimitException:  # documented, exported only from here
        raise PatternError(
            f"the glob {_short(pattern)} expands to more than {MAX_GLOB_EXPANSIONS} patterns "
            "(each '{a,b}' group multiplies them); use fewer brace groups"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise PatternError(f"the glob {_short(pattern)} is not valid: {exc}") from None
    try:
        compiled = tuple(_regex.compile(item) for item in include)
    except _regex.error as exc:  # pragma: no cover - wcmatch emits valid regexes
        raise PatternError(f"the glob {pattern!r} is not valid: {exc}") from None
    return GlobMatcher(pattern, compiled)


def glob_matches(pattern: str, path: str) -> bool:
    """Whether workspace-relative ``path`` matches ``pattern`` (convenience for tests)."""
    return compile_glob(pattern).match(path)


# -- .gitignore ----------------------------------------------------------------------

ReadText = Callable[[str], str | None]
"""Reads a workspace-relative file: its text, or None when it does not exist or cannot be read."""


def _wildmatch_line(line: str) -> str:
    """``line`` rewritten where pathspec's translation differs from git's reading.

    pathspec turns a trailing ``/**`` into a prefix test that also matches
    the directory itself (``a/**`` would match ``a/``; git matches only what
    is inside ``a``); ``a/**/*`` is what git means, and pathspec reads that
    exactly. Runs of ``**`` segments are one. Checked against ``git
    check-ignore`` by a property test.
    """
    if line.endswith("\\ "):
        return line  # an escaped trailing space: leave the line as written
    body = line.rstrip(" ")
    while "/**/**" in body:
        body = body.replace("/**/**", "/**")
    if body.endswith("/**"):
        return body + "/*"
    if body.endswith("/**/"):
        return body + "*/"
    return body


class IgnoreFile:
    """The rules of one ignore file: which lines match a path *itself*.

    Each line is translated by pathspec (git's wildmatch rules) and anchored
    at the end of the path, so a line matches the path it is asked about, not
    one of its ancestors: ancestors are judged on their own, top down, by
    :class:`IgnoreRules` -- that is what makes ``!`` unable to re-include a
    file below an excluded directory, as in git (pathspec's whole-path check
    lets a negated ancestor re-include everything below it). The last
    matching line decides. With RE2 all lines run as one set, in linear time.
    """

    __slots__ = ("_compiled", "_ignores", "_set")

    def __init__(self, lines: list[tuple[str, bool]]) -> None:
        self._ignores = tuple(ignore for _regex_text, ignore in lines)
        self._set: Any = None
        self._compiled: tuple[Any, ...] = ()
        if _re2 is not None:
            rules = _re2.Set.SearchSet(_re2.Options())
            for regex_text, _ignore in lines:
                rules.Add(f"(?:{regex_text})\\z")
            rules.Compile()
            self._set = rules
        else:  # pragma: no cover - google-re2 is a dependency
            self._compiled = tuple(_regex.compile(f"(?:{text})\\Z") for text, _ in lines)

    def verdict(self, query: str) -> bool | None:
        """True: ignored, False: re-included, None: no line matches ``query`` itself.

        ``query`` is a workspace-relative path below this file's directory,
        with a trailing ``/`` for a directory.
        """
        if self._set is not None:
            hits = self._set.Match(query)
            return self._ignores[max(hits)] if hits else None
        for index in range(len(self._compiled) - 1, -1, -1):  # pragma: no cover
            try:
                if self._compiled[index].search(query, timeout=GLOB_MATCH_TIMEOUT):
                    return self._ignores[index]
            except TimeoutError:
                continue  # a line too expensive to match is a line that does not match
        return None


@functools.lru_cache(maxsize=256)
def parse_ignore(text: str) -> IgnoreFile | None:
    """The rules of one ignore file (``None`` when it has none).

    Lines pathspec cannot translate are dropped one by one (git ignores a
    malformed line too), so one bad line does not void the file. Cached by
    text: the same file is parsed once, not once per search.
    """
    lines: list[tuple[str, bool]] = []
    for raw in text.splitlines():
        try:
            regex_text, include = GitIgnoreSpecPattern.pattern_to_regex(_wildmatch_line(raw))
        except Exception:
            continue
        if regex_text is None or include is None:
            continue  # blank or comment
        lines.append((str(regex_text), bool(include)))
    return IgnoreFile(lines) if lines else None


class IgnoreRules:
    """The workspace's ignore rules, read lazily through ``read`` (see module docs).

    One instance serves one walk (one tool call): it caches each directory's
    rules and each directory's own verdict, so a file costs a few dictionary
    lookups once its directory was seen.
    """

    def __init__(self, read: ReadText) -> None:
        self._read = read
        self._specs: dict[str, IgnoreFile | None] = {}
        self._exclude: IgnoreFile | bool | None = False
        """``.git/info/exclude`` once read (False: not read yet)."""
        self._dir_verdicts: dict[str, bool] = {}

    def _spec(self, directory: str) -> IgnoreFile | None:
        if directory not in self._specs:
            text = self._read(posixpath.join(directory, IGNORE_FILE) if directory else IGNORE_FILE)
            self._specs[directory] = parse_ignore(text) if text else None
        return self._specs[directory]

    def _exclude_spec(self) -> IgnoreFile | None:
        if self._exclude is False:
            text = self._read(EXCLUDE_FILE)
            self._exclude = parse_ignore(text) if text else None
        return self._exclude if isinstance(self._exclude, IgnoreFile) else None

    def _verdict(self, path: str, is_dir: bool) -> bool:
        """Whether the rules ignore ``path`` itself (what its ancestors are is not considered)."""
        parent = posixpath.dirname(path)
        chain = [""]
        if parent:
            parts = parent.split("/")
            chain += ["/".join(parts[: i + 1]) for i in range(len(parts))]
        decided: bool | None = None
        exclude = self._exclude_spec()
        suffix = "/" if is_dir else ""
        if exclude is not None:
            decided = exclude.verdict(path + suffix)
        for directory in chain:  # shallow to deep: a deeper file's match wins
            spec = self._spec(directory)
            if spec is None:
                continue
            relative = path[len(directory) + 1 :] if directory else path
            verdict = spec.verdict(relative + suffix)
            if verdict is not None:
                decided = verdict
        return bool(decided)

    def _dir_verdict(self, directory: str) -> bool:
        known = self._dir_verdicts.get(directory)
        if known is None:
            known = self._dir_verdicts[directory] = self._verdict(directory, True)
        return known

    def dir_ignored(self, directory: str) -> bool:
        """Whether ``directory`` is ignored: by its own verdict or one of its ancestors'."""
        if not directory:
            return False
        end = directory.find("/")
        while end != -1:
            if self._dir_verdict(directory[:end]):
                return True
            end = directory.find("/", end + 1)
        return self._dir_verdict(directory)

    def ignored(self, path: str, *, is_dir: bool = False, below: str = "") -> bool:
        """Whether ``path`` is ignored; ``below`` is the search base the model named.

        A path inside an ignored directory is ignored whatever its own rules
        say (git cannot re-include a file whose directory is excluded). A
        search the model points *into* an ignored directory (``path="build"``)
        is taken at its word: nothing below that base is filtered, as ripgrep
        searches a path given on its command line.
        """
        if not path or path == below:
            return False
        if below and self.dir_ignored(below):
            return False
        if is_dir:
            return self.dir_ignored(path)
        parent = posixpath.dirname(path)
        return (bool(parent) and self.dir_ignored(parent)) or self._verdict(path, False)


__all__ = [
    "EXCLUDE_FILE",
    "GLOB_FLAGS",
    "GLOB_MATCH_TIMEOUT",
    "IGNORE_FILE",
    "MAX_GLOB_EXPANSIONS",
    "MAX_IGNORE_FILE_BYTES",
    "GlobMatcher",
    "IgnoreFile",
    "IgnoreRules",
    "PatternError",
    "ReadText",
    "compile_glob",
    "glob_matches",
    "parse_ignore",
]
