"""What the runtime stores about a session so it can be resumed, and how it rebuilds it.

A session's *history* is written by its worker (:mod:`actors.worker.persistence`);
what this module covers is the rest of a session -- how it was opened -- so that
``Runtime.resume_session(session_id)`` in a new process can open it again:

* :class:`SessionArgs` is every argument of ``Runtime.open_session`` but the id.
  The runtime keeps one per open session (``session.fork()`` opens the copy
  with the same tools, hooks and model) and writes the plain-data part of it
  to the store (:func:`session_config`).
* The model is stored as settings, never as an object and never with a
  credential (:func:`model_settings`): for an OpenAI-compatible endpoint, its
  base URL, model name and request options -- enough for
  :func:`rebuild_model` to make it again, the API key coming from the
  environment as usual; likewise for an
  :class:`~actors.llm.anthropic.AnthropicModel` (its base URL, model, version
  and prompt-cache settings). An in-process model (``ScriptedModel``,
  ``FunctionModel``) cannot be rebuilt: a resume passes it again.
* Things that live only in the process -- tools given as objects, hooks, an
  interceptor, MCP server configurations -- are passed again to
  ``resume_session``; their *names* are stored, so a resume that forgets a
  tool says so in an alert instead of letting the model call a tool that is
  gone.

Every function here is plain and pure (no actor, no database).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import JsonValue, ValidationError

from fore.actors.llm.anthropic import AnthropicModel
from fore.actors.llm.anthropic_wire import ANTHROPIC_VERSION
from fore.actors.llm.models import ChatModel, OpenAICompatible
from fore.actors.store.codec import encode_config
from fore.actors.store.errors import InvalidRecord
from fore.actors.tools.base import Tool
from fore.actors.tools.mcp.config import MCPServer
from fore.actors.worker.approval import ApprovalPolicy, as_policy
from fore.actors.worker.hooks import Hooks
from fore.actors.worker.interceptor import Interceptor
from fore.errors import ModelNotRebuildable
from fore.messages.gate import ApprovalMode
from fore.messages.llm import Purpose
from fore.messages.speculation import SpeculationConfig

__all__ = [
    "CONFIG_VERSION",
    "OPENAI_COMPATIBLE",
    "ModelNotRebuildable",
    "SessionArgs",
    "check_labels",
    "model_settings",
    "rebuild_model",
    "session_config",
    "stored_args",
    "stored_labels",
]

CONFIG_VERSION = 1
"""The layout of the stored ``session_config`` (a newer one is read as far as it is known)."""

OPENAI_COMPATIBLE = "openai-compatible"
ANTHROPIC = "anthropic"
IN_PROCESS = "in-process"


@dataclass(frozen=True)
class SessionArgs:
    """``Runtime.open_session``'s arguments, but the session id (see the module docs)."""

    model: ChatModel
    workspace: str | os.PathLike[str] | None = None
    system_prompt: str | None = None
    tools: tuple[Tool[Any] | Callable[..., Any], ...] = ()
    builtin: bool | tuple[str, ...] | None = None
    mcp_servers: tuple[MCPServer, ...] = ()
    hooks: Hooks | None = None
    interceptor: Interceptor | None = None
    model_name: str = ""
    max_turns: int = 50
    wrap_up: bool = False
    call_timeout: float = 120.0
    tool_concurrency: int | None = None
    max_batch_calls: int = 128
    max_argument_retries: int = 3
    purpose: Purpose = "main"
    file_ref_cap: int = 16_384
    speculation: SpeculationConfig | None = None
    fast_model: ChatModel | None = None
    approval: Any = None
    """An ApprovalPolicy, ApprovalMode or mode name (issue 24). Its policy is stored (mode,
    timeout, tools allowed from the start) and restored on a resume that names none; the
    approver, a callable, is given again."""
    approver: Any = None
    usage_limits: Any = None
    """The session's UsageLimits (issue 28); given again on a resume, not stored."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """The application's own facts about the session (``open_session(labels=...)``): stored,
    read back on a resume (``SessionRecord.session_config["labels"]``), copied by a fork."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Open-session arguments added later (other issues) that this module does not know."""

    def tool_names(self) -> tuple[str, ...]:
        """The names of the session's own tools (functions by their name, as ``@tool`` does)."""
        names: list[str] = []
        for item in self.tools:
            name = getattr(item, "name", None) or getattr(item, "__name__", None)
            if isinstance(name, str):
                names.append(name)
        return tuple(names)


