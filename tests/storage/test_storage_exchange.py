"""Export to Markdown and JSON, and JSON import: round trip and refusal of malformed input."""

import json

import pytest

from specchat.core.errors import StorageError


@pytest.fixture
def chat(store):
    chat = store.create_conversation("Grammar help", system_prompt="Be brief.")
    store.add_message(chat.id, "user", "Fix: me and him goes")
    store.add_message(chat.id, "assistant", "He and I go.", spans=[[0, 6, "target"], [6, 12, "draft"]],
                      finish_reason="eos")
    store.add_message(chat.id, "user", "Longer please")
    store.add_message(chat.id, "assistant", "He and I go to", stopped=True, finish_reason="cancelled")
    return chat


def test_export_markdown(store, chat):
    text = store.export_markdown(chat.id)
    assert text.startswith("# Grammar help\n")
    assert "**System prompt**\n\nBe brief." in text
    assert "**User**\n\nFix: me and him goes" in text
    assert "**Assistant**\n\nHe and I go." in text
    assert "**Assistant** (stopped)\n\nHe and I go to" in text
    assert text.index("me and him") < text.index("He and I go.") < text.index("Longer please")


def test_export_json_format(store, chat):
    data = store.export_json(chat.id)
    json.dumps(data)  # serialisable as is
    assert (data["format"], data["version"], data["title"], data["system_prompt"]) == \
        ("specchat-conversation", 3, "Grammar help", "Be brief.")
    assert data["documents"] == [] and data["shown"] == 3
    assert [m["parent"] for m in data["messages"]] == [None, 0, 1, 2]
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "user", "assistant"]
    assert data["messages"][1]["spans"] == [[0, 6, "target"], [6, 12, "draft"]]
    assert data["messages"][3]["stopped"] is True and data["messages"][3]["finish_reason"] == "cancelled"
    assert set(data["messages"][0]) == {"role", "text", "created_at", "stopped", "spans", "finish_reason", "parent"}


def test_json_round_trip(store, chat):
    exported = store.export_json(chat.id)
    imported = store.import_json(json.loads(json.dumps(exported)))
    assert imported.id != chat.id and imported.message_count == 4
    assert (imported.title, imported.system_prompt, imported.created_at) == \
        ("Grammar help", "Be brief.", store.conversation(chat.id).created_at)
    assert store.export_json(imported.id) == exported
    assert store.list_conversations()[0].id == imported.id  # an import shows up at the top
    assert store.import_json(json.dumps(exported)).message_count == 4  # JSON text works too


@pytest.mark.parametrize("data, message", [
    ("{not json", "not valid JSON"),
    ([1, 2], "specchat-conversation"),
    ({"format": "something-else", "version": 1}, "specchat-conversation"),
    ({"format": "specchat-conversation", "version": 4, "title": "t", "messages": []}, "version 4"),
    ({"format": "specchat-conversation", "version": 3, "title": "t",
      "messages": [{"role": "user", "text": "x", "parent": 0}]}, "earlier message"),
    ({"format": "specchat-conversation", "version": 3, "title": "t",
      "messages": [{"role": "user", "text": "x"}, {"role": "user", "text": "y", "parent": True}]}, "parent"),
    ({"format": "specchat-conversation", "version": 3, "title": "t", "shown": 1,
      "messages": [{"role": "user", "text": "x"}]}, "shown"),
    ({"format": "specchat-conversation", "version": 1, "title": "t", "messages": "hi"}, "messages"),
    ({"format": "specchat-conversation", "version": 1, "title": "", "messages": []}, "title"),
    ({"format": "specchat-conversation", "version": 1, "title": "t", "messages": [{"role": "wizard", "text": "x"}]},
     "role"),
    ({"format": "specchat-conversation", "version": 1, "title": "t", "messages": [{"role": "user", "text": 5}]},
     "text"),
    ({"format": "specchat-conversation", "version": 1, "title": "t",
      "messages": [{"role": "user", "text": "x", "spans": [[0, 5, "draft"]]}]}, "outside the text"),
    ({"format": "specchat-conversation", "version": 1, "title": "t",
      "messages": [{"role": "user", "text": "x", "created_at": "yesterday"}]}, "ISO 8601"),
    ({"format": "specchat-conversation", "version": 1, "title": "t",
      "messages": [{"role": "user", "text": "x", "stopped": "no"}]}, "stopped"),
])
def test_malformed_import_is_refused(store, data, message):
    with pytest.raises(StorageError, match=message):
        store.import_json(data)
    assert store.list_conversations() == []  # nothing half-imported


def test_an_imported_chat_feeds_past_replies_only_once_opened(store, chat):
    imported = store.import_json(store.export_json(chat.id))
    assert store.conversation(chat.id).in_history and not imported.in_history
    assert store.history_replies() == ["He and I go.", "He and I go to"]  # oldest first; the import left out
    assert store.include_in_history(imported.id) == ["He and I go.", "He and I go to"]  # to add to a live index
    assert store.include_in_history(imported.id) == []  # already in
    assert sorted(store.history_replies()) == sorted(["He and I go.", "He and I go to"] * 2)  # by time written
    assert store.history_replies(limit=1) == ["He and I go to"]  # the newest


@pytest.mark.parametrize("field, value", [
    ("created_at", "9" * 20_000_000),  # issue 37: a 20,971,584-character message
    ("role", "x" * 1_000_000),
    ("version", "2" * 1_000_000),
    ("origin", "y" * 1_000_000),
    ("start", 10 ** 4000),
    ("role", list(range(100_000))),
])
def test_an_error_quotes_a_huge_value_only_in_part(store, field, value):
    message = {"role": "user", "text": "x"}
    document = {"format": "specchat-conversation", "version": 1, "title": "t", "messages": [message]}
    if field == "version":
        document["version"] = value
    elif field in ("origin", "start"):
        message["spans"] = [[value, 1, "draft"] if field == "start" else [0, 1, value]]
    else:
        message[field] = value
    with pytest.raises(StorageError) as raised:
        store.import_json(document)
    assert len(str(raised.value)) < 200, str(raised.value)[:300]
    assert store.list_conversations() == []


def test_an_import_reports_how_far_it_is(store, monkeypatch):
    from specchat.storage import exchange

    monkeypatch.setattr(exchange, "PROGRESS_EVERY", 4)
    messages = [{"role": ("user", "assistant")[i % 2], "text": f"m{i}"} for i in range(10)]
    reports = []
    imported = store.import_json({"format": "specchat-conversation", "version": 1, "title": "t",
                                  "messages": messages}, reports.append)
    assert [(r.phase, r.done, r.total) for r in reports] == [
        ("checking", 4, 10), ("checking", 8, 10), ("checking", 10, 10), ("preparing", 4, 10), ("preparing", 8, 10),
        ("writing", 4, 10), ("writing", 8, 10), ("writing", 10, 10)]
    assert [m.text for m in store.messages(imported.id)] == [f"m{i}" for i in range(10)]  # in order, all of them
    assert [m.position for m in store.messages(imported.id)] == list(range(10))
