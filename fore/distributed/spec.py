"""What it takes to open a session on any shard, and to open it again elsewhere.

A :class:`SessionSpec` is made once, in the caller's process, when the session
opens: the plain settings (``max_turns``, the speculation config ...) as they
are, and the session's Python objects (model, fast model, tools, hooks,
interceptor, MCP servers) shipped by value (:mod:`fore.distributed.shipping`).
The caller keeps it: if the session's shard dies, the same spec opens the
session on a live shard, where its history comes from the store.

It also says what the store keeps about the session: the model's settings
(enough to rebuild an OpenAI-compatible endpoint -- never its key) and the
session's JSON-able settings, so ``RayRuntime.resume_session(id)`` can
rebuild a session a previous process left without being given its model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from fore.actors.llm.models import OpenAICompatible
from fore.distributed import shipping
from fore.messages.speculation import SpeculationConfig

__all__ = ["OBJECT_OPTIONS", "PLAIN_OPTIONS", "SessionSpec", "model_from_settings"]

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
    }
)
"""``Runtime.open_session`` keywords that travel as plain values."""

OBJECT_OPTIONS = frozenset({"tools", "hooks", "interceptor", "mcp_servers", "fast_model"})
"""Keywords whose values are Python objects, shipped by value (with the model)."""

_STORED_MODEL_KEYS = ("base_url", "max_output_tokens", "max_tokens_field")


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

    def objects(self) -> dict[str, Any]:
        """The shipped objects, unpacked (a fresh copy each call; in the shard)."""
        value: dict[str, Any] = shipping.loads(self.payload)
        return value

    def open_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``Runtime.open_session`` (in the shard)."""
        return {**self.options, **self.objects()}

    def model_settings(self, model: Any) -> dict[str, JsonValue]:
        """What the store keeps about the model: enough to rebuild an endpoint, no credential."""
        if isinstance(model, OpenAICompatible):
            settings: dict[str, JsonValue] = {"kind": "openai_compatible", "model": model.name}
            for key in _STORED_MODEL_KEYS:
                settings[key] = getattr(model, key)
            return settings
        return {"kind": type(model).__name__}

    def session_config(self) -> dict[str, JsonValue]:
        """The session's JSON-able settings, as the store keeps them."""
        config: dict[str, JsonValue] = {}
        for key, value in self.options.items():
            if isinstance(value, SpeculationConfig):
                config[key] = value.model_dump(mode="json")
            elif value is None or isinstance(value, str | int | float | bool):
                config[key] = value
            elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
                config[key] = list(value)
        if self.node is not None:
            config["node"] = self.node
        return config


def model_from_settings(settings: dict[str, JsonValue]) -> OpenAICompatible | None:
    """The endpoint a stored session talked to (its key from the environment), if it was one."""
    if settings.get("kind") != "openai_compatible":
        return None
    base_url = settings.get("base_url")
    name = settings.get("model")
    cap = settings.get("max_output_tokens")
    field_name = settings.get("max_tokens_field")
    return OpenAICompatible(
        base_url=base_url if isinstance(base_url, str) else None,
        model=name if isinstance(name, str) else None,
        max_output_tokens=cap if isinstance(cap, int) else None,
        max_tokens_field=(
            field_name if field_name in ("max_tokens", "max_completion_tokens") else None  # type: ignore[arg-type]
        ),
    )


def options_from_config(config: dict[str, JsonValue]) -> dict[str, Any]:
    """The plain ``open_session`` options a stored session was opened with."""
    options: dict[str, Any] = {}
    for key, value in config.items():
        if key not in PLAIN_OPTIONS:
            continue
        if key == "speculation" and isinstance(value, dict):
            options[key] = SpeculationConfig.model_validate(value)
        else:
            options[key] = value
    return options
