"""The base classes every Fore message derives from.

Every message that crosses an actor boundary is a frozen pydantic v2 model with
``extra="forbid"``: a typo in a field name is a validation error at the sender,
never a silently ignored keyword, and a message can be shared between threads
without copying because nobody can mutate it.

Two marker bases decide how the pooled runtime routes a message:

* :class:`Message` -- ordinary mail, delivered in FIFO order;
* :class:`ControlMessage` -- control mail (abort, stop-now, cancel) that
  overtakes every ordinary message already queued for the actor.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Message(BaseModel):
    """A frozen, strictly validated message."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


class ControlMessage(Message):
    """A message that travels on the control lane and overtakes ordinary mail.

    The pooled runtime checks ``isinstance(message, ControlMessage)`` when a
    message is put into a mailbox; nothing else about the message changes.
    """
