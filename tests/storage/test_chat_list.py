"""The sidebar's chat list in the store (storage/chat_list.py): folders, pins, and the full-text search of the
history, on a real database file."""

import pytest
from sqlalchemy import delete

from specchat.core.errors import StorageError
from specchat.storage.chat_list import MAX_FOLDER_NAME, MAX_TITLE_HITS
from specchat.storage.tables import Message


def chat_with(store, title, *texts):
    """A chat titled `title` whose messages (user, assistant, ...) are `texts`; returns it and its messages."""
    chat = store.create_conversation(title)
    messages = [store.add_message(chat.id, ("user", "assistant")[i % 2], text) for i, text in enumerate(texts)]
    return chat, messages


# -- folders --------------------------------------------------------------------------------------------------------

def test_folders_are_made_renamed_and_deleted_with_their_chats_kept(store):
    work = store.chat_list.create_folder("  Work   notes ")
    home = store.chat_list.create_folder("home")
    chat, _ = chat_with(store, "Budget", "numbers")
    store.chat_list.move(chat.id, work.id)
    assert work.name == "Work notes" and work.chat_count == 0
    assert [(f.name, f.chat_count) for f in store.chat_list.folders()] == [("home", 0), ("Work notes", 1)]
    renamed = store.chat_list.rename_folder(work.id, "Office")
    assert (renamed.id, renamed.name, renamed.chat_count) == (work.id, "Office", 1)
    assert store.conversation(chat.id).folder_id == work.id
    assert store.chat_list.delete_folder(work.id) is True
    assert store.chat_list.delete_folder(work.id) is False  # already gone
    assert [f.name for f in store.chat_list.folders()] == ["home"] and home.id
    kept = store.conversation(chat.id)
    assert kept.folder_id is None and kept.title == "Budget"


BAD_NAMES = [("", "must not be empty"), ("   \n\t", "must not be empty"), ("x" * (MAX_FOLDER_NAME + 1), "at most"),
             ("bad\x00name", "control characters"), (None, "is text"), ("work", "already"), ("WORK", "already")]


def test_bad_folder_names_are_refused_with_a_clear_message(store):
    store.chat_list.create_folder("Work")
    for name, says in BAD_NAMES:
        with pytest.raises(StorageError, match=says):
            store.chat_list.create_folder(name)
    assert [f.name for f in store.chat_list.folders()] == ["Work"]


def test_renaming_checks_the_name_and_the_folder(store):
    work = store.chat_list.create_folder("Work")
    store.chat_list.create_folder("Home")
    assert store.chat_list.rename_folder(work.id, "WORK").name == "WORK"  # its own name, in another case
    with pytest.raises(StorageError, match="already"):
        store.chat_list.rename_folder(work.id, "home")
    with pytest.raises(StorageError, match="does not exist"):
        store.chat_list.rename_folder(9999, "Elsewhere")
    with pytest.raises(StorageError, match="positive whole number"):
        store.chat_list.delete_folder("1")


def test_moving_needs_a_chat_and_a_folder_that_exist_and_keeps_the_chat_in_time(store):
    chat, _ = chat_with(store, "Old", "hello")
    before = store.conversation(chat.id).updated_at
    folder = store.chat_list.create_folder("Archive")
    store.chat_list.move(chat.id, folder.id)
    store.chat_list.pin(chat.id, True)
    moved = store.conversation(chat.id)
    assert moved.folder_id == folder.id and moved.pinned and moved.updated_at == before
    store.chat_list.move(chat.id, None)
    assert store.conversation(chat.id).folder_id is None
    with pytest.raises(StorageError, match="folder 4242 does not exist"):
        store.chat_list.move(chat.id, 4242)
    with pytest.raises(StorageError, match="conversation 4242 does not exist"):
        store.chat_list.move(4242, folder.id)
    with pytest.raises(StorageError, match="True or False"):
        store.chat_list.pin(chat.id, "yes")


def test_pinned_chats_come_first_then_the_newest(store):
    first, _ = chat_with(store, "first", "a")
    second, _ = chat_with(store, "second", "b")
    third, _ = chat_with(store, "third", "c")
    assert [c.title for c in store.list_conversations()] == ["third", "second", "first"]
    store.chat_list.pin(first.id, True)
    listed = store.list_conversations()
    assert [c.title for c in listed] == ["first", "third", "second"]
    assert [c.pinned for c in listed] == [True, False, False]
    store.chat_list.pin(first.id, False)
    assert [c.title for c in store.list_conversations()] == ["third", "second", "first"]


# -- search ---------------------------------------------------------------------------------------------------------

def test_search_finds_the_message_by_a_word_its_stem_any_case_and_no_diacritics(store):
    chat, (question, answer) = chat_with(store, "Travel", "Where should I stay in Zürich?",
                                         "The hotels near the lake are RUNNING a winter offer.")
    chat_with(store, "Other", "Nothing about that here.")
    for query in ("zurich", "ZÜRICH", "Zurich stay", "run", "runs", "hotel", "offers"):
        hits = store.chat_list.search(query)
        assert [h.message_id for h in hits] and all(h.conversation_id == chat.id for h in hits), query
    hit = store.chat_list.search("hotel lake")[0]
    assert (hit.message_id, hit.role, hit.title) == (answer.id, "assistant", "Travel")
    assert [hit.snippet[a:b] for a, b in hit.marks] == ["hotels", "lake"]
    assert store.chat_list.search("hotel zurich") == []  # every word, in one message
    assert store.chat_list.search("zeppelin") == []


