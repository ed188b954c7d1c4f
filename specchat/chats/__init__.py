"""The chats behind the window, without Qt: conversations and the open chat (conversations.py), a reply from Enter
to its rows (reply_controller.py), a streaming reply's message and run rows (recorder.py), what every run runs with
(run_context.py), the runs' records and figures (run_book.py) and the race's saved comparisons (comparisons.py). It
reads and writes through specchat.storage and never imports Qt or specchat.ui, so the window's storage work is
testable headless.

    conversations = Conversations(store)
    chat = OpenChat.of(conversations.start("Hello"))
    chat.add(conversations.add_user_message(chat.conversation_id, "Hello"))
    replies = ReplyController(ReplyRecorder(store, RunBook(store, app_session_id)))
    began = replies.start(chat, engine)  # the model thread streams began.job; then, with each frame's StepBatch:
    drawn = replies.steps(batch, now)    # and at the end replies.finish(result), or replies.fail(message)
"""

from .comparisons import Comparisons
from .conversations import Conversations, OpenChat, title_for
from .recorder import RecordedReply, ReplyRecorder, stopped_by_user
from .reply_controller import ReplyBegan, ReplyController, ReplyEnded, ReplyEngine, ReplyJob, StepBatch, StepsArrived
from .reply_spans import ReplySpans
from .run_book import ENDINGS, RunBook
from .run_context import RunContext, RunModels

__all__ = [
    "ENDINGS", "Comparisons", "Conversations", "OpenChat", "RecordedReply",
    "ReplyBegan", "ReplyController", "ReplyEnded", "ReplyEngine", "ReplyJob", "ReplyRecorder", "ReplySpans",
    "RunBook", "RunContext", "RunModels", "StepBatch", "StepsArrived", "stopped_by_user", "title_for",
]
