"""The speculation tool gate: may this tool call run before the user approves it?

A speculation asks before every call. Three answers (the seed's "Tool Gate"
table): ``allow`` -- the call only reads, run it; ``redirect`` -- the call
writes, but the approval mode lets edits run, so run it with its writes sent
into the speculation overlay; ``boundary`` -- stop the speculation before this
call and wait for the user. Anything the gate does not know is a boundary: a new
or custom (MCP) tool could do anything.

An edit with ``preview: true`` is a boundary in every mode: it stages a
pending action for the user's ``resolve``, which a speculation's throwaway
store would lose.

The gate is a pure function of the call: it reads ``arguments`` and never
changes them (a speculation's tools run on its overlay, which maps the paths).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from fore.actors.gate.rules import Severity
from fore.actors.gate.shell import explain_shell_command
from fore.messages.gate import ApprovalMode, GateAction, GateDecision

READ_TOOLS: frozenset[str] = frozenset({"read_file", "grep", "glob", "list_directory", "inspect"})
"""Tools that only read (their paths resolve through the overlay); ``inspect`` reads blobs."""

WRITE_TOOLS: frozenset[str] = frozenset({"edit", "write_file", "multi_edit"})
"""Tools whose writes can be redirected into the overlay."""

PREVIEW_ARGUMENT = "preview"
"""The write tools' argument that stages the edit as a pending action instead of writing.

