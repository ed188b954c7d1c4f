"""Documents kept with a chat (Store.documents): attach and load, per message and per chat, search over the passages
(FTS5, BM25) with whatever a user types, the index kept in step by deletes, cascades and imports, and documents in
the JSON export and import, where every field of an imported one is checked."""

import dataclasses
import hashlib
import json
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from specchat.core.errors import StorageError
from specchat.documents.document import Document, Passage
from specchat.storage.document_records import MAX_DOCUMENTS_PER_MESSAGE, DocumentInfo
from specchat.documents.ranking import MAX_QUERY_WORDS as MAX_QUERY_TERMS, fts_query

KEYS = ("Rotating the encryption keys: generate a new key pair, sign it with the old one, then retire the old key "
        "after every client has fetched the new one.")
BACKUPS = "Backups run nightly at two o'clock; each is kept for thirty days and checked by restoring it."
LUNCH = "The cafeteria serves lunch from noon, with a vegetarian dish every day."
ONBOARDING = "New hires receive a laptop, a badge and a mentor during their first week."


def make_document(paragraphs, name="handbook.md", kind="markdown", paged=False) -> Document:
    """A document whose passages are its paragraphs (each its own page when `paged`), as the reader would cut it."""
    text = "\n\n".join(paragraphs)
    starts, position = [], 0
    for paragraph in paragraphs:
        starts.append(position)
        position += len(paragraph) + 2
    page_starts = tuple(starts) if paged else ()
    document = Document(name=name, kind=kind, text=text, pages=len(paragraphs) if paged else None,
                        page_starts=page_starts, sha256=hashlib.sha256(text.encode()).hexdigest(),
                        size_bytes=len(text.encode()) + 100, passages=())
    passages = tuple(Passage(position=i, page=document.page_at(start), start=start, end=start + len(paragraph),
                             text=paragraph) for i, (start, paragraph) in enumerate(zip(starts, paragraphs)))
    return dataclasses.replace(document, passages=passages)


HANDBOOK = make_document([ONBOARDING, LUNCH, KEYS, BACKUPS], name="handbook.pdf", kind="pdf", paged=True)


@pytest.fixture
def chat(store):
    chat = store.create_conversation("Questions")
    first = store.add_message(chat.id, "user", "Here is the handbook")
    store.add_message(chat.id, "assistant", "Thanks.")
    later = store.add_message(chat.id, "user", "And my notes")
    return chat, first, later


def fts_rows(store, word: str) -> list[int]:
    """The passage ids the full-text index finds for `word`, read from the index itself."""
    with store.database.engine.connect() as connection:
        return [row[0] for row in connection.exec_driver_sql(
            "SELECT rowid FROM document_passages_fts WHERE document_passages_fts MATCH ?", (f'"{word}"',))]


def check_index(store) -> None:
    """FTS5's own check that the index holds exactly the passages' text (raises if it is out of step)."""
    with store.database.engine.begin() as connection:
        connection.exec_driver_sql("INSERT INTO document_passages_fts(document_passages_fts) VALUES "
                                   "('integrity-check')")


def test_attach_and_load_round_trip(store, chat):
    conversation, first, _ = chat
    info = store.documents.attach(first.id, HANDBOOK, tokens=321)
    assert isinstance(info, DocumentInfo)
    assert (info.message_id, info.conversation_id, info.name, info.kind, info.pages, info.chars, info.size_bytes,
            info.tokens) == (first.id, conversation.id, "handbook.pdf", "pdf", 4, len(HANDBOOK.text),
                             HANDBOOK.size_bytes, 321)
    assert info.created_at.tzinfo is not None
    assert store.documents.load(info.id) == HANDBOOK
    assert store.documents.of_chat(conversation.id)[0].tokens == 321
    with pytest.raises(StorageError, match="does not exist"):
        store.documents.load(info.id + 1)


def test_documents_by_message_and_in_message_order(store, chat):
    conversation, first, later = chat
    notes = store.documents.attach(later.id, make_document([LUNCH], name="notes.txt", kind="text"))
    handbook = store.documents.attach(first.id, HANDBOOK)
    extra = store.documents.attach(first.id, make_document([BACKUPS], name="extra.md"))
    assert [d.id for d in store.documents.of_chat(conversation.id)] == [handbook.id, extra.id, notes.id]
    other = store.create_conversation("Other")
    assert store.documents.of_chat(other.id) == []


