"""``python -m fore``: the ``fore`` command."""

from fore.supervision.cli import main

raise SystemExit(main())
