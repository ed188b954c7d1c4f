"""The GUI thread and a generation thread write at the same time: every write lands, positions stay unique."""

import threading

from storage_helpers import make_run

WRITES = 50


def test_two_threads_writing_concurrently(store):
    chat = store.create_conversation()
    shared = store.create_conversation("shared")
    barrier = threading.Barrier(2)
    errors = []

    def writer(name):
        try:
            barrier.wait()
            own = store.create_conversation(name)
            for i in range(WRITES):
                message = store.add_message(shared.id, "user", f"{name} {i}")
                store.update_message(message.id, text=f"{name} {i}!")
                store.record_run(make_run(conversation_id=chat.id, message_id=message.id))
                store.add_message(own.id, "assistant", str(i))
                store.list_conversations(name)
        except Exception as error:  # noqa: BLE001 - reported to the main thread below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("gui", "worker")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    messages = store.messages(shared.id)
    assert [m.position for m in messages] == list(range(2 * WRITES))
    assert sorted(m.text for m in messages) == sorted(f"{n} {i}!" for n in ("gui", "worker") for i in range(WRITES))
    assert store.conversation_stats(chat.id).runs == 2 * WRITES
    assert sorted(c.message_count for c in store.list_conversations()) == [0, WRITES, WRITES, 2 * WRITES]
