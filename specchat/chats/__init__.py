"""The chats behind the window, without Qt: conversations and their messages (conversations.py), a streaming
reply's message and run rows (recorder.py), and the runs' records and figures (run_book.py). It reads and writes
through specchat.storage and never imports Qt or specchat.ui, so the window's storage work is testable headless.

    conversations = Conversations(store)
    chat = conversations.start("Hello")
    conversations.add_user_message(chat.id, "Hello")
    recorder = ReplyRecorder(store, RunBook(store, app_session_id))
    reply = recorder.begin(chat.id, prompt_tokens, seed, context)
    recorder.partial(reply, text, spans, stats)  # now and then while it streams
    recorder.finish(reply, result, spans)         # or recorder.fail(reply, text, spans)
"""

from ..storage import StorageError
from ..storage.records import INTERRUPTED, STREAMING
from .conversations import Conversations, title_for
from .recorder import RecordedReply, ReplyRecorder, stopped_by_user
from .run_book import ENDINGS, ReplyContext, RunBook, RunSettings

__all__ = [
    "ENDINGS", "INTERRUPTED", "STREAMING", "Conversations", "RecordedReply", "ReplyContext", "ReplyRecorder",
    "RunBook", "RunSettings", "StorageError", "stopped_by_user", "title_for",
]
