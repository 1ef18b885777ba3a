"""Fore's modules import only their own layer or lower ones (docs/architecture.md §6, Layers).

The layers, lowest first::

    0 messages     fore.messages.* and fore.errors (the root exception, no dependencies);
                   fore.actors.core.cancel (the CancelScope messages carry: LlmRequest makes
                   one by default) and fore.actors.core.logs (its logger), which import
                   nothing of Fore above this layer
    1 core         fore.actors.core.*
    2 services     fore.actors.{alerts, tools, blobs, llm, overlay, filerefs, resolve, gate,
                   store, telemetry}.*
    3 worker       fore.actors.worker.*; fore.actors.output.* (an interceptor of the worker)
    4 speculation  fore.actors.speculation.*
    5 supervision  fore.supervision.* but its cli and chat packages; fore.distributed.*
                   (runtimes of runtimes: Ray shards each hosting a Runtime)
    6 CLI          fore.supervision.cli*, fore.supervision.chat.*, fore.bench.*,
                   fore.testing.pytest_plugin and its fore.testing._wait, fore.__main__

The facades -- ``fore`` itself, ``fore.lowlevel``, ``fore.mcp``, ``fore.store``,
``fore.telemetry`` and ``fore.testing`` -- may import any layer, and no other
module of Fore may import them. A module that reaches upwards makes the layer
below depend on the one above it: the worker cannot be tested or restructured
without speculation, and the import order at start-up becomes fragile (the
cycles that made ``PLC0415`` local imports necessary).

Every import counts: top level, function-local (a local import hides a
dependency, it does not remove it) and ``if TYPE_CHECKING`` (the types still
couple the modules). A violation that had to stay would be listed, with its
reason, in ``tests/project/layer_allowlist.txt`` (today none is). The test fails
on a violation that is not listed *and* on a listed one that is gone, so the
list can only shrink and never goes stale; a ``LAYERS`` prefix that names no
module fails too.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWLIST = Path(__file__).resolve().with_name("layer_allowlist.txt")

SOURCES = {"fore": ROOT / "fore"}
"""Where the namespace's modules live: ``fore/`` and, through its symlinks, the layer folders."""

FACADES = frozenset({"fore", "fore.lowlevel", "fore.mcp", "fore.store", "fore.telemetry"})
FACADE_PACKAGES = ("fore.testing",)
"""Packages that are facades as a whole, except the modules LAYERS names (its pytest plugin)."""

LAYERS: tuple[tuple[str, int], ...] = (
    # Longest prefix wins; a prefix names a module and everything under it.
    ("fore.errors", 0),
    ("fore.messages", 0),
    ("fore.actors.core", 1),
    # A scope is a value messages carry and create (LlmRequest.scope's default), not a
    # part of the actor runtime: layer 0, so it may import nothing but fore.errors and logs.
    ("fore.actors.core.cancel", 0),
    ("fore.actors.core.logs", 0),
    ("fore.actors.alerts", 2),
    ("fore.actors.tools", 2),
    ("fore.actors.blobs", 2),
    ("fore.actors.llm", 2),
    ("fore.actors.overlay", 2),
    ("fore.actors.filerefs", 2),
    ("fore.actors.resolve", 2),
    ("fore.actors.gate", 2),
    ("fore.actors.store", 2),
    ("fore.actors.telemetry", 2),
    ("fore.actors.worker", 3),
    ("fore.actors.output", 3),  # structured output: an interceptor of the worker
    ("fore.actors.speculation", 4),
    ("fore.supervision", 5),
    ("fore.distributed", 5),
    ("fore.supervision.cli", 6),
    ("fore.supervision.chat", 6),
    ("fore.bench", 6),
    ("fore.testing.pytest_plugin", 6),
    # The bounded poll the facade and the plugin both export: a module of its own (the
    # plugin must not import its facade), test tooling like the plugin, so never below it.
    ("fore.testing._wait", 6),
    ("fore.__main__", 6),
)
NAMES = ("messages", "core", "services", "worker", "speculation", "supervision", "CLI")

