"""kill -9 of the app mid-reply: what is on disk afterwards, and that the next start opens it as usual."""

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from specchat.storage import Store, open_database

CHILD = Path(__file__).resolve().parent / "app_mid_reply.py"


def killed_mid_reply(path, tmp_path) -> int:
    """Runs the app on the database at `path` (app_mid_reply.py: it regenerates the newest chat's last reply) until
    a partial reply is on disk, streams a little longer, and kills it with SIGKILL; returns the length of the reply
    saved when it said so."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECCHAT_DATA_DIR": str(tmp_path)}
    child = subprocess.Popen([sys.executable, str(CHILD), str(path)], stdout=subprocess.PIPE, text=True,
                             env=env)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 180)  # a hung child fails the test, not the run
        line = child.stdout.readline() if ready else "no line within 180 s"  # SAVED <length>: a save is on disk
        assert line.startswith("SAVED"), line
        saved = int(line.split()[1])
        time.sleep(1.2)  # streaming goes on, with more partial saves
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return saved


def test_a_kill_mid_reply_keeps_every_branch_the_question_and_the_reply_so_far(tmp_path):
    """The app killed while it regenerates a reply (a new branch): the reply is kept up to its last save with its
    run, the tree is whole, every earlier version one flip away, and it all survives a restart and an export/import
    round trip."""
    path = tmp_path / "specchat.db"
    store = Store(open_database(path))
    chat = store.create_conversation("Fox")
    first = store.add_message(chat.id, "user", "The quick brown fox")
    store.add_message(chat.id, "assistant", "jumps over the lazy dog.")
    edited = store.add_message(chat.id, "user", "The slow red fox", sibling_of=first.id)
    answer = store.add_message(chat.id, "assistant", "naps in the sun.")
    store.close()
    saved = killed_mid_reply(path, tmp_path)

    store = Store(open_database(path))  # the next start: opens, migrates nothing, integrity intact
    try:
        with store.database.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
        question, reply = store.messages(chat.id)
        assert question.id == edited.id and question.siblings == (first.id, edited.id)
        assert reply.siblings == (answer.id, reply.id) and store.conversation(chat.id).message_count == 5
        # What a kill keeps: the reply up to its last save (at most a second old), and its run's statistics as of
        # that save, both still marked as streaming...
        assert reply.role == "assistant" and reply.stopped and len(reply.text) >= saved
        run = store.run_for_message(reply.id)
        assert reply.finish_reason == run.finish_reason == "streaming"
        assert run.new_tokens >= saved and run.target_passes > 0 and run.draft_proposed > 0
        # ...until the next start, which marks them interrupted (ui/app.py open_store).
        assert store.recover_interrupted() == 1 and store.recover_interrupted() == 0
        (_, reply) = store.messages(chat.id)
        assert reply.finish_reason == store.run_for_message(reply.id).finish_reason == "interrupted"
        store.tree.show_branch(chat.id, first.id)
        assert [m.text for m in store.messages(chat.id)] == ["The quick brown fox", "jumps over the lazy dog."]
        copy = store.import_json(store.export_json(chat.id))
        assert store.export_json(copy.id)["messages"] == store.export_json(chat.id)["messages"]
    finally:
        store.close()
