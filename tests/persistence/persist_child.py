"""A child process running real sessions on a store, for the persistence tests.

``python -m tests.persistence.persist_child <command> <json args>`` opens a
:class:`~fore.supervision.runtime.Runtime` on the store URL and runs sessions
against the mock LLM server at ``base_url`` (an OpenAI-compatible endpoint,
so a resume in another process rebuilds the model from the stored settings).
It prints one JSON line per event (flushed), so the parent can wait for a
point of its work and then kill it, or let it finish:

* ``turns`` -- open ``sessions`` sessions and run turns in each (one thread
  per session) until ``turns`` each or killed; every reported turn is printed
  with its items exactly as ``model_dump_json`` wrote them.
* ``create`` -- open sessions, run ``turns`` turns, close them, exit.
* ``resume`` -- resume the given sessions, run ``turns`` more turns each, close, exit.
* ``hold`` -- resume a session and keep it open until stdin closes.

Every turn calls the ``lookup`` tool once: a turn is four items (prompt, call,
result, answer), so a torn turn would show as a partial group.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from fore.actors.llm import OpenAICompatible, RetryPolicy
from fore.actors.llm.script import ScriptFile, ScriptReply, ScriptToolCall, ScriptWhen
from fore.actors.store import SessionLeased
from fore.actors.tools.decorator import tool
from fore.supervision import Runtime


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: what to look up
    """
    return f"[r {key}] the value of {key}"


def prompt(sid_tag: str, n: int) -> str:
    return f"[t {sid_tag}-{n}] look up {sid_tag}-{n}"


def script(tags: list[str], turns: int, tokens_per_s: float | None = None) -> ScriptFile:
    """Two replies per turn: the call (on the prompt), the answer (on the tool's result)."""
    replies: list[ScriptReply] = []
    for tag in tags:
        for n in range(turns):
            key = f"{tag}-{n}"
            replies.append(
                ScriptReply(
                    when=ScriptWhen(contains=f"[t {key}]", purpose="main"),
                    tool_calls=(ScriptToolCall(name="lookup", arguments={"key": key}),),
                )
            )
            replies.append(
                ScriptReply(
                    when=ScriptWhen(contains=f"[r {key}]", purpose="main"),
                    text=f"the value of {key} is known now " + "and that is all " * 8,
                    tokens_per_s=tokens_per_s,
                )
            )
    return ScriptFile(replies=tuple(replies))


def say(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"child": event, **fields}) + "\n")
    sys.stdout.flush()


def model(base_url: str) -> OpenAICompatible:
    return OpenAICompatible(
        base_url=base_url,
        model="mock",
        api_key="",
        retry=RetryPolicy(max_retries=0),
    )


def run_turns(session: Any, tag: str, first: int, count: int) -> None:
    for n in range(first, first + count):
        turn = session.submit(prompt(tag, n), timeout=60)
        say(
            "turn",
            session=session.id,
            tag=tag,
            n=n,
            status=turn.status,
            error=turn.error,
            items=[item.model_dump_json() for item in turn.items],
        )


def runtime(args: dict[str, Any]) -> Runtime:
    return Runtime(name="persist-child", store=args["url"], blob_dir=args["blob_dir"])


def main() -> None:
    command, args = sys.argv[1], json.loads(sys.argv[2])
    if command in ("turns", "create"):
        with runtime(args) as rt:
            sessions = [
                rt.open_session(model=model(args["base_url"]), tools=[lookup])
                for _ in range(args["sessions"])
            ]
            for index, session in enumerate(sessions):
                say("opened", session=session.id, tag=f"s{index}")
            threads = [
                threading.Thread(
                    target=run_turns, args=(session, f"s{index}", 0, args["turns"]), daemon=True
                )
                for index, session in enumerate(sessions)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            for session in sessions:
                session.close()
        say("done")
    elif command == "resume":
        with runtime(args) as rt:
            for sid, tag, first in args["sessions"]:
                session = rt.resume_session(sid, tools=[lookup])
                say("resumed", session=sid, items=len(session.history))
                run_turns(session, tag, first, args["turns"])
                session.close()
        say("done")
    elif command == "hold":
        with runtime(args) as rt:
            try:
                session = rt.resume_session(args["session"], tools=[lookup])
            except SessionLeased as exc:
                say("leased", error=str(exc))
                return
            say("holding", session=session.id)
            sys.stdin.read()  # until the parent closes it
            session.close()
        say("done")
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
