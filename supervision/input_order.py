"""The order of one session's user inputs at its front door (the speculation controller).

A keystroke travels on the controller's control lane, so that one that aborts
a speculation does so at once, ahead of whatever mail waits there. A Tab
(``AcceptSuggestion``) and a prompt (``SubmitPrompt``) travel on the ordinary
lane. So a key typed after a Tab or a prompt the controller has not taken from
its mailbox yet would overtake it: it would abort the speculation the Tab was
sent to accept (the Tab then answers ``no_suggestion``), or withdraw the
suggestion a prompt of its very text was sent to accept.

:class:`InputOrder` keeps the order the user gave. A Tab or prompt is
registered before it is sent (:meth:`InputOrder.sending`) and carries the
callback that says it arrived (``AcceptSuggestion.arrived`` /
``SubmitPrompt.arrived``), which the controller calls first thing when it
handles it. Keys typed meanwhile wait here, and are told -- in the order they
were typed, on the control lane -- once it has arrived: from the controller's
thread, so they are the next mail it reads. The sender calls the same callback
when the input is answered (or its ask failed), so keys never wait past the
input's own deadline, even if it never arrived (its actor died).

With nothing on its way -- the hot path: the user types while a speculation
runs -- a key is told at once, one mailbox put as before; the only cost is an
uncontended lock.
"""

from __future__ import annotations

import threading
from typing import Any

from fore.actors.core.continuations import tell_quietly
from fore.messages.speculation import Keystroke


class InputOrder:
    """Holds the keys typed after a Tab or prompt until the controller has it (module docs)."""

    def __init__(self, front: Any) -> None:
        self._front = front
        self._lock = threading.Lock()
        self._on_the_way: list[OnTheWay] = []
        """The Tabs and prompts sent and not yet arrived (nor answered), oldest first."""

    def sending(self) -> OnTheWay:
        """A Tab or prompt about to be sent: keys typed from now on wait for it.

        Pass the result as the message's ``arrived`` and call it again once the
        message is answered (a second call does nothing).
        """
        entry = OnTheWay(self)
        with self._lock:
            self._on_the_way.append(entry)
        return entry

    def keystroke(self, key: Keystroke) -> None:
        """Tell ``key`` now, or after the Tab or prompt on its way before it."""
        with self._lock:
            if self._on_the_way:
                self._on_the_way[-1].keys.append(key)
                return
            # Told under the lock: a key released by an arrival is never overtaken.
            self._front.tell(key)

    def _arrived(self, entry: OnTheWay) -> None:
        with self._lock:
            index = next((i for i, e in enumerate(self._on_the_way) if e is entry), None)
            if index is None:
                return  # already arrived (or answered)
            del self._on_the_way[index]
            if index > 0:
                # An earlier one is still on its way (it was answered without
                # arriving, or the two were sent from different threads): its
                # keys and these wait for it, in order.
                self._on_the_way[index - 1].keys.extend(entry.keys)
                return
            for key in entry.keys:
                tell_quietly(self._front, key)  # the session closed: nothing to abort


class OnTheWay:
    """One Tab or prompt on its way to the controller, and the keys typed after it.

    Calling it says it arrived (the controller) or was answered (its sender).
    """

    __slots__ = ("_order", "keys")

    def __init__(self, order: InputOrder) -> None:
        self._order = order
        self.keys: list[Keystroke] = []

    def __call__(self) -> None:
        self._order._arrived(self)
