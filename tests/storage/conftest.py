"""Fixtures for the storage tests: a fresh database file in tmp_path, no Qt, no models."""

import pytest

from specchat.storage import Store, open_database


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "data" / "specchat.db"


@pytest.fixture
def store(db_path):
    store = Store(open_database(db_path))
    yield store
    store.close()

