"""Programs for mypy only (tests/typecheck/test_typed_asks.py); never imported or run."""
