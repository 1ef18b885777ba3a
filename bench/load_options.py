"""The load benchmark's knobs (``fore bench``'s flags): :class:`LoadOptions`.

One value object that the run driver (:mod:`bench.load`), the simulated users
(:mod:`bench.sim_user`) and the report (:mod:`bench.load_report`, which keeps
them as ``options``) all read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LoadOptions:
    sessions: int = 200
    turns: int = 4
    duration: float = 100.0
    """Wall-clock bound of the whole run, setup and teardown included (module docs)."""
    accept_p: float = 0.7
    think_ms: float = 10_000.0
    """Mean time a user reads an answer before acting.

    Ten seconds is a quick reader of a coding agent's answer; at 5 s the 200
    default sessions keep this 2-core machine saturated (see the issue note).
    """
    think_dist: str = "exp"
    """How think times are distributed around ``think_ms``
    (:data:`~bench.sim_user.THINK_DISTS`)."""
    type_during_p: float = 0.8
    """Probability that a user, instead of reading the answer, starts typing its
    next prompt at once -- while the speculation runs
    (:data:`~bench.sim_user.TYPE_AT_ONCE_S`) -- and presses Enter after its think time
    (:meth:`~bench.sim_user.SimUser._start_typing`).

    Only a keystroke that finds the speculation still running measures abort
    latency, and a session acts on just two suggestions in a default run (the
    first answer has none, the last one's is never acted on): ~400 in all,
    less what the governor skips. About three in four of these keystrokes
    find the speculation running. Measured on a default run: 0.75 gave 249
    aborts of running speculations with no governor skips, and 187 with the
    governor skipping 23% of suggestions on a machine loaded by other work;
    0.8 gave 265 without skips and 233 with the governor skipping 10%, and
    leaves a fifth of the suggestions to be read and accepted with ``accept_p``."""
    drain_s: float = 5.0
    """After the users' deadline, rounds in flight get this long to finish."""
    edit_p: float = 0.05
    ttft_ms: float = 40.0
    tokens_per_s: float = 400.0
    speculation: bool = True
    governor: bool = True
    """Speculate only with headroom (the runtime's default); off: speculate always."""
    seed: int = 1
    progress: bool = True
    price: tuple[float, float, float] = (3.0, 15.0, 0.3)
    """The mock model's price, USD per million input / output / cached input tokens
    (``--price``): the report's costs, waste in money included (issue 28)."""
    shards: int = 0
    """Ray shards hosting the sessions (``fore bench --shards N``, :mod:`bench.load_ray`);
    0: the sessions are in this process."""
    provider: str = "openai"
    """The mock's wire protocol the sessions speak: ``openai`` (Chat Completions) or
    ``anthropic`` (Messages, with prompt caching: the report's "prompt cache" rows)."""
    store: str | None = None
    """``"sqlite"``: every session in a SQLite session store (a file of the run's temp
    directory), each turn written ahead of its report (``fore bench --store sqlite``)."""
