"""Programs for mypy only (tests/typing/test_typed_asks.py); never imported or run."""
