"""Opening a chat of 150,000 messages in the real window (issue 46), and how long the GUI thread stalls meanwhile.

One process: a database with one imported chat of N messages (made once, through Store.import_json, and kept in
--db), the window on it with no model loaded (offscreen unless a display is set), the app's garbage collection on
the GUI thread (ui/gc_guard.py), and a heartbeat: a 10 ms QTimer whose longest gap between two ticks is the longest
the GUI thread was busy. Prints one JSON line:

- open_s: from the open_conversation call to the transcript's first paint after it (the last screen drawn);
- open_first_s: the same for the chat's first opening (an imported chat joins the past replies then);
- scroll: scrolling up a screen at a time, every 20 ms, until SCROLLED messages above the first screen are drawn:
  the time, the messages drawn then and the longest stall;
- top: a search hit at the chat's first message (Transcript.scroll_to_message): the time until it is drawn
  (every older message read from the database on the way, a page at a time) and the longest stall;
- down: from the top, scrolling down a screen at a time for SCROLLED messages: the time and the longest stall;
- read_whole_s: reading the whole branch as opening a chat did before (Conversations.open(last=None)), for scale.

    QT_QPA_PLATFORM=offscreen .venv/bin/python docs/measure/large_chat.py --db /tmp/large-chat.db
"""

import argparse
import json
import time
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication

from specchat.storage import Store, open_database
from specchat.ui.gc_guard import GuiThreadCollector
from specchat.ui.main_window import MainWindow
from specchat.ui.session import ChatSession
from specchat.ui.settings import AppSettings

SCROLLED = 3000


def chat_json(count: int) -> dict:
    """A chat of `count` messages: questions, and Markdown replies (a list, code, bold) with drafted spans. The first
    question mentions the harbour, the one in the middle the lighthouse (no other message does)."""
    messages, middle = [], count // 4 * 2
    for i in range(count):
        if i % 2 == 0:
            place = "harbour" if i == 0 else "lighthouse" if i == middle else "plan"
            messages.append({"role": "user", "text": f"Question {i // 2}: how does step {i} of the {place} work, "
                                                     "and what should I check before the next one?"})
            continue
        text = (f"Step **{i // 2}** works in three parts:\n\n- read the `input_{i}` file and check its size;\n"
                f"- run the check, which takes about {i % 7 + 1} seconds;\n- write the result.\n\nBefore the next "
                "step, make sure the result file exists and is not empty. If it is, run the step again.")
        messages.append({"role": "assistant", "text": text, "spans": [[0, 20, "draft"], [40, 90, "draft"]],
                         "finish_reason": "eos"})
    return {"format": "specchat-conversation", "version": 2, "title": f"Large chat ({count:,} messages)",
            "messages": messages}


class Heartbeat(QObject):
    """A 10 ms timer's ticks: the longest gap between two of them since `restart` is the longest stall."""

    def __init__(self):
        super().__init__()
        self.timer = QTimer(self, interval=10)
        self.timer.timeout.connect(self._tick)
        self.restart()
        self.timer.start()

    def restart(self) -> None:
        self.last, self.longest = time.perf_counter(), 0.0

    def _tick(self) -> None:
        now = time.perf_counter()
        self.longest, self.last = max(self.longest, now - self.last), now


class FirstPaint(QObject):
    """The time of the first paint of a widget after `arm`."""

    def __init__(self, widget):
        super().__init__()
        self.at = None
        widget.installEventFilter(self)

    def arm(self) -> None:
        self.at = None

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.Paint and self.at is None:
            self.at = time.perf_counter()
        return False


def wait(app: QApplication, until, limit_s: float) -> None:
    ends = time.perf_counter() + limit_s
    while not until() and time.perf_counter() < ends:
        app.processEvents()
        time.sleep(0.001)


def timed_open(app, window, painted, conversation_id: int) -> float:
    painted.arm()
    began = time.perf_counter()
    window.open_conversation(conversation_id)
    wait(app, lambda: painted.at is not None, 30)
    return painted.at - began


def scroll(app, window, heartbeat, direction: int, messages: int) -> dict:
    """Scrolls a screen at a time every 20 ms (up: direction -1) until `messages` more are drawn on that side, or
    the chat's end. The imported chat's message ids follow each other, so the ids at the edge count them."""
    transcript, pager = window.transcript, window.transcript.pager
    bar = transcript.verticalScrollBar()

    def edge() -> int:
        return transcript.messages[0 if direction < 0 else -1].message_id

    start = edge()
    heartbeat.restart()
    began = time.perf_counter()
    while abs(edge() - start) < messages and (pager.more_above if direction < 0 else pager.more_below):
        bar.setValue(bar.value() + direction * transcript.viewport().height())
        step_ends = time.perf_counter() + 0.02
        wait(app, lambda: time.perf_counter() >= step_ends, 1)
    return {"s": round(time.perf_counter() - began, 2), "messages": abs(edge() - start),
            "longest_stall_ms": round(heartbeat.longest * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=150_000)
    parser.add_argument("--db", type=Path, default=Path("/tmp/large-chat.db"))
    args = parser.parse_args()
    app = QApplication([])
    GuiThreadCollector(app).start()  # as the app runs: every collection on this thread, once a second at most
    fresh = not args.db.exists()
    store = Store(open_database(args.db))
    if fresh:
        made = time.perf_counter()
        store.import_json(chat_json(args.messages))
        print(f"made {args.db} in {time.perf_counter() - made:.1f} s", flush=True)
    info = next(c for c in store.list_conversations() if c.message_count == args.messages)
    first_time = not info.in_history
    session = ChatSession(store, AppSettings(), load_models=False)
    window = MainWindow(session)
    window.resize(1100, 720)
    window.show()
    heartbeat, painted = Heartbeat(), FirstPaint(window.transcript.viewport())
    wait(app, lambda: False, 0.5)
    opened = timed_open(app, window, painted, info.id)
    figures = {"messages": args.messages, ("open_first_s" if first_time else "open_s"): round(opened, 3)}
    if first_time:
        window.new_conversation()
        wait(app, lambda: False, 0.3)
        figures["open_s"] = round(timed_open(app, window, painted, info.id), 3)
    wait(app, lambda: False, 0.3)
    figures["scroll"] = scroll(app, window, heartbeat, -1, SCROLLED)
    first = store.earlier(info.id, window.transcript.messages[0].message_id, args.messages)[0][0].id
    heartbeat.restart()
    began = time.perf_counter()
    window.transcript.scroll_to_message(first)
    wait(app, lambda: window.transcript.messages and window.transcript.messages[0].message_id == first, 600)
    figures["top"] = {"s": round(time.perf_counter() - began, 2),
                      "longest_stall_ms": round(heartbeat.longest * 1000, 1)}
    figures["down"] = scroll(app, window, heartbeat, 1, SCROLLED)
    began = time.perf_counter()
    window.conversations.open(info.id, last=None)
    figures["read_whole_s"] = round(time.perf_counter() - began, 2)
    print(json.dumps(figures))
    window.close()


if __name__ == "__main__":
    main()
