import pytest

from specchat.storage import Store, open_database


@pytest.fixture
def store(tmp_path):
    """A real Store on a fresh database in the test's folder."""
    store = Store(open_database(tmp_path / "specchat.db"))
    yield store
    store.close()