# The package ``fore.actors`` only groups layers 1-4 (a docstring, no imports).
NAMESPACES = frozenset({"fore.actors"})


def module_files() -> dict[str, Path]:
    """Every module of the ``fore`` namespace, by dotted name (symlinks followed)."""
    modules: dict[str, Path] = {}
    for top, folder in SOURCES.items():
        for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for filename in sorted(f for f in filenames if f.endswith(".py")):
                path = Path(dirpath, filename)
                parts = path.relative_to(folder).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                modules[".".join((top, *parts))] = path
    return modules


@cache
def modules() -> dict[str, Path]:
    return module_files()


def _mapped(module: str) -> tuple[int, int] | None:
    """(length of the longest LAYERS prefix of ``module``, its layer), or None."""
    best: tuple[int, int] | None = None
    for prefix, layer in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > best[0]
        ):
            best = (len(prefix), layer)
    return best


def is_facade(module: str) -> bool:
    if module in FACADES:
        return True
    return _mapped(module) is None and any(
        module == package or module.startswith(package + ".") for package in FACADE_PACKAGES
    )


def layer_of(module: str) -> int | None:
    """The layer of ``module``; None for a facade, a namespace or an unmapped name."""
    if is_facade(module) or module in NAMESPACES:
        return None
    mapped = _mapped(module)
    return None if mapped is None else mapped[1]


@dataclass(frozen=True, order=True)
class Import:
    importer: str
    imported: str
    line: int


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports_of(module: str, path: Path) -> Iterator[Import]:
    """Every ``fore`` module that ``module`` imports, anywhere in its body."""
    known = modules()
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "fore" or alias.name.startswith("fore."):
                    yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(module, path).split(".")
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if not (base == "fore" or base.startswith("fore.")):
                continue
            for alias in node.names:
                # ``from fore.actors import worker`` imports the module fore.actors.worker.
                candidate = f"{base}.{alias.name}"
                yield Import(module, candidate if candidate in known else base, node.lineno)


def all_imports() -> list[Import]:
    return sorted(imp for name, path in modules().items() for imp in imports_of(name, path))


def violation(imp: Import) -> str | None:
    """Why ``imp`` breaks the rule, or None if it keeps it."""
    if is_facade(imp.imported):
        return None if is_facade(imp.importer) else "imports a facade"
    below, above = layer_of(imp.importer), layer_of(imp.imported)
    if is_facade(imp.importer) or below is None or above is None or above <= below:
        return None
    return f"{NAMES[below]} ({below}) imports {NAMES[above]} ({above})"


def violations() -> dict[tuple[str, str], list[Import]]:
    """Every violating import, by (importer, imported) module pair."""
    found: dict[tuple[str, str], list[Import]] = {}
    for imp in all_imports():
        if violation(imp) is not None:
            found.setdefault((imp.importer, imp.imported), []).append(imp)
    return found