@pytest.mark.parametrize("change, message", [
    (dict(kind="exe"), "kind must be one of"),
    (dict(sha256="abc"), "sha256"),
    (dict(size_bytes=-1), "size_bytes"),
    (dict(name="  "), "name"),
    (dict(text="a\ud800b"), "invalid character"),
    (dict(pages=5), "one offset per page"),
    (dict(page_starts=(0, 5, 3, 9)), r"page_starts\[2\]"),
    (dict(pages=None, page_starts=()), "page must be null"),
    (dict(passages=HANDBOOK.passages[1:]), "position must be 0"),
    (dict(passages=(dataclasses.replace(HANDBOOK.passages[0], text="something else"),)), "not the document's text"),
    (dict(passages=(dataclasses.replace(HANDBOOK.passages[0], end=10**9),)), "outside the text"),
    (dict(passages=tuple(dataclasses.replace(HANDBOOK.passages[0], position=i) for i in range(20))), "2 times"),
])
def test_a_bad_document_is_refused_and_nothing_is_stored(store, chat, change, message):
    conversation, first, _ = chat
    with pytest.raises(StorageError, match=message):
        store.documents.attach(first.id, dataclasses.replace(HANDBOOK, **change))
    assert store.documents.of_chat(conversation.id) == []


def test_attach_refuses_a_missing_message_a_bad_token_count_and_too_many_documents(store, chat):
    _, first, _ = chat
    with pytest.raises(StorageError, match="message 999 does not exist"):
        store.documents.attach(999, HANDBOOK)
    with pytest.raises(StorageError, match="token count"):
        store.documents.attach(first.id, HANDBOOK, tokens=-3)
    small = make_document([LUNCH])
    for _ in range(MAX_DOCUMENTS_PER_MESSAGE):
        store.documents.attach(first.id, small)
    with pytest.raises(StorageError, match=f"at most {MAX_DOCUMENTS_PER_MESSAGE} documents"):
        store.documents.attach(first.id, small)


def test_search_ranks_the_right_passage_first_within_the_chat(store, chat):
    conversation, first, later = chat
    handbook = store.documents.attach(first.id, HANDBOOK)
    notes = store.documents.attach(later.id, make_document([LUNCH, BACKUPS], name="notes.txt", kind="text"))
    elsewhere = store.create_conversation("Elsewhere")
    message = store.add_message(elsewhere.id, "user", "x")
    store.documents.attach(message.id, make_document([KEYS], name="keys.md"))

    hits = store.documents.search(conversation.id, "How do I rotate the encryption keys?")
    assert hits[0].document_id == handbook.id and hits[0].passage == HANDBOOK.passages[2]
    assert hits[0].name == "handbook.pdf" and hits[0].passage.page == 3
    assert all(hit.document_id in (handbook.id, notes.id) for hit in hits)  # never another chat's
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    backups = store.documents.search(conversation.id, "when do backups run", limit=1, document_ids=[notes.id])
    assert [(h.document_id, h.passage.text) for h in backups] == [(notes.id, BACKUPS)]
    assert store.documents.search(conversation.id, "backups", document_ids=[]) == []
    assert store.documents.search(conversation.id, "zeppelin") == []


@pytest.mark.parametrize("query", [
    '"', '""', 'NEAR(', 'NEAR(keys rotate, 2)', '*', 'keys*', ':', 'text:keys', '^keys', '(', ')', 'AND', 'OR NOT',
    '- keys', '+', '{text}: keys', "'", '\\', '\x00', '\ud800', '', '   ', '🙂', 'ключи', 'x' * 200_000,
    ' '.join(f'w{i}' for i in range(5000)), '"keys" AND "rotate" NEAR("old" "new")', 'key_rotation', None, 42,
])
def test_search_survives_hostile_queries(store, chat, query):
    conversation, first, _ = chat
    store.documents.attach(first.id, HANDBOOK)
    hits = store.documents.search(conversation.id, query)
    assert isinstance(hits, list)
    if isinstance(query, str) and "keys" in query:
        assert hits and hits[0].passage == HANDBOOK.passages[2]


def test_the_fts_query_is_bounded_and_quoted():
    assert fts_query('rotate the "keys", NEAR( keys*') == '"rotate" OR "keys" OR "near"'
    assert fts_query("!!! ::: ***") is None and fts_query("") is None and fts_query(None) is None
    assert fts_query(" ".join(f"w{i}" for i in range(1000))).count(" OR ") == MAX_QUERY_TERMS - 1