A staged preview waits for the user's ``resolve``; staged in a speculation it
would land in the speculation's throwaway pending-action store and be lost on
accept, so such a call is a boundary in every approval mode."""

NETWORK_TOOLS: frozenset[str] = frozenset({"web_fetch", "web_search"})

INTERACTIVE_TOOLS: frozenset[str] = frozenset(
    {
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
    }
)
"""Tools that talk to the user, delegate, or change state outside the working tree."""

SHELL_TOOL = "shell"
SHELL_ARGUMENTS: frozenset[str] = frozenset({"command", "cwd", "timeout", "description"})
"""The shell arguments the gate understands; any other one could change what runs."""

_EDIT_MODES = frozenset({ApprovalMode.AUTO_EDIT, ApprovalMode.YOLO})


def parse_approval_mode(mode: ApprovalMode | str) -> ApprovalMode:
    """``mode`` as an :class:`ApprovalMode`; a ``ValueError`` names the allowed values."""
    try:
        return ApprovalMode(mode)
    except ValueError:
        allowed = ", ".join(repr(member.value) for member in ApprovalMode)
        raise ValueError(f"unknown approval mode {mode!r}; allowed: {allowed}") from None


def evaluate_tool_call(
    name: str,
    arguments: Mapping[str, Any],
    approval_mode: ApprovalMode | str,
    *,
    cwd: str | os.PathLike[str] | None = None,
    overlay_has_writes: bool = False,
) -> GateDecision:
    """Decide whether a speculative call of tool ``name`` may run.

    ``cwd`` is the session's working directory, the workspace: a speculative
    shell command may read nothing outside it (the scope rule the file tools
    apply too), its git-config probe and relative ``cwd`` argument resolve
    against it. Without one, no shell command that opens a path may run.
    ``overlay_has_writes`` says the overlay already holds a write: a shell
    command runs on the real tree, which no longer matches what the
    speculation sees, so every shell call is then a boundary.
    """
    mode = parse_approval_mode(approval_mode)
    tool = name if isinstance(name, str) else repr(name)

    def decide(action: GateAction, reason: str) -> GateDecision:
        return GateDecision(action=action, reason=reason, tool=tool)

    if not isinstance(name, str):
        return decide(GateAction.BOUNDARY, f"the tool name {tool} is not a string")
    if name in READ_TOOLS:
        return decide(GateAction.ALLOW, f"{name} only reads")
    if name in WRITE_TOOLS:
        if not isinstance(arguments, Mapping):
            return decide(GateAction.BOUNDARY, f"the {name} arguments are not a mapping")
        if arguments.get(PREVIEW_ARGUMENT, False) is not False:
            return decide(
                GateAction.BOUNDARY,
                f"{name} with {PREVIEW_ARGUMENT} stages a pending action that needs the "
                "user's resolve; a speculation would lose it",
            )
        if mode in _EDIT_MODES:
            return decide(
                GateAction.REDIRECT,
                f"{name} writes into the speculation overlay (approval mode {mode.value})",
            )
        return decide(
            GateAction.BOUNDARY,
            f"{name} needs the user's approval in approval mode {mode.value}",
        )
    if name == SHELL_TOOL:
        return _shell(arguments, cwd, overlay_has_writes=overlay_has_writes)
    if name in NETWORK_TOOLS:
        return decide(GateAction.BOUNDARY, f"{name} makes network requests, which need consent")
    if name in INTERACTIVE_TOOLS:
        return decide(
            GateAction.BOUNDARY,
            f"{name} interacts with the user or delegates, which a speculation cannot",
        )
    return decide(GateAction.BOUNDARY, f"{name!r} is an unknown or custom tool")


def _shell(
    arguments: Mapping[str, Any],
    cwd: str | os.PathLike[str] | None,
    *,
    overlay_has_writes: bool,
) -> GateDecision:
    def boundary(reason: str) -> GateDecision:
        return GateDecision(action=GateAction.BOUNDARY, reason=reason, tool=SHELL_TOOL)

    if overlay_has_writes:
        return boundary("the overlay holds writes, so a shell command would see a stale tree")
    if not isinstance(arguments, Mapping):
        return boundary("the shell arguments are not a mapping")
    extra = sorted(str(key) for key in arguments if key not in SHELL_ARGUMENTS)
    if extra:
        return boundary(f"the shell argument(s) {', '.join(extra)} are not understood")
    command = arguments.get("command")
    if not isinstance(command, str) or not command.strip():
        return boundary("the shell call has no command")
    directory = _shell_directory(arguments.get("cwd"), cwd)
    if isinstance(directory, GateDecision):
        return directory
    verdict = explain_shell_command(command, cwd, directory)
    if verdict.severity is Severity.READ_ONLY:
        return GateDecision(
            action=GateAction.ALLOW,
            reason=f"the shell command is read-only: {verdict.reason}",
            tool=SHELL_TOOL,
        )
    kind = "writes" if verdict.severity is Severity.WRITE else "is not provably read-only"
    return boundary(f"the shell command {kind}: {verdict.reason}")


def _shell_directory(
    requested: object, base: str | os.PathLike[str] | None
) -> str | os.PathLike[str] | GateDecision | None:
    """Where the command would run: the call's ``cwd`` resolved under the session's.

    Only an absolute directory can be probed for git config: a relative one
    (no session directory to resolve it against) is handed on as it is, and
    the classifier treats git there as doubt rather than probing whatever
    directory this process happens to run in.
    """
    if requested is None or requested == "":
        return base
    if not isinstance(requested, str):
        return GateDecision(
            action=GateAction.BOUNDARY, reason="the shell cwd is not a string", tool=SHELL_TOOL
        )
    if base is None:
        return requested
    base_text = os.fspath(base)
    if not os.path.isabs(base_text):
        # A relative session directory: containment can only be judged
        # lexically, and the result stays relative (doubt for git).
        below = os.path.normpath(requested)
        inside = not os.path.isabs(below) and below != ".." and not below.startswith("../")
        resolved: str = os.path.join(base_text, below)
    else:
        try:
            root = os.path.realpath(base_text)
            resolved = os.path.realpath(os.path.join(root, requested))
            inside = os.path.commonpath([root, resolved]) == root
        except (OSError, ValueError):
            inside = False
    if not inside:
        return GateDecision(
            action=GateAction.BOUNDARY,
            reason=f"the shell cwd {requested!r} is outside the working directory",
            tool=SHELL_TOOL,
        )
    return resolved


_KNOWN = READ_TOOLS | WRITE_TOOLS | NETWORK_TOOLS | INTERACTIVE_TOOLS | {SHELL_TOOL}


def declared_read_only(decision: GateDecision, tool: Any, stale: bool) -> GateDecision:
    """Let a tool the gate does not know run when it declares itself read-only.

    ``Tool.read_only`` is declared by whoever added the tool --
    ``@tool(read_only=True)``, or a *trusted* MCP server's tools annotated
    read-only and closed-world (never the hints alone: ``actors.tools.mcp``).
    Tools the gate knows by name keep its rules. Such a tool may read the real
    tree rather than the overlay, so once the speculation holds writes it is
    a boundary, as a shell command is.
    """
    if decision.action is not GateAction.BOUNDARY or decision.tool in _KNOWN:
        return decision
    if getattr(tool, "read_only", False) is not True:
        return decision
    if stale:
        return GateDecision(
            action=GateAction.BOUNDARY,
            reason=f"{decision.tool} declares itself read-only, but it may read the real tree, "
            "which no longer matches the speculation's writes",
            tool=decision.tool,
        )
    return GateDecision(
        action=GateAction.ALLOW,
        reason=f"{decision.tool} declares itself read-only",
        tool=decision.tool,
    )
