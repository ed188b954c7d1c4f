"""A long chat in the transcript: only what is near the view is drawn (issue 46).

Drawing a message (its Markdown, its spans) costs about a millisecond, so a chat of 150,000 messages cannot be drawn
when it opens. The transcript draws its last screen (FIRST_SCREEN messages) and a line above them; as the view
nears the top of what is drawn, the Pager draws the messages before it a page at a time, each page bounded by count
(PAGE_MESSAGES) and time (PAGE_SECONDS), after which the event loop runs (paints, input) before the next one. A page
drawn above keeps the view where it was: the scroll bar moves by the height drawn. The line at the top says
"Loading earlier messages…", then "Beginning of the chat".

Qt lays out the whole document again after a change near its top, so a page's cost grows with the document: the
document holds about MAX_DRAWN messages at most. Past that, the messages farthest from the view are taken out (at the
bottom while the user reads up, at the top on the way back down) and drawn again when the view nears them. The
bottom is never taken out while a reply streams or waits there.

Messages that are not drawn come from a MessagePages: the window's (ChatPages, over the open chat, reading older
messages from the database as they are needed), or a list (ListPages) for a transcript given its messages whole.
"""

from __future__ import annotations

import time
from typing import Sequence

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtGui import QTextBlockFormat, QTextCharFormat, QTextCursor

from .theme import current_theme

FIRST_SCREEN = 40  # messages drawn when a chat opens: its last screen, and some
PAGE_MESSAGES = 12  # messages drawn at most in one page
PAGE_SECONDS = 0.025  # a page stops drawing once this long has passed (one very long message may take longer)
MAX_DRAWN = 400  # messages the document holds, about: Qt's layout after a change near the top costs with its size
JUMP_BEFORE = 3  # messages drawn above one scrolled to that was not drawn (a search hit)
LOADING = "Loading earlier messages…"
BEGINNING = "Beginning of the chat"


class MessagePages:
    """Where a transcript finds the messages it has not drawn, as its MessageViews, in the chat's order. The base
    has none: a transcript without pages draws only what it is given."""

    def before(self, message_id: int | None, count: int) -> list:
        """Up to `count` messages just before `message_id`, oldest first ([] at the chat's start)."""
        return []

    def after(self, message_id: int | None, count: int) -> list:
        """Up to `count` messages just after `message_id`, oldest first ([] at the chat's end)."""
        return []

    def around(self, message_id: int, before: int, after: int) -> list | None:
        """The message `message_id` with up to `before` messages before it and `after` after it; None when it is not
        at hand (reach it first)."""
        return None

    def last(self, count: int) -> list:
        """The chat's last `count` messages."""
        return []

    def reach(self, message_id: int) -> bool | None:
        """One bounded step towards having `message_id` at hand: True once it is, False when it never will be (not
        on the branch shown), None when more steps are needed (a long chat read from its end)."""
        return self.around(message_id, 0, 0) is not None


class ListPages(MessagePages):
    """The messages of a list (a transcript given its chat whole), found by their message ids."""

    def __init__(self, views: Sequence):
        self.views = list(views)
        self._where = {v.message_id: i for i, v in enumerate(self.views) if v.message_id is not None}

    def _index(self, message_id: int | None) -> int | None:
        at = self._where.get(message_id)
        return at if at is not None and at < len(self.views) and self.views[at].message_id == message_id else None

    def before(self, message_id: int | None, count: int) -> list:
        at = self._index(message_id)
        return [] if at is None else self.views[max(0, at - count):at]

    def after(self, message_id: int | None, count: int) -> list:
        at = self._index(message_id)
        return [] if at is None else self.views[at + 1:at + 1 + count]

    def around(self, message_id: int, before: int, after: int) -> list | None:
        at = self._index(message_id)
        return None if at is None else self.views[max(0, at - before):at + 1 + after]

    def last(self, count: int) -> list:
        return self.views[-count:] if count else []


