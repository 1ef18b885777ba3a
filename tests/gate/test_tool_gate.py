"""The speculation tool gate: its table for every approval mode and tool category."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fore.actors.gate.tool_gate import evaluate_tool_call
from fore.messages.gate import ApprovalMode, GateAction, GateDecision

MODES = [mode.value for mode in ApprovalMode]
READ_TOOLS = ["read_file", "grep", "glob", "list_directory", "inspect"]
WRITE_TOOLS = ["edit", "write_file", "multi_edit"]
NETWORK_TOOLS = ["web_fetch", "web_search"]
INTERACTIVE_TOOLS = [
    "agent",
    "task",
    "skill",
    "memory",
    "save_memory",
    "ask_user",
    "ask_user_question",
    "todo_write",
    "exit_plan_mode",
    "resolve",
]
UNKNOWN_TOOLS = ["mcp__github__create_issue", "my_custom_tool", "Read_File", "", "bash"]

SAMPLE_ARGUMENTS: dict[str, dict[str, Any]] = {
    "read_file": {"path": "src/app.py", "offset": 0, "limit": 100},
    "grep": {"pattern": "foo", "path": "src", "options": {"case": False}},
    "glob": {"pattern": "**/*.py"},
    "list_directory": {"path": "."},
    "inspect": {"blob": "0190-abc", "query": ["lines", 10]},
    "edit": {"path": "a.py", "old_string": "x", "new_string": "y", "replace_all": False},
    "write_file": {"path": "a.py", "content": "print(1)\n"},
    "multi_edit": {"edits": [{"path": "a.py", "old_string": "x", "new_string": "y"}]},
    "shell": {"command": "ls -la"},
}


def _expected(tool: str, mode: str) -> GateAction:
    if tool in READ_TOOLS:
        return GateAction.ALLOW
    if tool in WRITE_TOOLS:
        return GateAction.REDIRECT if mode in ("auto-edit", "yolo") else GateAction.BOUNDARY
    return GateAction.BOUNDARY


ALL_TOOLS = READ_TOOLS + WRITE_TOOLS + NETWORK_TOOLS + INTERACTIVE_TOOLS + UNKNOWN_TOOLS


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", ALL_TOOLS)
def test_gate_table(tool: str, mode: str) -> None:
    arguments = SAMPLE_ARGUMENTS.get(tool, {"x": 1})
    decision = evaluate_tool_call(tool, arguments, mode)
    assert decision.action is _expected(tool, mode)
    assert decision.tool == tool
    assert decision.reason.strip()


@pytest.mark.parametrize("mode", list(ApprovalMode))
def test_enum_and_string_modes_agree(mode: ApprovalMode) -> None:
    for tool in ("edit", "read_file", "shell", "web_fetch"):
        arguments = SAMPLE_ARGUMENTS.get(tool, {})
        by_enum = evaluate_tool_call(tool, arguments, mode)
        by_string = evaluate_tool_call(tool, arguments, mode.value)
        assert by_enum == by_string


def test_unknown_approval_mode_names_the_allowed_values() -> None:
    with pytest.raises(ValueError, match="auto-edit") as info:
        evaluate_tool_call("read_file", {}, "autoedit")
    for mode in MODES:
        assert repr(mode) in str(info.value)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", ["edit", "multi_edit"])
@pytest.mark.parametrize("preview", [True, "true", 1, None, "no"])
def test_a_preview_is_a_boundary_in_every_mode(tool: str, mode: str, preview: object) -> None:
    # A staged preview waits for the user's resolve; inside a speculation it
    # would land in the speculation's own pending-action store and be lost.
    # Anything but False is a boundary: pydantic coerces "true" and 1 to True,
    # and the gate does not second-guess the tool's coercion rules.
    arguments = {**SAMPLE_ARGUMENTS[tool], "preview": preview}
    decision = evaluate_tool_call(tool, arguments, mode)
    assert decision.action is GateAction.BOUNDARY
    assert "preview" in decision.reason
    assert "resolve" in decision.reason


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", ["edit", "multi_edit"])
def test_preview_false_is_an_ordinary_write(tool: str, mode: str) -> None:
    arguments = {**SAMPLE_ARGUMENTS[tool], "preview": False}
    assert evaluate_tool_call(tool, arguments, mode).action is _expected(tool, mode)


def test_gate_knows_every_tool_argument_that_stages_a_preview() -> None:
    # The gate's field name must be the tools' own: a renamed field would let
    # previews through. Every built-in tool with a preview field is a write tool.
    from fore.actors.gate.tool_gate import PREVIEW_ARGUMENT, WRITE_TOOLS
    from fore.actors.resolve.preview import MultiEdit
    from fore.actors.tools.builtin import builtin_tools

    tools = [*builtin_tools(), MultiEdit()]
    staging = {tool.name for tool in tools if PREVIEW_ARGUMENT in tool.args_model.model_fields}
    assert staging == {"edit", "multi_edit"}
    assert staging <= WRITE_TOOLS
    names = {tool.name for tool in tools}
    assert names >= WRITE_TOOLS


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("arguments", [None, ["path", "a.py"], "a.py"])
def test_write_tool_arguments_that_are_not_a_mapping_are_a_boundary(
    arguments: object, mode: str
) -> None:
    decision = evaluate_tool_call("edit", arguments, mode)  # type: ignore[arg-type]
    assert decision.action is GateAction.BOUNDARY
    assert decision.reason.strip()


@pytest.mark.parametrize("name", [None, 3, ["read_file"]])
def test_a_tool_name_that_is_not_a_string_is_a_boundary(name: object) -> None:
    decision = evaluate_tool_call(name, {}, "yolo")  # type: ignore[arg-type]
    assert decision.action is GateAction.BOUNDARY
    assert decision.tool == repr(name)
    assert "not a string" in decision.reason


def test_redirect_reason_mentions_the_overlay() -> None:
    decision = evaluate_tool_call("edit", SAMPLE_ARGUMENTS["edit"], "yolo")
    assert "overlay" in decision.reason


# ---------------------------------------------------------------------------
# shell
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("command", "action"),
    [
        ("ls -la", GateAction.ALLOW),
        ("git log --oneline | head", GateAction.ALLOW),
        ("grep -rn foo src", GateAction.ALLOW),
        ("rm -rf build", GateAction.BOUNDARY),
        ("echo x > f", GateAction.BOUNDARY),
        ("python3 -c 'print(1)'", GateAction.BOUNDARY),
        ("sed -i s/a/b/ f", GateAction.BOUNDARY),
        ("ls $(", GateAction.BOUNDARY),
    ],
)
def test_shell_follows_the_classifier(
    command: str, action: GateAction, mode: str, tmp_path: Path
) -> None:
    decision = evaluate_tool_call("shell", {"command": command}, mode, cwd=tmp_path)
    assert decision.action is action
    assert decision.reason.strip()


@pytest.mark.parametrize("command", ["git log --oneline", "grep -rn foo src", "cat README.md"])
def test_shell_without_a_workspace_may_open_no_path(command: str) -> None:
    # Nothing to hold the paths to: a boundary, never a guess.
    decision = evaluate_tool_call("shell", {"command": command}, "yolo")
    assert decision.action is GateAction.BOUNDARY
    assert "workspace" in decision.reason


def test_shell_reasons_say_why() -> None:
    assert "writes" in evaluate_tool_call("shell", {"command": "rm x"}, "yolo").reason
    unknown = evaluate_tool_call("shell", {"command": "python3 x.py"}, "yolo")
    assert "not provably read-only" in unknown.reason
    assert "read-only" in evaluate_tool_call("shell", {"command": "ls"}, "yolo").reason


@pytest.mark.parametrize("command", ["ls", "cat README.md", "git status"])
def test_overlay_with_writes_makes_every_shell_call_a_boundary(command: str) -> None:
    decision = evaluate_tool_call("shell", {"command": command}, "yolo", overlay_has_writes=True)
    assert decision.action is GateAction.BOUNDARY
    assert "overlay" in decision.reason
    # Other tools are unaffected by the overlay's state.
    read = evaluate_tool_call("read_file", {"path": "x"}, "yolo", overlay_has_writes=True)
    assert read.action is GateAction.ALLOW


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"command": ""},
        {"command": "   "},
        {"command": None},
        {"command": ["ls"]},
        {"command": 42},
        {"cmd": "ls"},
        {"command": "ls", "env": {"GIT_PAGER": "rm -rf ~"}},
        {"command": "ls", "run_in_background": True},
        {"command": "ls", "cwd": 7},
    ],
)
def test_invalid_shell_arguments_are_a_boundary(arguments: dict[str, Any]) -> None:
    decision = evaluate_tool_call("shell", arguments, "yolo", cwd="/tmp")
    assert decision.action is GateAction.BOUNDARY
    assert decision.reason.strip()


def test_shell_accepts_its_known_arguments() -> None:
    arguments = {"command": "ls", "timeout": 30, "description": "list files", "cwd": ""}
    assert evaluate_tool_call("shell", arguments, "default").action is GateAction.ALLOW


def test_shell_cwd_must_stay_inside_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    inside = evaluate_tool_call("shell", {"command": "ls", "cwd": "src"}, "plan", cwd=tmp_path)
    assert inside.action is GateAction.ALLOW
    for escape in ("..", "../..", "/", "src/../../x"):
        decision = evaluate_tool_call(
            "shell", {"command": "ls", "cwd": escape}, "plan", cwd=tmp_path
        )
        assert decision.action is GateAction.BOUNDARY, escape
        assert "outside" in decision.reason


def test_shell_cwd_symlink_escape_is_a_boundary(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    work = tmp_path / "work"
    outside.mkdir()
    work.mkdir()
    (work / "link").symlink_to(outside)
    decision = evaluate_tool_call("shell", {"command": "ls", "cwd": "link"}, "yolo", cwd=work)
    assert decision.action is GateAction.BOUNDARY


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_shell_cwd_argument_reaches_the_git_config_probe(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "config", "core.pager", "less"], cwd=repo, check=True, env=env)
    in_repo = evaluate_tool_call(
        "shell", {"command": "git log", "cwd": "repo"}, "yolo", cwd=tmp_path
    )
    assert in_repo.action is GateAction.BOUNDARY
    assert "core.pager" in in_repo.reason
    session_in_repo = evaluate_tool_call("shell", {"command": "git log"}, "yolo", cwd=repo)
    assert session_in_repo.action is GateAction.BOUNDARY
    elsewhere = evaluate_tool_call("shell", {"command": "ls"}, "yolo", cwd=repo)
    assert elsewhere.action is GateAction.ALLOW


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_relative_shell_cwd_without_a_session_directory_is_not_probed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A clean repository where *this process* runs says nothing about the
    # directory the command will run in: git there is doubt, not read-only.
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
    monkeypatch.chdir(tmp_path)
    git_log = evaluate_tool_call("shell", {"command": "git log", "cwd": "repo"}, "yolo")
    assert git_log.action is GateAction.BOUNDARY
    assert "workspace" in git_log.reason
    listing = evaluate_tool_call("shell", {"command": "ls -la", "cwd": "repo"}, "yolo")
    assert listing.action is GateAction.ALLOW  # opens no path
    reading = evaluate_tool_call("shell", {"command": "cat x", "cwd": "repo"}, "yolo")
    assert reading.action is GateAction.BOUNDARY
    # The model's own cwd never stands in for the workspace: it would set its own scope.
    absolute = evaluate_tool_call("shell", {"command": "git log", "cwd": str(repo)}, "yolo")
    assert absolute.action is GateAction.BOUNDARY
    session = evaluate_tool_call("shell", {"command": "git log"}, "yolo", cwd=repo)
    assert session.action is GateAction.ALLOW  # the session's directory is probed (and clean)
    relative_session = evaluate_tool_call(
        "shell", {"command": "git log", "cwd": "."}, "yolo", cwd="repo"
    )
    assert relative_session.action is GateAction.BOUNDARY
    outside = evaluate_tool_call("shell", {"command": "ls", "cwd": "../x"}, "yolo", cwd="repo")
    assert outside.action is GateAction.BOUNDARY


# ---------------------------------------------------------------------------
# Purity and the decision message
# ---------------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([*ALL_TOOLS, "shell"]),
    st.dictionaries(
        st.sampled_from(["command", "path", "cwd", "content", "preview", "edits", "x"]), _JSON
    ),
    st.sampled_from(MODES),
    st.booleans(),
)
def test_gate_never_mutates_arguments(
    tool: str, arguments: dict[str, Any], mode: str, overlay: bool
) -> None:
    before = copy.deepcopy(arguments)
    decision = evaluate_tool_call(tool, arguments, mode, overlay_has_writes=overlay)
    assert arguments == before
    assert decision.reason.strip()
    assert decision.action in set(GateAction)


@pytest.mark.parametrize("tool", ["read_file", "edit", "shell", "web_fetch", "custom"])
def test_sample_arguments_are_untouched(tool: str) -> None:
    arguments = copy.deepcopy(SAMPLE_ARGUMENTS.get(tool, {"nested": {"list": [1, 2]}}))
    before = copy.deepcopy(arguments)
    for mode in MODES:
        evaluate_tool_call(tool, arguments, mode, cwd=".")
    assert arguments == before


def test_decision_is_a_frozen_message_with_a_reason() -> None:
    decision = evaluate_tool_call("read_file", {"path": "x"}, "default")
    with pytest.raises(ValidationError):
        decision.reason = "changed"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        GateDecision(action=GateAction.ALLOW, reason="", tool="read_file")
    with pytest.raises(ValidationError):
        GateDecision(action=GateAction.ALLOW, reason="r", tool="x", extra=1)  # type: ignore[call-arg]
    assert GateDecision.model_validate_json(decision.model_dump_json()) == decision