# -- models ------------------------------------------------------------------------------------


def _without_password(url: str) -> str | None:
    """``url`` as stored: ``None`` if it carries a password (a credential is never stored)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.password is not None:
        return None
    return urlunsplit(parts)


def model_settings(model: object) -> dict[str, JsonValue]:
    """What the store keeps of ``model``: enough to rebuild it, and no credential."""
    if isinstance(model, OpenAICompatible):
        return _endpoint_settings(
            OPENAI_COMPATIBLE, model, {"max_tokens_field": model.max_tokens_field}
        )
    if isinstance(model, AnthropicModel):
        thinking = model.thinking
        return _endpoint_settings(
            ANTHROPIC,
            model,
            {
                "version": model.version,
                "cache": model.cache,
                "cache_ttl": model.cache_ttl,
                "thinking_budget": thinking.budget_tokens if thinking is not None else None,
                "fork_tool_choice": model.fork_tool_choice,
            },
        )
    return {
        "provider": IN_PROCESS,
        "class": type(model).__name__,
        "model": str(getattr(model, "name", "")),
    }


def _endpoint_settings(
    provider: str, model: OpenAICompatible | AnthropicModel, own: dict[str, JsonValue]
) -> dict[str, JsonValue]:
    """An HTTP model's settings: what every provider has, then its ``own``; the base URL
    only without a password (a credential is never stored)."""
    settings: dict[str, JsonValue] = {
        "provider": provider,
        "model": model.name,
        "stream": model.stream_answers,
        "max_output_tokens": model.max_output_tokens,
        **own,
    }
    base_url = _without_password(model.base_url)
    if base_url is not None:
        settings["base_url"] = base_url
    return settings


def rebuild_model(settings: Mapping[str, JsonValue], session_id: str) -> ChatModel:
    """The model a session was opened with, from its stored settings.

    The API key comes from the environment (``FORE_API_KEY`` /
    ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``), as for a model made anew; so do
    extra headers. :class:`ModelNotRebuildable` says what to pass instead.
    """
    provider = settings.get("provider")
    base_url = settings.get("base_url")
    if provider in (OPENAI_COMPATIBLE, ANTHROPIC) and isinstance(base_url, str):
        stream = settings.get("stream")
        cap = settings.get("max_output_tokens")
        common: dict[str, Any] = {
            "model": str(settings.get("model") or "") or None,
            "base_url": base_url,
            "stream": stream if isinstance(stream, bool) else None,
            "max_output_tokens": cap if isinstance(cap, int) and cap > 0 else None,
        }
        try:
            if provider == ANTHROPIC:
                return AnthropicModel(**common, **_anthropic_options(settings))
            field_name = settings.get("max_tokens_field")
            return OpenAICompatible(
                **common,
                max_tokens_field=(
                    field_name  # type: ignore[arg-type]
                    if field_name in ("max_tokens", "max_completion_tokens")
                    else None
                ),
            )
        except ValueError as exc:
            raise ModelNotRebuildable(
                f"session {session_id!r}: its model cannot be rebuilt ({exc}); pass model=..."
            ) from None
    if provider in (OPENAI_COMPATIBLE, ANTHROPIC):
        why = "its endpoint's URL held a password, which is never stored"
    elif provider == IN_PROCESS:
        why = f"it ran an in-process model ({settings.get('class') or 'unknown'})"
    else:
        why = f"its model settings are of an unknown provider {provider!r}"
    raise ModelNotRebuildable(
        f"session {session_id!r} cannot rebuild its model: {why}; pass model=... to resume it"
    )


def _anthropic_options(settings: Mapping[str, JsonValue]) -> dict[str, Any]:
    """An AnthropicModel's own options from its settings (anything malformed: the default)."""
    version = settings.get("version")
    cache = settings.get("cache")
    thinking = settings.get("thinking_budget")
    return {
        "version": version if isinstance(version, str) and version else ANTHROPIC_VERSION,
        "cache": cache if isinstance(cache, bool) else True,
        "cache_ttl": "1h" if settings.get("cache_ttl") == "1h" else "5m",
        "thinking_budget": thinking if isinstance(thinking, int) and thinking > 0 else None,
        "fork_tool_choice": (
            "as_requested" if settings.get("fork_tool_choice") == "as_requested" else "match_main"
        ),
    }