def test_search_refuses_a_bad_limit_or_filter(store, chat):
    conversation, _, _ = chat
    for bad in (0, -1, 10**6, True, "8"):
        with pytest.raises(StorageError, match="limit"):
            store.documents.search(conversation.id, "keys", limit=bad)
    with pytest.raises(StorageError, match="document id"):
        store.documents.search(conversation.id, "keys", document_ids=["1"])


def test_the_index_follows_deleted_messages_and_chats(store, chat):
    conversation, first, later = chat
    store.documents.attach(first.id, HANDBOOK)
    notes = store.documents.attach(later.id, make_document([BACKUPS], name="notes.txt", kind="text"))
    assert len(fts_rows(store, "backups")) == 2
    store.tree.delete(conversation.id, later.id)  # the later message, and its notes with it
    assert [d.message_id for d in store.documents.of_chat(conversation.id)] == [first.id]
    assert len(fts_rows(store, "backups")) == 1
    with pytest.raises(StorageError):
        store.documents.load(notes.id)
    check_index(store)
    store.delete_conversation(conversation.id)
    assert fts_rows(store, "backups") == [] and fts_rows(store, "keys") == []
    with store.database.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM documents").scalar() == 0
        assert connection.exec_driver_sql("SELECT count(*) FROM document_passages").scalar() == 0
    check_index(store)


def test_the_index_follows_an_edited_passage(store, chat):
    _, first, _ = chat
    info = store.documents.attach(first.id, make_document([LUNCH]))
    with store.database.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE document_passages SET text = 'dinner at eight' WHERE document_id = ?",
                                   (info.id,))
    assert fts_rows(store, "lunch") == [] and len(fts_rows(store, "dinner")) == 1
    check_index(store)


def test_export_and_import_carry_the_documents(store, chat):
    conversation, first, later = chat
    handbook = store.documents.attach(first.id, HANDBOOK, tokens=99)
    notes = make_document([LUNCH, BACKUPS], name="notes.txt", kind="text")
    store.documents.attach(later.id, notes)
    exported = json.loads(json.dumps(store.export_json(conversation.id)))
    assert exported["version"] == 3
    assert [(d["message"], d["name"]) for d in exported["documents"]] == [(0, "handbook.pdf"), (2, "notes.txt")]
    assert exported["documents"][0]["passages"][2] == [HANDBOOK.passages[2].start, HANDBOOK.passages[2].end, 3]

    imported = store.import_json(exported)
    copies = store.documents.of_chat(imported.id)
    assert [store.documents.load(d.id) for d in copies] == [HANDBOOK, notes]
    assert copies[0].tokens is None  # counted under a model this database may not have
    assert copies[0].created_at == handbook.created_at
    messages = store.messages(imported.id)
    assert [d.message_id for d in copies] == [messages[0].id, messages[2].id]
    assert store.export_json(imported.id) == exported
    hits = store.documents.search(imported.id, "encryption keys")
    assert hits[0].document_id == copies[0].id and hits[0].passage == HANDBOOK.passages[2]
    check_index(store)


def test_a_version_1_export_still_imports(store):
    """What specchat wrote before documents: version 1, no "documents"."""
    version_1 = {"format": "specchat-conversation", "version": 1, "title": "Old export", "system_prompt": None,
                 "created_at": "2025-03-01T10:00:00+00:00",
                 "messages": [{"role": "user", "text": "hi", "created_at": "2025-03-01T10:00:00+00:00",
                               "stopped": False, "spans": None, "finish_reason": None},
                              {"role": "assistant", "text": "hello", "created_at": "2025-03-01T10:00:01+00:00",
                               "stopped": False, "spans": [[0, 5, "draft"]], "finish_reason": "eos"}]}
    imported = store.import_json(json.dumps(version_1))
    assert [m.text for m in store.messages(imported.id)] == ["hi", "hello"]
    assert store.documents.of_chat(imported.id) == []
    upgraded = store.export_json(imported.id)
    assert (upgraded["version"], upgraded["documents"], upgraded["shown"]) == (3, [], 1)
    assert upgraded["messages"] == [dict(m, parent=i - 1 if i else None) for i, m in enumerate(version_1["messages"])]


def exported_with_document() -> dict:
    text = "Alpha beta.\n\nGamma delta."
    return {"format": "specchat-conversation", "version": 2, "title": "t",
            "messages": [{"role": "user", "text": "see file"}],
            "documents": [{"message": 0, "name": "a.md", "kind": "markdown", "size_bytes": 30,
                           "sha256": hashlib.sha256(b"x").hexdigest(), "pages": None, "page_starts": [],
                           "text": text, "passages": [[0, 11, None], [13, 25, None]]}]}


