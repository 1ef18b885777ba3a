"""The tool executor pool: one shared actor running every session's tool calls.

:class:`ToolPool` (:mod:`.actor`) runs each batch's calls on runner threads
under its caps; :mod:`.planning` works out what each call writes,
:mod:`.calls` holds the records it keeps, :mod:`.zombies` the calls whose
threads outlive their report.
"""

from fore.actors.tools.pool.actor import DEFAULT_MAX_RUNNING, DEFAULT_PER_SESSION, ToolPool

__all__ = ["DEFAULT_MAX_RUNNING", "DEFAULT_PER_SESSION", "ToolPool"]
