"""The file-reference interceptor: attaches resolved ``@path`` files after the prompt.

The seed's wiring: references are resolved before the user item is pushed
(the worker's preparer, on the blocking lane); the resolved items wait in the
session's per-submit stash; this interceptor drains the stash in
``on_prompt_submit`` and returns ``ContinueWith(items)``, so they land right
after the user message. If a public hook then cancels the submit, the items
are dropped and the stash is cleared: nothing can leak into the next submit.
Public hooks cannot add items -- only this trusted interceptor can.
"""

from __future__ import annotations

from fore.actors.worker.hooks import Continue
from fore.actors.worker.interceptor import ContinueWith, Interceptor
from fore.actors.worker.state import SessionState
from fore.messages.conversation import UserMessage


class FileRefInterceptor(Interceptor):
    def __init__(self, state: SessionState) -> None:
        self.state = state

    def on_prompt_submit(self, message: UserMessage) -> Continue | ContinueWith:
        items, self.state.stash = self.state.stash, []
        return ContinueWith(items) if items else Continue()

    def on_submit_cancelled(self) -> None:
        self.state.stash = []
