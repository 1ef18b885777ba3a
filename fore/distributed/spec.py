"""What it takes to open a session on any shard, and to open it again elsewhere.

A :class:`SessionSpec` is made once, in the caller's process, when the session
opens: the plain settings (``max_turns``, the speculation config ...) as they
are, and the session's Python objects (model, fast model, tools, hooks,
interceptor, MCP servers) shipped by value (:mod:`fore.distributed.shipping`).
The caller keeps it: if the session's shard dies, the same spec opens the
session on a live shard, where its history comes from the store.

What the store keeps about the session is the shard runtime's business
(``Runtime(store=...)``, :mod:`fore.supervision.resume`): the model's settings,
never its key, and the session's plain settings. :func:`options_from_config`
reads the latter back, so ``RayRuntime.resume_session(id)`` can make the spec of
a session a previous process left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue, ValidationError

from fore.distributed import shipping
from fore.messages.speculation import SpeculationConfig

__all__ = [
    "OBJECT_OPTIONS",
    "PLAIN_OPTIONS",
    "RESUMABLE_OPTIONS",
    "SessionSpec",
    "options_from_config",
]

PLAIN_OPTIONS = frozenset(
    {
        "system_prompt",
        "builtin",
        "model_name",
        "max_turns",
        "call_timeout",
        "tool_concurrency",
        "max_batch_calls",
        "max_argument_retries",
        "purpose",
        "file_ref_cap",
        "speculation",
        "labels",
    }
)
"""``Runtime.open_session`` keywords that travel as plain values."""

OBJECT_OPTIONS = frozenset({"tools", "hooks", "interceptor", "mcp_servers", "fast_model"})
"""Keywords whose values are Python objects, shipped by value (with the model)."""

RESUMABLE_OPTIONS = frozenset(
    {
        "system_prompt",
        "tools",
        "builtin",
        "mcp_servers",
        "hooks",
        "interceptor",
        "max_turns",
        "call_timeout",
        "speculation",
        "fast_model",
    }
)
"""The keywords ``Runtime.resume_session`` takes again (a shard passes these of a spec);
the other settings (``model_name``, ``purpose``, ``file_ref_cap`` ...) are the stored
ones, written from the same spec when the session first opened."""


@dataclass(frozen=True)
class SessionSpec:
    """A session as any shard can open it (see the module docs)."""

    session_id: str
    workspace: str | None
    node: str | None
    """The Ray node id of the machine whose filesystem has the workspace (None: any)."""
    model_name: str
    payload: bytes
    """The shipped objects: ``{"model": ..., "tools": ..., ...}``."""
    options: dict[str, Any] = field(default_factory=dict)
    speculation: bool = True

    @classmethod
    def make(
        cls,
        session_id: str,
        *,
        workspace: str | None,
        node: str | None,
        model: Any,
        options: dict[str, Any],
    ) -> SessionSpec:
        unknown = set(options) - PLAIN_OPTIONS - OBJECT_OPTIONS
        if unknown:
            raise TypeError(
                f"open_session() got unexpected keyword(s): {', '.join(sorted(unknown))}"
            )
        objects = {"model": model, **{k: v for k, v in options.items() if k in OBJECT_OPTIONS}}
        if "tools" in objects:
            objects["tools"] = list(objects["tools"])
        if "mcp_servers" in objects:
            objects["mcp_servers"] = list(objects["mcp_servers"])
        plain = {k: v for k, v in options.items() if k in PLAIN_OPTIONS}
        speculation = plain.get("speculation")
        if speculation is not None and not isinstance(speculation, SpeculationConfig):
            raise TypeError("speculation must be a SpeculationConfig")
        enabled = (speculation or SpeculationConfig()).enabled
        return cls(
            session_id=session_id,
            workspace=workspace,
            node=node,
            model_name=str(plain.get("model_name") or getattr(model, "name", "")),
            payload=shipping.dumps(objects, what="model, tools and hooks"),
            options=plain,
            speculation=enabled and workspace is not None,
        )

    def with_model(self, model: Any, model_name: str = "") -> SessionSpec:
        """This spec with another model (``set_model``: a move opens it with that one)."""
        objects = {**self.objects(), "model": model}
        return dataclasses.replace(
            self,
            model_name=str(model_name or getattr(model, "name", "")),
            payload=shipping.dumps(objects, what="model, tools and hooks"),
        )

    def objects(self) -> dict[str, Any]:
        """The shipped objects, unpacked (a fresh copy each call; in the shard)."""
        value: dict[str, Any] = shipping.loads(self.payload)
        return value

    def open_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``Runtime.open_session`` (in the shard)."""
        return {**self.options, **self.objects()}


def options_from_config(config: Mapping[str, JsonValue]) -> dict[str, Any]:
    """The plain ``open_session`` options a stored session was opened with.

    ``config`` is the ``session_config`` the shard's runtime stored
    (:func:`fore.supervision.resume.session_config`); keys that are not plain
    options here (its version, workspace, tool names ...) are left out.
    """
    options: dict[str, Any] = {}
    for key, value in config.items():
        if key not in PLAIN_OPTIONS:
            continue
        if key == "speculation" and isinstance(value, dict):
            try:
                options[key] = SpeculationConfig.model_validate(value)
            except ValidationError:  # as Runtime.resume_session: the default then
                continue
        else:
            options[key] = value
    return options
