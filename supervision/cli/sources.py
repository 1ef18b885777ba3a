"""What ``fore run`` and ``fore chat`` build from their flags and the environment: the
model (a script, or an OpenAI-compatible or Anthropic endpoint and its key), the
session store, and the runtime on it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from fore.errors import UsageError
from fore.supervision.cli.exits import PROG, _Failed, one_line


def first_env(*names: str) -> str | None:
    """The value of the first of these environment variables that is set (and not empty)."""
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def read_api_key(args: argparse.Namespace, command: str) -> str | None:
    if args.api_key is not None:
        sys.stderr.write(
            f"{PROG} {command}: warning: --api-key shows the key to every process listing and "
            "keeps it in shell history; use FORE_API_KEY or --api-key-file\n"
        )
        return str(args.api_key)
    path: Path | None = args.api_key_file
    if path is None:
        return None
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(
            f"{PROG} {command}: --api-key-file {path}: {exc.strerror or one_line(exc)}"
        ) from None
    if not key or "\n" in key:
        raise UsageError(f"{PROG} {command}: --api-key-file {path}: expected one line, the key")
    return key


def model_from_flags(args: argparse.Namespace, command: str = "run") -> Any:
    """The model of ``fore run``/``chat``: a script, or an endpoint from flags or environment."""
    api_key = read_api_key(args, command)  # warned about / checked even when a script needs none
    if args.script is not None:
        from fore.actors.llm import ScriptedModel
        from fore.actors.llm.script import ScriptError

        try:
            return ScriptedModel.from_file(args.script)
        except ScriptError as exc:
            raise UsageError(f"{PROG} {command}: {' '.join(str(exc).split())}") from None
    # -- --provider (issue 27) --
    from fore.actors.llm.providers import infer_provider

    configured = args.base_url or first_env("FORE_BASE_URL", "OPENAI_BASE_URL")
    if infer_provider(args.provider, configured, os.environ) == "anthropic":
        return _anthropic_model(args, command, api_key)
    # --
    base_url = args.base_url or first_env("FORE_BASE_URL", "OPENAI_BASE_URL")
    if not base_url:
        sources = (
            "--demo, --script or --base-url" if command == "chat" else "--script or --base-url"
        )
        raise UsageError(
            f"{PROG} {command}: one of {sources} is required "
            "(or set FORE_BASE_URL / OPENAI_BASE_URL)"
        )
    model_name = args.model or first_env("FORE_MODEL", "OPENAI_MODEL")
    if not model_name:
        raise UsageError(
            f"{PROG} {command}: --model is required with --base-url "
            "(or set FORE_MODEL / OPENAI_MODEL)"
        )
    if not base_url.startswith(("http://", "https://")):
        raise UsageError(f"{PROG} {command}: --base-url must start with http:// or https://")
    from fore.actors.llm import OpenAICompatible, RetryPolicy

    try:
        return OpenAICompatible(
            base_url=base_url,
            model=model_name,
            api_key=api_key,
            retry=RetryPolicy(max_retries=1, initial_backoff=0.2),
            stream=False if args.no_stream else None,
        )
    except ValueError as exc:  # e.g. a malformed FORE_EXTRA_HEADERS
        raise UsageError(f"{PROG} {command}: {' '.join(str(exc).split())}") from None


def _anthropic_model(args: argparse.Namespace, command: str, api_key: str | None) -> Any:
    """``--provider anthropic``: the Messages API (defaults: ``AnthropicModel``'s; the key
    from ``--api-key-file`` or else ``ANTHROPIC_API_KEY`` / ``FORE_API_KEY``)."""
    from fore.actors.llm import AnthropicModel, RetryPolicy
    from fore.actors.llm.providers import is_anthropic_url

    base_url = args.base_url or first_env("ANTHROPIC_BASE_URL")
    fallback = first_env("FORE_BASE_URL", "OPENAI_BASE_URL")
    if base_url is None and fallback is not None and is_anthropic_url(fallback):
        base_url = fallback
    try:
        return AnthropicModel(
            base_url=base_url,
            model=args.model,
            api_key=api_key,
            retry=RetryPolicy(max_retries=1, initial_backoff=0.2),
            stream=False if getattr(args, "no_stream", False) else None,
        )
    except ValueError as exc:
        raise UsageError(f"{PROG} {command}: {' '.join(str(exc).split())}") from None


def store_url(args: argparse.Namespace) -> str | None:
    """The store ``fore run`` / ``fore chat`` use: a flag, ``FORE_STORE``, or the default file."""
    if args.no_store:
        return None
    url = args.store or first_env("FORE_STORE")
    if url:
        return str(url)
    from fore.supervision.persist import default_store_dir

    directory = default_store_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"{PROG}: cannot create the session store's directory: {one_line(exc)} "
            "(use --store URL or --no-store)"
        ) from None
    return f"sqlite:///{directory / 'sessions.db'}"


def open_runtime(name: str, store: str | None, command: str, **options: Any) -> Any:
    """A runtime on ``store``; a store that cannot be opened is one line."""
    from fore.actors.store import StoreError, StoreUrlError
    from fore.supervision import Runtime

    try:
        return Runtime(name=name, store=store, **options)
    except StoreUrlError as exc:
        raise UsageError(f"{PROG} {command}: --store: {one_line(exc)}") from None
    except StoreError as exc:
        raise _Failed(f"{PROG} {command}: error: the session store: {one_line(exc)}") from None
