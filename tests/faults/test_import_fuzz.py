"""Malformed imports, fuzzed: whatever the file holds, importing it either makes one conversation or raises a
StorageError that says what is wrong, and writes nothing then. Derandomized, so CI runs the same cases each time."""

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from specchat.core.errors import StorageError
from specchat.storage import Store, open_database

ODD_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40) | st.sampled_from([
    "\ud800", "a\udfffb", "\x00", "\u202e", "🙂" * 50, "x" * 100_000, "", " ", "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00", "2026-13-45", "specchat-conversation"])
SCALARS = st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats() | ODD_TEXT
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ODD_TEXT, inner,
                                                                                            max_size=4), max_leaves=12)
VALID = {"format": "specchat-conversation", "version": 1, "title": "A chat", "created_at": "2026-01-01T10:00:00+00:00",
         "messages": [{"role": "user", "text": "hi"},
                      {"role": "assistant", "text": "hello", "spans": [[0, 5, "draft"]], "stopped": False}]}


def mutated():
    """A valid export with one field, at the top or in a message, replaced by anything."""
    top = st.tuples(st.sampled_from(sorted(VALID)), ANY_JSON).map(lambda kv: {**VALID, kv[0]: kv[1]})
    message_key = st.sampled_from(["role", "text", "spans", "stopped", "created_at", "finish_reason"])
    inner = st.tuples(message_key, ANY_JSON).map(
        lambda kv: {**VALID, "messages": [{**VALID["messages"][1], kv[0]: kv[1]}]})
    return top | inner | ANY_JSON


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = Store(open_database(tmp_path_factory.mktemp("fuzz") / "specchat.db"))
    yield store
    store.close()


@settings(derandomize=True, database=None, max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                                    HealthCheck.data_too_large])
@given(document=mutated(), as_text=st.booleans())
def test_an_import_makes_one_chat_or_says_what_is_wrong(store, document, as_text):
    before = len(store.list_conversations())
    data = json.dumps(document) if as_text else document
    try:
        store.import_json(data)
    except StorageError as error:
        assert str(error) and "\n" not in str(error).strip()[:1]
        assert len(str(error)) < 400  # a bad value is quoted in part, however long (issue 37)
        assert len(store.list_conversations()) == before  # all or nothing
    else:
        assert len(store.list_conversations()) == before + 1


@pytest.mark.parametrize("depth", [10, 5_000, 200_000])
def test_deep_nesting_is_a_clear_error(store, depth):
    with pytest.raises(StorageError):
        store.import_json(("[" * depth + "]" * depth).encode())


@pytest.mark.parametrize("field", ["title", "system_prompt", "text", "finish_reason"])
def test_half_a_surrogate_pair_anywhere_is_a_clear_error(store, field):
    """JSON's "\\ud800" decodes to a lone surrogate, which SQLite cannot store (it raised UnicodeEncodeError from
    inside the database driver, past the import's error handling)."""
    message = {**VALID["messages"][0], **({field: "a\ud800b"} if field in ("text", "finish_reason") else {})}
    document = {**VALID, "messages": [message], **({field: "a\ud800b"} if field in ("title", "system_prompt") else {})}
    before = len(store.list_conversations())
    with pytest.raises(StorageError, match="invalid character"):
        store.import_json(json.dumps(document))
    assert len(store.list_conversations()) == before
