"""``python -m fore.supervision.cli``: the ``fore`` command."""

from fore.supervision.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
