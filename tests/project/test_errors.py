"""One error tree: every public exception of Fore is defined in ``fore.errors``.

An application catches ``fore.ForeError`` to catch everything Fore raises on
purpose, and reads ``fore/errors.py`` to see every such failure. Both stay true
only if nobody adds an exception class somewhere else, so this test scans the
source of every module of the ``fore`` namespace (the way
``tests/project/test_layers.py`` does) and checks that:

- every exception class is defined in ``fore/errors.py`` and derives from
  ``ForeError`` -- or is private (a leading underscore: control flow that never
  leaves its module), or is one of the few package-internal ones in ``LOCAL``,
  each with its reason;
- no two exception classes share a name (two ``ApplyFailed`` once meant two
  unrelated failures);
- the tree drawn in ``fore.errors``' docstring is the real tree: every class of
  the module once, under its real parent, with its real builtin mixins; and
  the docstring's list of module-local exceptions names every one of them.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
from dataclasses import dataclass

import fore.errors
from fore.errors import ForeError
from tests.project.test_layers import modules

ERRORS_MODULE = "fore.errors"

LOCAL: dict[tuple[str, str], str] = {
    ("fore.actors.overlay._realfs", "PathChanged"): (
        "a parent of a path changed under the overlay's apply; caught inside the overlay "
        "package (apply, conflicts, recovery), never raised to its callers"
    ),
    ("fore.actors.overlay._keep", "NotRestored"): (
        "a kept file could not be put back during a rollback; the rollback catches it and "
        "names it in the OverlayApplyFailed it raises"
    ),
}
"""Public-looking exception classes that stay in their (private) module, with why."""

EXTERNAL_BASES = frozenset({"Timeout", "ActorDeadError"})
"""Exception classes of other libraries that Fore's exceptions derive from (pykka's)."""

BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)


@dataclass(frozen=True)
class ExceptionClass:
    module: str
    name: str
    line: int
    bases: tuple[str, ...]

    def where(self) -> str:
        return f"{self.module}:{self.line} {self.name}"


def exception_classes() -> list[ExceptionClass]:
    """Every class (nested ones too) whose bases make it an exception, by name.

    A base counts by its last dotted part (``pykka.Timeout`` is ``Timeout``):
    a builtin exception, one of ``EXTERNAL_BASES``, or a class found here.
    """
    found: list[ExceptionClass] = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = tuple(ast.unparse(base).rpartition(".")[2] for base in node.bases)
                found.append(ExceptionClass(module, node.name, node.lineno, bases))
    known = set(BUILTIN_EXCEPTIONS | EXTERNAL_BASES)
    exceptions: dict[ExceptionClass, None] = {}
    grew = True
    while grew:
        grew = False
        for cls in found:
            if cls not in exceptions and any(base in known for base in cls.bases):
                exceptions[cls] = None
                known.add(cls.name)
                grew = True
    return sorted(exceptions, key=lambda c: (c.module, c.line))


def errors_module_exceptions() -> dict[str, type[BaseException]]:
    return {
        name: value
        for name, value in vars(fore.errors).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == ERRORS_MODULE
    }


def test_the_scan_sees_the_tree() -> None:
    # Guards the scan itself: a scan that found nothing would pass every test below.
    scanned = {c.name for c in exception_classes() if c.module == ERRORS_MODULE}
    assert scanned == set(errors_module_exceptions())
    assert len(scanned) > 50


def test_every_exception_is_in_the_tree_or_private_or_listed() -> None:
    misplaced = [
        cls.where()
        for cls in exception_classes()
        if cls.module != ERRORS_MODULE
        and not cls.name.startswith("_")
        and (cls.module, cls.name) not in LOCAL
    ]
    assert misplaced == [], (
        "define these in fore/errors.py (and draw them in its docstring's tree), "
        "or make them private if they never leave their module"
    )


def test_the_local_list_is_not_stale() -> None:
    scanned = {(c.module, c.name) for c in exception_classes()}
    assert set(LOCAL) <= scanned, set(LOCAL) - scanned


def test_every_exception_of_the_tree_is_a_fore_error() -> None:
    for name, cls in errors_module_exceptions().items():
        assert issubclass(cls, ForeError), name
        assert not name.startswith("_"), f"{name}: a private exception belongs in its own module"
    assert set(errors_module_exceptions()) <= set(fore.errors.__all__)


def test_no_two_exception_classes_share_a_name() -> None:
    by_name: dict[str, list[str]] = {}
    for cls in exception_classes():
        by_name.setdefault(cls.name, []).append(cls.where())
    assert {name: where for name, where in by_name.items() if len(where) > 1} == {}


# -- the drawing ------------------------------------------------------------------------------

_NODE = re.compile(
    r"^(?P<indent>(?:[│ ]   )*)[├└]── (?P<name>\w+)(?: \(\+(?P<mixins>[\w., +]+)\))?$"
)
"""One node: its depth (4 columns a level), its name, its builtin mixins (``+X, Y``)."""


@dataclass(frozen=True)
class Drawn:
    name: str
    parent: str
    mixins: tuple[str, ...]


def drawn_tree() -> list[Drawn]:
    """The classes drawn in ``fore.errors``' docstring, each with its drawn parent."""
    doc = fore.errors.__doc__ or ""
    lines = [line[4:] for line in doc.splitlines() if line.startswith("    ")]
    assert lines and lines[0] == "ForeError", "the drawing starts with the root"
    parents = ["ForeError"]
    drawn: list[Drawn] = []
    for line in lines[1:]:
        if line.lstrip("│ ").startswith("#"):
            continue  # a family's comment
        match = _NODE.match(line)
        assert match, f"cannot read this line of the drawing: {line!r}"
        depth = len(match["indent"]) // 4
        assert depth < len(parents), f"{match['name']} is indented under nothing"
        del parents[depth + 1 :]
        mixins = tuple(m.strip() for m in (match["mixins"] or "").split(",") if m.strip())
        drawn.append(Drawn(match["name"], parents[depth], mixins))
        parents.append(match["name"])
    return drawn


def _builtin_name(cls: type) -> str:
    top = cls.__module__.partition(".")[0]  # pykka._exceptions.Timeout is pykka.Timeout
    return cls.__name__ if top == "builtins" else f"{top}.{cls.__name__}"


def test_the_drawing_names_every_class_once() -> None:
    names = [node.name for node in drawn_tree()]
    assert len(names) == len(set(names)), "a class is drawn twice"
    assert {"ForeError", *names} == set(errors_module_exceptions())


def test_the_drawing_shows_the_real_parents_and_mixins() -> None:
    classes = errors_module_exceptions()
    for node in drawn_tree():
        cls = classes[node.name]
        fore_bases = [b.__name__ for b in cls.__bases__ if issubclass(b, ForeError)]
        others = tuple(_builtin_name(b) for b in cls.__bases__ if not issubclass(b, ForeError))
        assert fore_bases == [node.parent], f"{node.name} is drawn under {node.parent}"
        assert node.mixins == others, f"{node.name} is drawn with +{node.mixins}, not +{others}"


def test_the_docstring_lists_every_local_exception() -> None:
    doc = fore.errors.__doc__ or ""
    local = {
        cls.name
        for cls in exception_classes()
        if cls.module != ERRORS_MODULE
        and (cls.name.startswith("_") or (cls.module, cls.name) in LOCAL)
    }
    missing = {name for name in local if f"``{name}``" not in doc}
    assert missing == set(), "name them in fore.errors' list of deliberately local exceptions"
