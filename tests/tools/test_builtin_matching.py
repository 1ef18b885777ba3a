"""Globs with braces and ``.gitignore`` in ``glob`` / ``grep`` / ``list_directory`` (issue 23.5).

The rules (``actors.tools.matching``) are checked against references: the
previous hand-written glob (``glob_regex``) for brace-free patterns, brace
expansion for the rest, and ``git check-ignore`` itself for ignore files.
The built-ins are checked on real temp trees through ``invoke_tool``.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import bracex
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fore.actors.tools.base import ToolContext, invoke_tool
from fore.actors.tools.builtin import default_registry
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.fs import WorkspaceFs
from fore.actors.tools.matching import (
    MAX_GLOB_EXPANSIONS,
    IgnoreRules,
    PatternError,
    compile_glob,
    glob_matches,
)
from fore.messages.conversation import ToolCall
from tests.tools.glob_reference import glob_regex

REGISTRY = default_registry()


def make_ctx(root: Path) -> ToolContext:
    return ToolContext(
        fs=WorkspaceFs(root),
        cancel=CancelToken(),
        deadline=time.monotonic() + 60,
        session_id="s",
        call_id="c",
    )


def run(root: Path, name: str, **arguments: Any) -> tuple[str, bool]:
    result = invoke_tool(REGISTRY, ToolCall(id="c", name=name, arguments=arguments), make_ctx(root))
    return result.output, result.is_error


def ok(root: Path, name: str, **arguments: Any) -> list[str]:
    output, is_error = run(root, name, **arguments)
    assert not is_error, output
    return output.split("\n")


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# -- braces ---------------------------------------------------------------------------


def test_glob_understands_braces(tmp_path: Path) -> None:
    write(tmp_path, {"src/a.ts": "", "src/b.tsx": "", "src/c.js": "", "d.ts": "", "lib/e.tsx": ""})
    assert ok(tmp_path, "glob", pattern="**/*.{ts,tsx}") == [
        "d.ts",
        "lib/e.tsx",
        "src/a.ts",
        "src/b.tsx",
    ]
    assert ok(tmp_path, "glob", pattern="*.{ts,tsx}") == [
        "d.ts",
        "lib/e.tsx",
        "src/a.ts",
        "src/b.tsx",
    ]
    assert ok(tmp_path, "glob", pattern="{src,lib}/*.tsx") == ["lib/e.tsx", "src/b.tsx"]


def test_a_leading_dot_slash_means_the_search_base(tmp_path: Path) -> None:
    write(tmp_path, {"src/a.py": "", "b.py": ""})
    assert ok(tmp_path, "glob", pattern="./src/*.py") == ["src/a.py"]
    assert ok(tmp_path, "glob", pattern="./*.py") == ["b.py"]
    assert glob_matches("/src/*.py", "src/a.py")


def test_grep_include_understands_braces(tmp_path: Path) -> None:
    write(tmp_path, {"a.ts": "needle\n", "b.tsx": "needle\n", "c.js": "needle\n"})
    assert ok(tmp_path, "grep", pattern="needle", include="*.{ts,tsx}") == [
        "a.ts:1: needle",
        "b.tsx:1: needle",
    ]


def test_a_brace_bomb_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    write(tmp_path, {"a.py": ""})
    bomb = "".join("{a,b}" for _ in range(12)) + "*.py"  # 4096 patterns
    output, is_error = run(tmp_path, "glob", pattern=bomb)
    assert is_error
    assert f"more than {MAX_GLOB_EXPANSIONS} patterns" in output


@pytest.mark.timeout(120)
def test_a_backtracking_glob_fails_its_call_instead_of_hanging_it(tmp_path: Path) -> None:
    # wcmatch's translation run by ``re`` (and the old hand-written glob) needs
    # far longer than any call for this pattern on one deep path (the
    # backtracking grows with the path's length to the power of the number of
    # segments); the call must end with an error naming the cause.
    deep = "/".join(["a" * 30] * 40) + "/c"
    write(tmp_path, {deep: ""})
    pattern = "/".join(["**/a*?*"] * 60) + "/b"
    output, is_error = run(tmp_path, "glob", pattern=pattern)
    assert is_error
    assert "too expensive to match" in output


# -- the glob rules against references -------------------------------------------------

SEGMENT = st.text(alphabet="ab.*?[]!-", min_size=1, max_size=4)
PATH_SEGMENT = st.text(alphabet="ab.-", min_size=1, max_size=4).filter(
    lambda s: s not in (".", "..")
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(SEGMENT, st.just("**")), min_size=1, max_size=3),
    st.lists(PATH_SEGMENT, min_size=1, max_size=4),
)
def test_brace_free_globs_match_as_before(pattern_parts: list[str], path_parts: list[str]) -> None:
    """Without braces, the new matcher agrees with the previous hand-written one.

    (Except for a leading "./", which now names the search base, as in a shell.)
    """
    pattern = "/".join(pattern_parts)
    assume(not pattern.startswith("./"))
    path = "/".join(path_parts)
    assert glob_matches(pattern, path) is (glob_regex(pattern).match(path) is not None), (
        pattern,
        path,
    )


ALTERNATIVE = st.text(alphabet="ab.*", min_size=0, max_size=3).filter(lambda s: "," not in s)


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="ab*", min_size=0, max_size=3),
    st.lists(ALTERNATIVE, min_size=2, max_size=3),
    st.text(alphabet="ab.", min_size=0, max_size=3),
    st.lists(PATH_SEGMENT, min_size=1, max_size=3),
)
def test_a_brace_group_matches_what_any_of_its_expansions_matches(
    head: str, alternatives: list[str], tail: str, path_parts: list[str]
) -> None:
    pattern = f"{head}{{{','.join(alternatives)}}}{tail}"
    path = "/".join(path_parts)
    expected = any(
        glob_regex(expansion).match(path) is not None
        for expansion in bracex.expand(pattern)
        if expansion
    )
    assert glob_matches(pattern, path) is expected, (pattern, path)


def test_glob_errors_are_pattern_errors() -> None:
    with pytest.raises(PatternError, match="empty"):
        compile_glob("   ")
    with pytest.raises(PatternError, match="names no files"):
        compile_glob("./")
    with pytest.raises(PatternError, match="characters long"):
        compile_glob("a" * 5000)


# -- .gitignore in the built-ins ---------------------------------------------------------

IGNORED_TREE = {
    ".gitignore": "build/\n*.log\n!keep.log\nnode_stuff/\n/only_root.txt\n",
    "src/main.py": "needle = 1\n",
    "src/debug.log": "needle in a log\n",
    "src/keep.log": "needle kept\n",
    "src/.gitignore": "generated_*.py\n",
    "src/generated_x.py": "needle generated\n",
    "build/out.py": "needle built\n",
    "build/deep/more.py": "needle deeper\n",
    "node_stuff/m.py": "needle vendored\n",
    "only_root.txt": "needle root\n",
    "docs/only_root.txt": "needle docs\n",
}


@pytest.fixture
def ignored_tree(tmp_path: Path) -> Path:
    return write(tmp_path, IGNORED_TREE)


def test_glob_skips_what_gitignore_ignores(ignored_tree: Path) -> None:
    assert ok(ignored_tree, "glob", pattern="**/*.py") == ["src/main.py"]
    assert ok(ignored_tree, "glob", pattern="*.{log,txt}") == ["docs/only_root.txt", "src/keep.log"]


def test_grep_skips_what_gitignore_ignores(ignored_tree: Path) -> None:
    assert ok(ignored_tree, "grep", pattern="needle") == [
        "docs/only_root.txt:1: needle docs",
        "src/keep.log:1: needle kept",
        "src/main.py:1: needle = 1",
    ]


def test_list_directory_hides_ignored_entries_and_says_how_many(ignored_tree: Path) -> None:
    lines = ok(ignored_tree, "list_directory", path=".")
    assert lines[0] == "./ (2 directories, 1 file; 3 ignored by .gitignore not shown)"
    assert [line.split(" ")[0] for line in lines[1:]] == ["docs/", "src/", ".gitignore"]
    src = ok(ignored_tree, "list_directory", path="src")
    assert [line.split(" ")[0] for line in src[1:]] == [".gitignore", "keep.log", "main.py"]


def test_a_path_naming_an_ignored_directory_is_searched(ignored_tree: Path) -> None:
    assert ok(ignored_tree, "glob", pattern="*.py", path="build") == [
        "build/out.py",
        "build/deep/more.py",
    ]
    assert ok(ignored_tree, "grep", pattern="needle", path="build/deep") == [
        "build/deep/more.py:1: needle deeper"
    ]
    listing = ok(ignored_tree, "list_directory", path="build")
    assert [line.split(" ")[0] for line in listing[1:]] == ["deep/", "out.py"]


def test_info_exclude_is_honoured(tmp_path: Path) -> None:
    write(tmp_path, {".git/info/exclude": "secret*\n", "secret.py": "x\n", "open.py": "x\n"})
    assert ok(tmp_path, "glob", pattern="*.py") == ["open.py"]


@pytest.mark.timeout(120)
def test_a_hostile_gitignore_cannot_stall_a_search(tmp_path: Path) -> None:
    # Backtracking regexes need hours for this line against the long name;
    # pathspec's RE2 backend matches in linear time.
    hostile = "*a" * 20 + "*b\n" + "/".join(["**"] * 30) + "/z\n"
    write(tmp_path, {".gitignore": hostile, "a" * 200: "needle\n", "x.py": "needle\n"})
    assert ok(tmp_path, "grep", pattern="needle") == [f"{'a' * 200}:1: needle", "x.py:1: needle"]


# -- the ignore rules against git itself --------------------------------------------------

IGNORE_SEGMENT = st.sampled_from(["a", "b", "ab", "*", "a*", "*.x", "?", "**", "[ab]"])
IGNORE_LINE = st.builds(
    lambda negate, anchor, parts, slash: (
        ("!" if negate else "") + ("/" if anchor else "") + "/".join(parts) + ("/" if slash else "")
    ),
    st.booleans(),
    st.booleans(),
    st.lists(IGNORE_SEGMENT, min_size=1, max_size=3),
    st.booleans(),
)
TREE_PATH = st.lists(st.sampled_from(["a", "b", "ab", "c.x", "a.x"]), min_size=1, max_size=4).map(
    "/".join
)


def git_ignored(repo: Path, paths: list[str]) -> set[str]:
    done = subprocess.run(
        ["git", "-C", str(repo), "check-ignore", "--no-index", "--stdin"],
        input="\n".join(paths) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return set(done.stdout.split("\n")) - {""}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(IGNORE_LINE, min_size=1, max_size=5),
    st.lists(IGNORE_LINE, max_size=3),
    st.lists(TREE_PATH, min_size=1, max_size=12, unique=True),
)
def test_ignore_rules_agree_with_git(
    tmp_path_factory: pytest.TempPathFactory,
    root_lines: list[str],
    nested_lines: list[str],
    paths: list[str],
) -> None:
    # a path is a file unless another path lies below it (then it is a directory)
    files_only = [p for p in paths if not any(q.startswith(p + "/") for q in paths)]
    rules_text = {".gitignore": "\n".join(root_lines) + "\n"}
    if "a" not in files_only:
        rules_text["a/.gitignore"] = "\n".join(nested_lines) + "\n"
    repo = tmp_path_factory.mktemp("repo")
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    write(repo, {**rules_text, **dict.fromkeys(files_only, "")})
    rules = IgnoreRules(rules_text.get)
    ours = {p for p in files_only if rules.ignored(p)}
    # git check-ignore judges a path by its own patterns; a file below an
    # excluded directory is ignored too (git never descends there)
    asked = sorted({*files_only, *(a for p in files_only for a in _ancestors(p))})
    excluded = git_ignored(repo, asked)
    theirs = {p for p in files_only if p in excluded or any(a in excluded for a in _ancestors(p))}
    assert ours == theirs, (rules_text, files_only)


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
