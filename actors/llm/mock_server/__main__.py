"""``python -m fore.actors.llm.mock_server``: run :func:`~fore.actors.llm.mock_server.cli.main`.

What :class:`~fore.actors.llm.mock_server.spawned.SpawnedMockLlmServer` starts in its child.
"""

from __future__ import annotations

import sys

from fore.actors.llm.mock_server.cli import main

if __name__ == "__main__":
    sys.exit(main())
