"""The open chat's messages as the transcript's pages (transcript_pages.MessagePages), issue 46.

The window holds its open chat (chats.OpenChat) from its end; the transcript draws the messages near its view. These
pages give it the messages around those it has drawn, as MessageViews made from the open chat in memory, and read
the chat's older messages from the database when the view goes up past what is held (OpenChat.load_earlier, a
READ_STEP at a time). A message is found by its depth in the branch (OpenChat.index), not searched for.
"""

from __future__ import annotations

from typing import Callable

from ..chats import OpenChat
from ..chats.conversations import READ_STEP
from ..core.errors import StorageError
from .transcript import MessageView
from .transcript_pages import FIRST_SCREEN, MessagePages


class ChatPages(MessagePages):
    """`chat()`: the window's open chat (None: none open); `view(message)`: a held message as the transcript shows
    it; `drawn()`: the id of the first message the transcript has drawn (None: none); `trouble(text)`: says a read
    the database refused."""

    def __init__(self, chat: Callable[[], OpenChat | None], view: Callable[[object], MessageView],
                 drawn: Callable[[], int | None], trouble: Callable[[str], None]):
        self._chat, self._view, self._drawn, self._trouble = chat, view, drawn, trouble

    def shown(self) -> list[MessageView]:
        """The views the transcript is given when the chat changes: from its first drawn message when the chat
        holds it (what is drawn above it stays), else the chat's last screen."""
        chat = self._chat()
        if chat is None:
            return []
        drawn = self._drawn()
        at = chat.index(drawn) if drawn is not None else None
        start = at if at is not None else max(0, len(chat.messages) - FIRST_SCREEN)
        return [self._view(m) for m in chat.messages[start:]]

    def before(self, message_id: int | None, count: int) -> list[MessageView]:
        chat = self._chat()
        at = None if chat is None or message_id is None else chat.index(message_id)
        if at is None:
            return []
        if at < count and chat.earlier and self._read(chat):
            at = chat.index(message_id)
        return [self._view(m) for m in chat.messages[max(0, at - count):at]]

    def after(self, message_id: int | None, count: int) -> list[MessageView]:
        chat = self._chat()
        at = None if chat is None or message_id is None else chat.index(message_id)
        return [] if at is None else [self._view(m) for m in chat.messages[at + 1:at + 1 + count]]

    def around(self, message_id: int, before: int, after: int) -> list[MessageView] | None:
        chat = self._chat()
        at = None if chat is None else chat.index(message_id)
        if at is None:
            return None
        return [self._view(m) for m in chat.messages[max(0, at - before):at + 1 + after]]

    def last(self, count: int) -> list[MessageView]:
        chat = self._chat()
        return [] if chat is None or not count else [self._view(m) for m in chat.messages[-count:]]

    def reach(self, message_id: int) -> bool | None:
        """Reads a READ_STEP of the chat's older messages unless `message_id` is held: True once it is, False when
        it cannot be (no chat, or the chat's first message is held and it is not among them)."""
        chat = self._chat()
        if chat is None:
            return False
        if chat.index(message_id) is not None:
            return True
        if not chat.earlier or not self._read(chat):
            return False
        return True if chat.index(message_id) is not None else None

    def _read(self, chat: OpenChat) -> bool:
        """Reads a READ_STEP more of the chat's older messages; False when none came (or the database refused)."""
        try:
            return bool(chat.load_earlier(READ_STEP))
        except StorageError as error:
            self._trouble(f"The chat's earlier messages could not be read ({error}).")
            return False