def test_the_word_being_typed_matches_as_a_prefix(store):
    chat_with(store, "Code", "Speculative decoding is fast")
    assert store.chat_list.search("decoding fas")[0].snippet.endswith("fast")
    assert store.chat_list.search("decoding fas ") == []  # a finished word is a whole word


def test_titles_match_before_messages_newest_message_first(store):
    older, (old,) = chat_with(store, "Kafka notes", "kafka partitions")
    newer, (new,) = chat_with(store, "Queues", "kafka consumers")
    hits = store.chat_list.search("Kafka")
    assert [(h.conversation_id, h.message_id) for h in hits] == [(older.id, None), (newer.id, new.id),
                                                                (older.id, old.id)]
    title = hits[0]
    assert title.snippet == "Kafka notes" and title.marks == ((0, 5),)


def test_title_hits_are_bounded_and_fold_diacritics(store):
    for n in range(MAX_TITLE_HITS + 5):
        store.create_conversation(f"Café {n}")
    hits = store.chat_list.search("cafe")
    assert len(hits) == MAX_TITLE_HITS and all(h.message_id is None for h in hits)
    assert hits[0].snippet[slice(*hits[0].marks[0])] == "Café"
    zurich, strasse, plain = (store.create_conversation(t) for t in ("Zurich trip", "Hauptstraße 5", "Plain"))
    assert [h.conversation_id for h in store.chat_list.search("ZÜRICH")] == [zurich.id]
    found = store.chat_list.search("strasse")
    assert [h.conversation_id for h in found] == [strasse.id] and found[0].marks == ((5, 11),)  # "straße"
    assert store.chat_list.search("plain cafe") == [] and plain.id


HOSTILE = ['"', '"foo', "*", "AND", "AND OR (", "NEAR(", "NEAR(a b)", "a:b", "^x", "-", "x" * 10_000, "word " * 5_000,
           "\x00", "\ud800", "", "   "]


def test_hostile_queries_never_raise(store):
    chat_with(store, "Notes", 'He said "foo" AND then NEAR(a b) * x')
    for query in HOSTILE:
        assert isinstance(store.chat_list.search(query), list), query[:20]
    assert store.chat_list.search('"foo')[0].marks  # the word in it is still found


def test_a_bad_limit_or_a_query_that_is_not_text_is_refused(store):
    with pytest.raises(StorageError, match="limit"):
        store.chat_list.search("foo", limit=0)
    with pytest.raises(StorageError, match="limit"):
        store.chat_list.search("foo", limit=True)
    with pytest.raises(StorageError, match="is text"):
        store.chat_list.search(b"foo")


def test_the_limit_bounds_the_message_hits(store):
    chat_with(store, "Many", *(f"apple number {n}" for n in range(30)))
    hits = store.chat_list.search("apple", limit=7)
    assert len(hits) == 7 and hits[0].snippet.endswith("29")  # the newest first


def test_the_index_follows_edits_and_deletions(store):
    chat, (message, other) = chat_with(store, "Edits", "the original wording", "unrelated reply")
    store.update_message(message.id, text="a rewritten sentence")
    assert store.chat_list.search("original") == []
    assert [h.message_id for h in store.chat_list.search("rewritten")] == [message.id]
    store.update_message(other.id, spans=[])  # saving spans leaves the text (and the index) as it was
    assert [h.message_id for h in store.chat_list.search("unrelated")] == [other.id]
    with store._writing() as session:
        session.execute(delete(Message).where(Message.id == other.id))
    assert store.chat_list.search("unrelated") == []
    store.delete_conversation(chat.id)
    assert store.chat_list.search("rewritten") == []


def test_snippets_escape_the_message_text(store):
    chat_with(store, "<b>Title</b>", "look: <script>alert('x')</script> & more <i>tags</i>")
    hit = [h for h in store.chat_list.search("script alert") if h.message_id is not None][0]
    html = hit.snippet_html("<mark>", "</mark>")
    assert "<script" not in html and "<i>" not in html and "<b>" not in html
    assert "&lt;<mark>script</mark>&gt;" in html and "&amp; more &lt;i&gt;tags&lt;/i&gt;" in html
    assert "<mark>script</mark>" in html and "<mark>alert</mark>" in html


def test_mark_characters_in_a_message_cannot_break_the_snippet(store):
    chat_with(store, "Marks", "odd \ue001 text \ue000 with <tags> around the needle")
    hit = store.chat_list.search("needle")[0]
    assert "\ue000" not in hit.snippet and "\ue001" not in hit.snippet
    assert "<tags>" not in hit.snippet_html() and all(0 <= a < b <= len(hit.snippet) for a, b in hit.marks)
