"""The packages of the design card import and expose their public API."""

import importlib


def test_top_level_packages_import() -> None:
    for name in ("actors", "messages", "supervision", "bench"):
        assert importlib.import_module(name) is not None