class Pager(QObject):
    """Draws a Transcript's messages a page at a time as its view moves (see the module's docstring). It works on
    the transcript's drawn `messages`, their `_starts` and `_draw_message`; `pages` is where the rest come from."""

    def __init__(self, transcript):
        super().__init__(transcript)
        self.transcript = transcript
        self.pages: MessagePages | None = None  # the window's; None: the list the transcript was given
        self.first_screen, self.max_drawn = FIRST_SCREEN, MAX_DRAWN
        self._source: MessagePages = MessagePages()
        self.more_above = self.more_below = False
        self.top_line = False  # the document begins with the LOADING / BEGINNING line
        self._target: int | None = None  # a message being reached (scroll_to), drawn around once at hand
        self._timer = QTimer(self, singleShot=True, interval=0)
        self._timer.timeout.connect(self._page)
        bar = transcript.verticalScrollBar()
        bar.valueChanged.connect(self.schedule)
        bar.rangeChanged.connect(self.schedule)

    # -- what is drawn when ---------------------------------------------------------------------------------------

    def reset(self, messages: list, source: MessagePages | None = None) -> list:
        """A chat drawn anew from `messages` (its last ones at least): returns the part to draw, its last screen;
        the rest is drawn as the view nears it. `source`: where messages around them come from (default: the
        window's pages, else `messages` themselves)."""
        self._target = None
        self._source = source or self.pages or ListPages(messages)
        drawn = messages[-self.first_screen:] if self.first_screen else list(messages)
        self.more_below = False
        self.more_above = len(drawn) < len(messages) or bool(
            drawn and self._source.before(drawn[0].message_id, 1))
        self.top_line = self.more_above
        return drawn

    def aligned(self, messages: list) -> list | None:
        """The part of `messages` (the chat from some message on, as the window has it) that continues what is
        drawn, from the first message drawn (all of them when none is); None when the chat must be drawn anew (what
        is drawn is not in it, or the chat's end is not drawn)."""
        drawn = self.transcript.messages
        if not drawn:  # the welcome text, or a chat just started: all of `messages` are drawn after it
            return messages
        if self.more_below or drawn[0].message_id is None:
            return None
        at = next((i for i, m in enumerate(messages) if m.message_id == drawn[0].message_id), None)
        if at is None or (at and not self.top_line):
            return None
        if self.pages is None:  # the list given stands for the chat: the messages before the drawn ones come from it
            self._source = ListPages(messages)
        return messages[at:]

    def at_end(self) -> bool:
        """Whether the chat's last message is drawn (a reply streams after it)."""
        return not self.more_below

    def last_screen(self) -> list:
        """The chat's last screen of messages (to draw anew when its end is wanted and not drawn)."""
        return self._source.last(self.first_screen)

    def begin_document(self) -> None:
        """Starts an empty document with the line at the top, when the chat has messages above those drawn."""
        if self.top_line:
            cursor = QTextCursor(self.transcript.document())
            block = QTextBlockFormat()
            block.setAlignment(Qt.AlignmentFlag.AlignHCenter)
            cursor.setBlockFormat(block)
            cursor.insertText(self._top_text(), _muted())

    def schedule(self, *_) -> None:
        """Draws a page soon (after the event loop has run) if the view is near an end of what is drawn."""
        if self._wanted() and not self._timer.isActive():
            self._timer.start()

    def scroll_to(self, message_id: int) -> bool:
        """Shows the message `message_id`, not drawn: the chat is drawn anew around it when it is at hand, else it
        is reached a step at a time (a long chat's older messages read) and then drawn. False when it is not in the
        chat."""
        reached = self._source.reach(message_id)
        if reached is False:
            return False
        self._target = message_id
        if reached:
            return self._draw_target()
        self._timer.start()
        return True

    # -- pages ----------------------------------------------------------------------------------------------------

    def _wanted(self) -> str | None:
        """"target", "above" or "below": what the next page draws, if anything."""
        t = self.transcript
        if self._target is not None:
            return "target"
        if not t.messages:
            return None
        bar, margin = t.verticalScrollBar(), t.viewport().height()
        if self.more_above and bar.value() <= margin:
            return "above"
        if self.more_below and bar.maximum() - bar.value() <= margin:
            return "below"
        return None

    def _page(self) -> None:
        wanted = self._wanted()
        if wanted == "target":
            reached = self._source.reach(self._target)
            if reached is None:
                self._timer.start()
                return
            if reached:
                self._draw_target()
            self._target = None
        elif wanted == "above":
            self._draw_above()
        elif wanted == "below":
            self._draw_below()
        self.schedule()

    def _draw_target(self) -> bool:
        """Draws the chat anew around the message being reached, and scrolls to it; False when it cannot (not at
        hand, or a reply streams or waits at the end)."""
        target, self._target = self._target, None
        views = self._source.around(target, JUMP_BEFORE, self.first_screen) or []
        t = self.transcript
        if not views or t._streaming or t._pending is not None:
            return False
        self.more_above = bool(self._source.before(views[0].message_id, 1))
        self.more_below = bool(self._source.after(views[-1].message_id, 1))
        self.top_line = self.top_line or self.more_above
        t.messages = views
        t._render_all()
        t._scroll_to_drawn(next(i for i, view in enumerate(views) if view.message_id == target))
        return True

    def _draw_above(self) -> None:
        """Draws a page of the messages before the first one drawn, at the top, keeping the view where it is."""
        t = self.transcript
        first = t.messages[0]
        views = self._source.before(first.message_id, PAGE_MESSAGES)
        if len(views) < PAGE_MESSAGES:
            self.more_above = False
        if views:
            with _StillView(t, 0):
                drawn = self._draw_at_top(views[::-1])
            t.messages[:0] = views[len(views) - drawn:]
            self.more_above = self.more_above or drawn < len(views)
        if not self.more_above:
            self._set_top_text(BEGINNING)
        self._take_out_below()

    def _draw_at_top(self, newest_first: list) -> int:
        """Draws messages (the nearest first) above the first one drawn, within the page's time; returns how many."""
        t, began = self.transcript, time.perf_counter()
        begin = t._starts[0]
        cursor = QTextCursor(t.document())
        cursor.beginEditBlock()  # one layout for the page, not one for each piece of each message
        starts: list[int] = []
        added = 0
        for view in newest_first:
            cursor.setPosition(begin)
            t._draw_message(cursor, view, is_last=False)
            length = cursor.position() - begin
            starts, added = [begin] + [s + length for s in starts], added + length
            if time.perf_counter() - began > PAGE_SECONDS:
                break
        cursor.endEditBlock()
        t._starts = starts + [s + added for s in t._starts]
        self._moved(added)
        return len(starts)

    def _draw_below(self) -> None:
        """Draws a page of the messages after the last one drawn, at the bottom (the view stays)."""
        t, began = self.transcript, time.perf_counter()
        views = self._source.after(t.messages[-1].message_id, PAGE_MESSAGES)
        if len(views) < PAGE_MESSAGES:
            self.more_below = False
        cursor = QTextCursor(t.document())
        cursor.beginEditBlock()
        for i, view in enumerate(views):
            last = not self.more_below and i == len(views) - 1
            t._append_message(view, is_last=last)
            t.messages.append(view)
            if time.perf_counter() - began > PAGE_SECONDS and not last:
                self.more_below = True
                break
        cursor.endEditBlock()
        self._take_out_above()

    def _take_out_below(self) -> None:
        """Takes the messages past MAX_DRAWN out of the bottom (none while a reply streams or waits there)."""
        t = self.transcript
        extra = len(t.messages) - self.max_drawn
        if extra <= 0 or t._streaming or t._pending is not None:
            return
        cursor = QTextCursor(t.document())
        cursor.setPosition(t._starts[-extra])
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        del t._starts[-extra:]
        del t.messages[-extra:]
        self.more_below = True

    def _take_out_above(self) -> None:
        """Takes the messages past MAX_DRAWN out of the top, keeping the view where it is."""
        t = self.transcript
        extra = len(t.messages) - self.max_drawn
        if extra <= 0 or not self.top_line:
            return
        with _StillView(t, extra):
            cursor = QTextCursor(t.document())
            cursor.setPosition(t._starts[0])
            cursor.setPosition(t._starts[extra], QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            gone = t._starts[extra] - t._starts[0]
            t._starts = [s - gone for s in t._starts[extra:]]
            del t.messages[:extra]
            self._moved(-gone)
        self.more_above = True
        self._set_top_text(LOADING)

    # -- the line at the top --------------------------------------------------------------------------------------

    def _top_text(self) -> str:
        return LOADING if self.more_above else BEGINNING

    def _set_top_text(self, text: str) -> None:
        """Writes `text` in the line at the top (if the document has one), the drawn messages' starts moved by the
        difference in length."""
        t = self.transcript
        if not self.top_line or not t._starts:
            return
        block = t.document().begin()
        if block.text() == text:
            return
        cursor = QTextCursor(block)
        cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(text, _muted())
        shift = cursor.position() - t._starts[0]  # the line ends where the first message's drawing begins
        t._starts = [s + shift for s in t._starts]
        self._moved(shift)

    def _moved(self, by: int) -> None:
        """The document changed above the drawn messages by `by` characters: what is marked at its end moves too
        (the streaming reply's region, the line saying why a reply waits)."""
        t = self.transcript
        if t._reply_at is not None:
            t._reply_at += by
        if t._pending is not None:
            t._pending += by


class _StillView:
    """Keeps the view on what it shows while messages are drawn or taken out above the drawn message `index`: the
    scroll bar moves by how far that message's header moved (its index after the change: moved by as many messages
    as were added or taken out)."""

    def __init__(self, transcript, index: int):
        self.transcript, self.index = transcript, index

    def _top(self, index: int) -> float:
        t = self.transcript
        block = t.document().findBlock(t._starts[index] + 1)
        return t.document().documentLayout().blockBoundingRect(block).top()

    def __enter__(self):
        t = self.transcript
        self.count, self.value = len(t._starts), t.verticalScrollBar().value()
        self.before = self._top(self.index)
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:
            return
        t = self.transcript
        index = self.index + len(t._starts) - self.count
        t.verticalScrollBar().setValue(self.value + round(self._top(index) - self.before))


def _muted() -> QTextCharFormat:
    muted = QTextCharFormat()
    muted.setForeground(current_theme().muted_text)
    muted.setFontItalic(True)
    return muted

