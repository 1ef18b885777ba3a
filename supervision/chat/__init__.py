"""``fore chat``: the interactive terminal where a person presses Tab.

Modules, one concept each:

* :mod:`.app` -- the prompt_toolkit application (layout, keys, threads);
* :mod:`.backend` -- the port to the public session API (async calls, the
  event stream, approvals, the model);
* :mod:`.transcript` -- session events to printed and live lines (pure);
* :mod:`.status` -- the status line and ``/cost`` (pure);
* :mod:`.approval` -- Shift-Tab's mode cycle and call summaries (the policy
  is the runtime's: ``open_session(approval=..., approver=...)``);
* :mod:`.commands` -- slash commands; :mod:`.paths` -- ``@`` completion;
* :mod:`.demo` -- ``fore chat --demo``'s workspace and scripted model;
* :mod:`.trace` -- the optional timing trace ``fore bench chat`` reads;
* :mod:`.run` -- the entry point (terminal checks, setup, cleanup).

Nothing is imported here, so ``fore --help`` stays fast.
"""