# -- the session's configuration ------------------------------------------------------------------


def session_config(args: SessionArgs) -> tuple[dict[str, JsonValue], list[str]]:
    """The stored part of ``args``, and what had to be left out (one line each).

    Plain settings are stored; a system prompt is stored unless it would take
    the config past the store's bound, or looks like it holds a credential
    (the store refuses those) -- then it is left out and named, and a resume
    must pass it again.
    """
    speculation = args.speculation
    config: dict[str, JsonValue] = {
        "version": CONFIG_VERSION,
        "workspace": None if args.workspace is None else str(Path(args.workspace).absolute()),
        "builtin": list(args.builtin) if isinstance(args.builtin, tuple) else args.builtin,
        "model_name": args.model_name,
        "max_turns": args.max_turns,
        "wrap_up": args.wrap_up,
        "call_timeout": args.call_timeout,
        "tool_concurrency": args.tool_concurrency,
        "max_batch_calls": args.max_batch_calls,
        "max_argument_retries": args.max_argument_retries,
        "purpose": args.purpose,
        "file_ref_cap": args.file_ref_cap,
        "speculation": None if speculation is None else speculation.model_dump(mode="json"),
        "tools": list(args.tool_names()),
        "mcp_servers": [_server_name(s) for s in args.mcp_servers],
        "approval": stored_approval(args.approval, args.approver),
        "hooks": args.hooks is not None,
        "interceptor": args.interceptor is not None,
        "labels": dict(args.labels),
    }
    left_out: list[str] = []
    if args.system_prompt is not None:
        candidate = {**config, "system_prompt": args.system_prompt}
        try:
            encode_config("session_config", candidate)
        except InvalidRecord as exc:
            left_out.append(
                f"the system prompt was not stored ({exc}); pass system_prompt= to resume"
            )
        else:
            config = candidate
    return config, left_out


def stored_approval(approval: Any, approver: Any) -> JsonValue:
    """The approval policy as stored: ``None`` for a session that asks nothing.

    A session opened with only an ``approver`` asks in the default mode, so
    that is what is stored; the policy's ``always`` set is the one it was
    opened with (answers of "always" given later are not stored).
    """
    if approval is None and approver is None:
        return None
    policy = as_policy(approval if approval is not None else ApprovalMode.DEFAULT)
    dumped: JsonValue = policy.model_dump(mode="json")
    return dumped


def restored_approval(config: Mapping[str, JsonValue]) -> ApprovalPolicy | None:
    """The stored policy; one that no longer validates is the strictest that still works.

    A resume must never run unasked what the session asked about: a stored
    policy this version cannot read becomes the default mode (every write
    and every non-read-only command asks), never no policy at all.
    """
    stored = config.get("approval")
    if stored is None:
        return None
    try:
        return ApprovalPolicy.model_validate(stored)
    except ValidationError:
        return ApprovalPolicy()