def read_allowlist() -> dict[tuple[str, str], str]:
    """``importer -> imported  # reason`` lines; blank lines and ``#`` comments skipped."""
    entries: dict[tuple[str, str], str] = {}
    for number, raw in enumerate(ALLOWLIST.read_text().splitlines(), start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        pair, sep, reason = text.partition("#")
        importer, arrow, imported = pair.partition("->")
        assert arrow and sep and reason.strip(), (
            f"{ALLOWLIST.name}:{number}: want 'importer -> imported  # reason', got {raw!r}"
        )
        key = (importer.strip(), imported.strip())
        assert key not in entries, f"{ALLOWLIST.name}:{number}: {key} is listed twice"
        entries[key] = reason.strip()
    return entries


def _describe(key: tuple[str, str], imps: list[Import]) -> str:
    lines = ", ".join(str(line) for line in sorted({imp.line for imp in imps}))
    return f"{key[0]} -> {key[1]}  (line {lines}: {violation(imps[0])})"


# -- the rule ---------------------------------------------------------------------------------


def test_every_module_has_a_layer() -> None:
    unmapped = [
        name
        for name in modules()
        if not is_facade(name) and name not in NAMESPACES and layer_of(name) is None
    ]
    assert unmapped == [], f"modules with no layer (add them to LAYERS): {unmapped}"


def test_every_layer_prefix_names_a_module() -> None:
    known = modules()
    stale = [
        prefix
        for prefix, _ in LAYERS
        if not any(name == prefix or name.startswith(prefix + ".") for name in known)
    ]
    assert stale == [], f"LAYERS names modules that do not exist (remove them): {stale}"


def test_no_module_imports_upwards_except_the_listed_ones() -> None:
    found = violations()
    allowed = read_allowlist()
    new = [_describe(key, imps) for key, imps in sorted(found.items()) if key not in allowed]
    assert new == [], (
        "new upward imports (move the code to the right layer; listing it in "
        f"{ALLOWLIST.name} is for the violations that predate this test):\n" + "\n".join(new)
    )


def test_the_allowlist_has_no_stale_entry() -> None:
    found = violations()
    stale = [f"{a} -> {b}" for (a, b) in sorted(read_allowlist()) if (a, b) not in found]
    assert stale == [], (
        f"fixed (well done): remove these entries from {ALLOWLIST.name}:\n" + "\n".join(stale)
    )


# -- the checker itself -----------------------------------------------------------------------


def test_the_scan_sees_local_and_type_checking_imports(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import fore.messages.base\n"
        "if TYPE_CHECKING:\n"
        "    from fore.actors.worker.state import SessionState\n"
        "def later() -> None:\n"
        "    from fore.actors.speculation import fork\n"
        "    from . import sibling\n"
    )
    found = {(imp.imported, imp.line) for imp in imports_of("fore.actors.tools.probe", source)}
    assert found == {
        ("fore.messages.base", 3),
        ("fore.actors.worker.state", 5),
        ("fore.actors.speculation.fork", 7),
        ("fore.actors.tools", 8),
    }


@pytest.mark.parametrize(
    ("importer", "imported", "broken"),
    [
        ("fore.actors.tools.pool", "fore.actors.core.pooled", False),
        ("fore.actors.tools.pool", "fore.actors.tools.base", False),
        ("fore.actors.worker.worker", "fore.actors.speculation.fork", True),
        ("fore.actors.core.pooled", "fore.messages.base", False),
        ("fore.messages.base", "fore.errors", False),
        ("fore.messages.llm", "fore.actors.core.pooled", True),
        # The cancel scope is layer 0 (messages carry and make it); it may not reach up.
        ("fore.messages.llm", "fore.actors.core.cancel", False),
        ("fore.actors.core.cancel", "fore.actors.core.pooled", True),
        ("fore.actors.core.logs", "fore.actors.core.system", True),
        ("fore.supervision.runtime", "fore.supervision.cli", True),
        ("fore.supervision.cli", "fore.supervision.runtime", False),
        ("fore.bench.load", "fore.testing", True),
        ("fore.lowlevel", "fore.supervision.supervisor", False),
        ("fore.testing", "fore.bench.load", False),
        ("fore.testing._wait", "fore.supervision.runtime", False),
        ("fore.testing.pytest_plugin", "fore.testing", True),
        ("fore.testing.pytest_plugin", "fore.testing._wait", False),
        ("fore.actors.worker.worker", "fore.testing._wait", True),
        ("fore.testing.pytest_plugin", "fore.supervision.runtime", False),
    ],
)
def test_layer_verdicts(importer: str, imported: str, broken: bool) -> None:
    assert (violation(Import(importer, imported, 1)) is not None) is broken
