"""pytest fixtures of a real PostgreSQL server for the session-store tests.

``pg_cluster`` starts one throwaway cluster per test run
(:class:`actors.store.pgtemp.PgCluster`: ``initdb`` + ``pg_ctl`` under a temp
directory, a unix socket only, stopped and removed at the end); ``pg_url``
gives each test a fresh, empty database of it. No mock database anywhere.

Without PostgreSQL's server binaries the PostgreSQL tests are skipped with the
reason -- except under CI (``CI`` set), where that is a failure: ``.ci/run``
installs Debian's ``postgresql`` package when it is missing.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from fore.actors.store.pgtemp import PgCluster, PgClusterError, find_bindir

_names = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    if find_bindir() is None:
        reason = "no PostgreSQL server binaries (apt-get install postgresql)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        cluster = PgCluster().start()
    except PgClusterError as exc:
        pytest.fail(f"could not start the throwaway PostgreSQL cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


def new_database(cluster: PgCluster) -> str:
    """A fresh empty database of ``cluster``; its URL."""
    return cluster.create_database(f"t{os.getpid()}_{next(_names)}")


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> str:
    return new_database(pg_cluster)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh store URL of each backend in turn (a test using it runs once per backend)."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path_factory.mktemp('store')}/sessions.db"
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    return new_database(cluster)