def _get(config: Mapping[str, JsonValue], key: str, kind: type | tuple[type, ...]) -> Any:
    value = config.get(key)
    if isinstance(value, bool) and kind is not bool and bool not in _as_tuple(kind):
        return None
    return value if isinstance(value, kind) else None


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def stored_args(
    config: Mapping[str, JsonValue],
    *,
    model: ChatModel,
    workspace: str | os.PathLike[str] | None,
    overrides: Mapping[str, Any],
) -> tuple[SessionArgs, list[str]]:
    """The arguments to reopen a stored session, and warnings for the user.

    Every setting comes from ``overrides`` when given there (not ``None``),
    else from the stored ``config``, else ``open_session``'s default. The
    warnings name the session's own tools and MCP servers that the resume did
    not pass again (their calls would fail), and a hook set it had.
    """

    def pick(key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        given = overrides.get(key)
        if given is not None:
            return given
        value = _get(config, key, kind)
        return default if value is None else value

    builtin = overrides.get("builtin")
    if builtin is None:
        stored = config.get("builtin")
        if isinstance(stored, bool):
            builtin = stored
        elif isinstance(stored, list):
            builtin = tuple(str(name) for name in stored)
    speculation = overrides.get("speculation")
    if speculation is None and isinstance(config.get("speculation"), dict):
        try:
            speculation = SpeculationConfig.model_validate(config["speculation"])
        except ValidationError:
            speculation = None
    purpose = pick("purpose", str, "main")
    tools = tuple(overrides.get("tools") or ())
    mcp_servers = tuple(overrides.get("mcp_servers") or ())
    args = SessionArgs(
        model=model,
        workspace=workspace,
        system_prompt=pick("system_prompt", str, None),
        tools=tools,
        builtin=builtin,
        mcp_servers=mcp_servers,
        hooks=overrides.get("hooks"),
        interceptor=overrides.get("interceptor"),
        model_name=pick("model_name", str, ""),
        max_turns=pick("max_turns", int, 50),
        wrap_up=pick("wrap_up", bool, False),
        call_timeout=float(pick("call_timeout", (int, float), 120.0)),
        tool_concurrency=pick("tool_concurrency", int, None),
        max_batch_calls=pick("max_batch_calls", int, 128),
        max_argument_retries=pick("max_argument_retries", int, 3),
        purpose=purpose if purpose in ("main", "speculation", "suggestion") else "main",
        file_ref_cap=pick("file_ref_cap", int, 16_384),
        speculation=speculation,
        fast_model=overrides.get("fast_model"),
        approval=(
            overrides["approval"]
            if overrides.get("approval") is not None
            else restored_approval(config)
        ),
        approver=overrides.get("approver"),
        usage_limits=overrides.get("usage_limits"),
        labels=stored_labels(config),
    )
    warnings = _missing(config, args)
    return args, warnings


def stored_labels(config: Mapping[str, JsonValue]) -> dict[str, str]:
    """The labels a session was opened with (``{}`` for none, or a config from before them)."""
    labels = config.get("labels")
    if not isinstance(labels, dict):
        return {}
    return {str(k): v for k, v in labels.items() if isinstance(v, str)}


def check_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    """``open_session(labels=...)`` as stored: strings to strings (``TypeError`` otherwise)."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise TypeError("labels must map strings to strings")
    return dict(labels)


def _server_name(server: MCPServer) -> str:
    return str(getattr(server, "name", None) or "")


def _names(value: JsonValue | None) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _missing(config: Mapping[str, JsonValue], args: SessionArgs) -> list[str]:
    warnings: list[str] = []
    gone = sorted(set(_names(config.get("tools"))) - set(args.tool_names()))
    if gone:
        warnings.append(
            f"the session had tools that were not passed again to resume it: {', '.join(gone)} "
            "(pass tools=... for the model to keep using them)"
        )
    servers = sorted(
        set(_names(config.get("mcp_servers"))) - {_server_name(s) for s in args.mcp_servers}
    )
    if servers:
        warnings.append(
            f"the session had MCP servers that were not passed again: {', '.join(servers)}"
        )
    if config.get("hooks") is True and args.hooks is None:
        warnings.append("the session had hooks; they were not passed again (hooks=...)")
    if isinstance(args.approval, ApprovalPolicy) and args.approver is None:
        mode = args.approval.mode.value
        if mode not in ("yolo",):
            warnings.append(
                f"the session's approval mode {mode!r} is kept, but no approver was passed "
                "again: calls that would ask are refused (approver=...)"
            )
    return warnings


def workspace_of(record_workspace: str, config: Mapping[str, JsonValue]) -> str | None:
    """The stored workspace (``None``: the session touched no files)."""
    stored = config.get("workspace", record_workspace or None)
    return stored if isinstance(stored, str) and stored else None


def summary_lines(sessions: Sequence[Any], now: float) -> list[str]:
    """One line per stored session for a picker: age, turns, title, id."""
    lines = []
    for index, summary in enumerate(sessions, 1):
        age = _age(now - float(summary.updated_at))
        title = summary.title or "(no prompt yet)"
        busy = "  [open elsewhere]" if summary.leased_by else ""
        lines.append(
            f"{index:>3}. {age:>8} ago  {summary.turn_count:>3} turns  {title}  "
            f"({summary.session_id}){busy}"
        )
    return lines


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"
