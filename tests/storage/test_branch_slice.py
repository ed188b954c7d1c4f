"""Part of a branch read without the rest of the chat (issue 46): a long chat's end, the messages before a given
one, and which messages lie above it on its branch, each equal to what reading the whole branch gives."""

import pytest

from specchat.core.errors import StorageError

from storage_helpers import make_run
from test_documents import HANDBOOK


def imported_chat(store, count: int, shown: int | None = None, parents: dict | None = None):
    """A chat of `count` messages imported at once (one branch, unless `parents` gives some message another
    parent: {index: parent index}), with replies' spans; the branch on screen ends at `shown` (None: the last)."""
    messages = []
    for i in range(count):
        parent = (parents or {}).get(i, i - 1 if i else None)
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "text": f"message {i}", "parent": parent,
                         "spans": [[0, 7, "draft"]] if role == "assistant" else None})
    data = {"format": "specchat-conversation", "version": 3, "title": "Long", "messages": messages, "shown": shown}
    return store.import_json(data)


def test_the_end_of_a_long_branch_is_what_the_whole_branch_ends_with(store):
    chat = imported_chat(store, 1200)
    info, whole, runs = store.chat(chat.id)
    for last in (1, 37, 1200, 5000):
        tail_info, tail, tail_runs = store.chat(chat.id, last=last)
        assert tail == whole[-last:] and tail_info == info and tail_runs == {}
    assert store.chat(chat.id, last=0)[1] == []
    _, below, _ = store.chat(chat.id, last=1000, since=1150)
    assert below == whole[1150:]


def test_the_messages_before_one_come_in_order_with_their_siblings_and_runs(store):
    # 0 → 1 → 2 → 3 → 4 → 5, with 6 a second reply to 2 (a regenerated one) on screen: 0 1 2 6
    chat = imported_chat(store, 7, shown=6, parents={6: 2})
    reply = store.chat(chat.id)[1][2]
    store.record_run(make_run(conversation_id=chat.id, message_id=reply.id, new_tokens=1))
    run = store.record_run(make_run(conversation_id=chat.id, message_id=reply.id, new_tokens=2))  # the latest
    _, whole, runs = store.chat(chat.id)
    assert [m.text for m in whole] == ["message 0", "message 1", "message 2", "message 6"]
    assert whole[-1].siblings == (whole[2].id + 1, whole[-1].id)  # message 3 and message 6 share message 2
    before, before_runs = store.earlier(chat.id, whole[-1].id, 2)
    assert before == whole[1:3] and before_runs == {reply.id: runs[reply.id]}
    assert runs[reply.id].id == run and runs[reply.id].parts == 2
    assert store.earlier(chat.id, whole[-1].id, 100)[0] == whole[:3]
    assert store.earlier(chat.id, whole[0].id, 5) == ([], {})
    other = store.create_conversation("Other")
    with pytest.raises(StorageError, match="not in conversation"):
        store.earlier(other.id, whole[-1].id, 2)


def test_a_leaf_gone_reads_as_the_newest_message_as_chat_tree_does(store):
    chat = imported_chat(store, 6, shown=3)
    _, shown, _ = store.chat(chat.id)
    assert store.chat(chat.id, last=2)[1] == shown[-2:] and shown[-1].text == "message 3"
    store.tree.delete(chat.id, shown[-1].id)  # the leaf on screen goes: its parent's newest branch is shown
    assert store.chat(chat.id, last=50)[1] == store.chat(chat.id)[1]


def test_which_documents_messages_lie_above_a_message(store):
    chat = imported_chat(store, 40, parents={20: 10})  # 10 → 11 … 19 and 10 → 20 … 39 (on screen)
    ids = [m.id for m in store.chat(chat.id)[1]]  # 0 … 10, 20 … 39
    first = ids[0]
    off_branch = first + 15  # message 15, on the branch left behind
    store.documents.attach(first + 3, HANDBOOK)
    assert store.on_branch_above(ids[-1], [first + 3, off_branch, ids[-1], ids[-5]]) == {first + 3, ids[-5]}
    assert store.on_branch_above(ids[0], [first + 3]) == set()
    assert store.on_branch_above(ids[-1], []) == set()
