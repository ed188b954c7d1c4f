"""Fixtures of the engine's tests: the shipped model catalog, parsed and as its JSON document."""

import json

import pytest

from specchat.models.catalog import entries as cat


@pytest.fixture(scope="module")
def catalog():
    return cat.load_catalog()


@pytest.fixture(scope="module")
def shipped_document():
    return json.loads(cat.catalog_path().read_text(encoding="utf-8"))