@pytest.mark.parametrize("field, value, message", [
    ("message", 1, "index of a message"),
    ("message", -1, "index of a message"),
    ("message", "0", "index of a message"),
    ("name", "", "name"),
    ("name", 5, "name"),
    ("kind", "exe" * 1_000_000, "kind must be one of"),
    ("text", ["x"], "text"),
    ("text", "\ud800", "invalid character"),
    ("sha256", "G" * 64, "sha256"),
    ("size_bytes", 10**400, "size_bytes"),
    ("size_bytes", True, "size_bytes"),
    ("pages", 2, "one offset per page"),
    ("pages", 0, "pages"),
    ("page_starts", [0], "empty for a document without pages"),
    ("page_starts", {"a": 1}, "page_starts"),
    ("passages", None, "passages"),
    ("passages", [[0, 11]], r"\[start, end, page\]"),
    ("passages", [[0, 99, None]], "outside the text"),
    ("passages", [[5, 2, None]], "outside the text"),
    ("passages", [[0, 11, 1]], "page must be null"),
    ("passages", [["0", 11, None]], "outside the text"),
    ("passages", [[0, 1, None]] * 60, "2 times"),
    ("passages", [[0, 0, None]] * 200_000, "at most"),
    ("created_at", "yesterday", "ISO 8601"),
])
def test_a_hostile_imported_document_is_refused_whole(store, field, value, message):
    data = exported_with_document()
    data["documents"][0][field] = value
    with pytest.raises(StorageError, match=message) as raised:
        store.import_json(data)
    assert len(str(raised.value)) < 250, str(raised.value)[:300]
    assert str(raised.value).startswith("documents[0]") or "documents" in str(raised.value)
    assert store.list_conversations() == []  # nothing half-imported


@pytest.mark.parametrize("documents, message", [
    ("all", '"documents" must be a list'),
    ([{"message": 0}] * (MAX_DOCUMENTS_PER_MESSAGE + 1), "at most"),
    ([7], "must be an object"),
])
def test_a_hostile_documents_list_is_refused(store, documents, message):
    data = exported_with_document()
    data["documents"] = documents
    with pytest.raises(StorageError, match=message):
        store.import_json(data)
    assert store.list_conversations() == []


def test_too_many_imported_documents_on_one_message_are_refused(store):
    data = exported_with_document()
    data["messages"] = [{"role": "user", "text": "a"}, {"role": "user", "text": "b"}]
    data["documents"] = data["documents"] * (MAX_DOCUMENTS_PER_MESSAGE + 1)
    with pytest.raises(StorageError, match=f"messages\\[0\\] has more than {MAX_DOCUMENTS_PER_MESSAGE}"):
        store.import_json(data)


def test_a_version_1_file_with_documents_ignores_them(store):
    data = exported_with_document()
    data["version"] = 1
    data["documents"] = "ignored: version 1 had no documents"
    imported = store.import_json(data)
    assert store.documents.of_chat(imported.id) == []


ODD = st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats() | st.text(max_size=30)
ANY_JSON = st.recursive(ODD, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4), max_leaves=10)


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory):
    from specchat.storage import Store, open_database

    store = Store(open_database(tmp_path_factory.mktemp("fuzz") / "specchat.db"))
    yield store
    store.close()


@settings(derandomize=True, database=None, max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["message", "name", "kind", "text", "sha256", "size_bytes", "pages", "page_starts",
                              "passages", "created_at", "documents"]), value=ANY_JSON)
def test_any_imported_document_makes_a_chat_or_says_what_is_wrong(fuzz_store, field, value):
    data = exported_with_document()
    if field == "documents":
        data["documents"] = value
    else:
        data["documents"][0][field] = value
    before = len(fuzz_store.list_conversations())
    try:
        imported = fuzz_store.import_json(data)
    except StorageError as error:
        assert 0 < len(str(error)) < 400
        assert len(fuzz_store.list_conversations()) == before
    else:
        for info in fuzz_store.documents.of_chat(imported.id):
            document = fuzz_store.documents.load(info.id)
            assert all(p.text == document.text[p.start:p.end] for p in document.passages)
    with sqlite3.connect(fuzz_store.database.path) as raw:
        raw.execute("INSERT INTO document_passages_fts(document_passages_fts) VALUES ('integrity-check')")
