"""``fore chat``: the interactive terminal where a person presses Tab.

Modules, one concept each:

* :mod:`.app` -- the prompt_toolkit application (layout, keys, threads);
* :mod:`.backend` -- the port to the session API (the one layer that changes
  when the session grows async and approval APIs);
* :mod:`.transcript` -- session events to printed and live lines (pure);
* :mod:`.status` -- the status line and ``/cost`` (pure);
* :mod:`.approval` -- the approval policy and its ``pre_tool_call`` hook;
* :mod:`.commands` -- slash commands; :mod:`.paths` -- ``@`` completion;
* :mod:`.demo` -- ``fore chat --demo``'s workspace and scripted model;
* :mod:`.trace` -- the optional timing trace ``fore bench chat`` reads;
* :mod:`.run` -- the entry point (terminal checks, setup, cleanup).

Nothing is imported here, so ``fore --help`` stays fast.
"""
