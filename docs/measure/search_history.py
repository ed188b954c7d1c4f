"""Searching the history: the sidebar's search (ChatList.search, over the FTS5 index `messages_fts`) against the scan
the search box ran before issue 46 (Store.list_conversations(search): every message's text case-folded and searched
for the substring), on a database of CHATS chats with MESSAGES messages in all; and what listing the chats and
building the sidebar's tree model of them costs.

    QT_QPA_PLATFORM=offscreen .venv/bin/python docs/measure/search_history.py [--chats 10000] [--messages 100000]

The messages are made-up English-like text (common words and a long tail of rare ones, Zipf-distributed, 8 to 120
words each, seeded), a few with "lighthouse keeper" planted in them. Each query is timed REPEATS times after a first
run; the median is printed (docs/performance.md, "Searching the history (issue 46)").
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import insert

from specchat.storage import Store, open_database
from specchat.storage.tables import Conversation, Message

REPEATS = 5
COMMON = """model reply token draft speed the a to of and in is that for it with as on be this are by was or not we
can you have from at your which an will but if all would there their what so when about more one how out up do
time use just like other than then some could into them these see only its also after first well way new want
because any work most day need know take get make good look thing think year over back people give come these
python function data file code test error memory cache value list prompt server window chat message search folder
""".split()
QUERIES = [("a common word", "model"), ("two common words", "python error"), ("a rare phrase", "lighthouse keeper"),
           ("a word being typed", "serv"), ("no match", "zeppelin")]


def vocabulary(rng: random.Random, rare: int = 20_000) -> tuple[list[str], list[float]]:
    """The common words then `rare` made-up ones, with their cumulative Zipf weights (1/rank)."""
    syllables = ["ka", "lo", "mi", "ren", "tor", "vel", "sa", "qui", "dan", "pe", "rox", "ul", "form", "ing", "ance"]
    words = COMMON + ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(rare)]
    return words, list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(words))))


def build(path: Path, chats: int, messages: int, seed: int = 46) -> Store:
    """A database of `chats` chats sharing `messages` messages (each chat one branch), inserted in bulk."""
    rng = random.Random(seed)
    words, cumulative = vocabulary(rng)
    store = Store(open_database(path))
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    per_chat = max(1, messages // chats)
    planted = set(rng.sample(range(messages), 12))
    conversations = [(c + 1, " ".join(rng.choices(words[:200], k=rng.randint(2, 6))).capitalize(),
                      start + timedelta(minutes=c)) for c in range(chats)]
    rows = []
    for n in range(messages):
        chat, position = min(n // per_chat, chats - 1), n % per_chat
        text = " ".join(rng.choices(words, cum_weights=cumulative, k=rng.randint(8, 120)))
        if n in planted:
            text += " and the lighthouse keeper waved."
        rows.append((n + 1, chat + 1, position, n if position else None, ("user", "assistant")[position % 2], text,
                     start + timedelta(seconds=n)))
    with store._writing() as session:  # in bulk, as plain rows (the FTS5 index follows by its triggers)
        session.execute(insert(Conversation), [{"id": i, "title": t, "created_at": u, "updated_at": u}
                                               for i, t, u in conversations])
        session.execute(insert(Message), [dict(zip(("id", "conversation_id", "position", "parent_id", "role", "text",
                                                    "created_at"), row)) for row in rows])
    return store


def timed(call, repeats: int = REPEATS) -> tuple[float, object]:
    """The median wall time (ms) of `repeats` calls after a first one, and the last call's result."""
    result = call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        store = build(Path(folder) / "history.db", args.chats, args.messages)
        print(f"{args.chats:,} chats, {args.messages:,} messages, built and indexed in "
              f"{time.perf_counter() - started:.1f} s")
        print(f"{'query':<40} {'FTS5 search':>11} {'hits':>5} {'the scan':>10} {'chats':>6}")
        for label, query in QUERIES:
            fts_ms, hits = timed(lambda: store.chat_list.search(query, 200))
            scan_ms, chats = timed(lambda: store.list_conversations(query), repeats=3)
            print(f"{label + ' (' + query + ')':<40} {fts_ms:8.1f} ms {len(hits):5} {scan_ms:7.1f} ms {len(chats):6}")
        list_sidebar(store)
        store.close()


def list_sidebar(store: Store) -> None:
    """Reading every chat and folder, and building the sidebar's tree model over them."""
    from PySide6.QtWidgets import QApplication

    from specchat.ui.chat_list_model import ChatTreeModel

    app = QApplication.instance() or QApplication([])
    model = ChatTreeModel()
    read_ms, chats = timed(lambda: store.list_conversations(), repeats=3)
    folders = store.chat_list.folders()
    model_ms, _ = timed(lambda: model.set_chats(chats, folders), repeats=3)
    print(f"the sidebar: {len(chats):,} chats read in {read_ms:.1f} ms, the tree model built in {model_ms:.1f} ms")
    del app


if __name__ == "__main__":
    main()
