"""The chats the window lists and opens: their titles, system prompts and messages in the Store, and the open chat
kept in memory (OpenChat), so that a reply neither re-reads what it has just written nor asks for its footers one
by one. No Qt.

Every method of Conversations is one unit of work on the Store (one short database session) and raises StorageError
when the database refuses it or the chat is gone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..core.errors import StorageError
from ..documents.document import Document
from ..engine.chat_engine import PromptFitter
from ..engine.chat_prompt import Message
from ..storage.records import ConversationInfo, MessageInfo
from .context_plan import ChatDocument, PromptPlan, Search, Source, counter_for, plan_prompt, stored_sources
from .run_book import footer_text

UNFITTED_WINDOW = 1 << 30  # a remote engine fits the prompt itself: the plan keeps everything

TITLE_CHARS = 48  # a new chat is titled with the first line of its first message, cut to this length


def title_for(first_message: str) -> str:
    """The title of a chat started with `first_message`: its first line, cut to TITLE_CHARS with an ellipsis."""
    line = first_message.splitlines()[0] if first_message.strip() else ""
    return line[:TITLE_CHARS] + ("…" if len(line) > TITLE_CHARS else "")


@dataclass
class OpenChat:
    """The chat the window shows, as stored: read once when it is opened (Conversations.open), then kept up to date
    by what is written to it (each write returns its row), so a reply reads nothing back.

    footers: the line under each reply (by message id), from the runs read with the chat or just written.
    stale: a write failed midway (the database refused a reply), so what is stored is unsure: the chat is read
    again before its next reply."""

    conversation_id: int
    system_prompt: str | None = None
    messages: list[MessageInfo] = field(default_factory=list)
    footers: dict[int, str] = field(default_factory=dict)
    in_history: bool = True  # its replies may feed the history drafter (an imported chat: once opened)
    stale: bool = False
    documents: list[ChatDocument] = field(default_factory=list)  # attached to its messages, in order
    sources: dict[int, tuple[Source, ...]] = field(default_factory=dict)  # what each reply was given, by message id

    @classmethod
    def of(cls, info: ConversationInfo) -> OpenChat:
        """A chat just made (Conversations.start, create): no messages yet, nothing to read."""
        return cls(info.id, info.system_prompt, in_history=info.in_history)

    def history(self) -> list[Message]:
        """The messages as the engine reads them (role and text), in order."""
        return [Message(m.role, m.text) for m in self.messages]

    def plan(self, prompts: PromptFitter | None, max_new_tokens: int, search: Search | None = None,
             typed: str | None = None, pending: Sequence[Document] = ()) -> PromptPlan:
        """What the next reply reads (context_plan.plan_prompt): the chat's turns and documents within the window of
        `prompts` (None: a remote engine, which fits its prompt itself: everything is kept). `typed` and `pending`:
        a message being typed and the documents attached to it, not stored yet (the meter under the composer)."""
        turns, ids = self.history(), [m.id for m in self.messages]
        documents = list(self.documents)
        if typed is not None:
            turns.append(Message("user", typed))
            ids.append(None)
            documents += [ChatDocument(None, None, document) for document in pending]
        if prompts is None:
            return plan_prompt(turns, ids, documents, self.system_prompt, len, UNFITTED_WINDOW, max_new_tokens)
        return plan_prompt(turns, ids, documents, self.system_prompt, counter_for(prompts.tokenizer),
                           prompts.window, max_new_tokens, search)

    def add(self, message: MessageInfo, footer: str = "") -> None:
        """A message just written to the chat (as the store returned it), with its reply's footer if any."""
        self.messages.append(message)
        if footer:
            self.footers[message.id] = footer

    def cut_from(self, position: int) -> None:
        """Forgets the messages at `position` and after, and their documents: they were just deleted (an edit, a
        regenerated reply)."""
        self.messages = [m for m in self.messages if m.position < position]
        kept = {m.id for m in self.messages}
        self.documents = [d for d in self.documents if d.message_id in kept]

    def message(self, message_id: int) -> MessageInfo | None:
        return next((m for m in self.messages if m.id == message_id), None)

    def last_reply(self) -> MessageInfo | None:
        """The last message if it is a reply (what Regenerate replaces), else None."""
        return self.messages[-1] if self.messages and self.messages[-1].role == "assistant" else None


class Conversations:
    """The conversation operations of the chat window, over a Store (store)."""

    def __init__(self, store):
        self.store = store

    def find(self, search: str | None = None) -> list[ConversationInfo]:
        """All chats, most recently updated first; a non-empty `search` keeps those whose title or messages
        contain it (any case)."""
        return self.store.list_conversations(search)

    def create(self, title: str = "New chat") -> ConversationInfo:
        """A new, empty chat titled `title`."""
        return self.store.create_conversation(title)

    def start(self, first_message: str) -> ConversationInfo:
        """A new, empty chat titled after the message it is about to get (title_for); the message is not added."""
        return self.store.create_conversation(title_for(first_message))

    def rename(self, conversation_id: int, title: str) -> ConversationInfo:
        """Renames the chat (it keeps its place in the list); returns it as renamed."""
        return self.store.rename_conversation(conversation_id, title)

    def delete(self, conversation_id: int) -> bool:
        """Deletes the chat and its messages (its runs stay in the statistics); False when it was already gone."""
        return self.store.delete_conversation(conversation_id)

    def system_prompt(self, conversation_id: int) -> str | None:
        """The chat's system prompt, or None when it has none."""
        return self.store.conversation(conversation_id).system_prompt

    def set_system_prompt(self, conversation_id: int, text: str | None) -> ConversationInfo:
        """Sets the chat's system prompt; None or blank text clears it."""
        return self.store.set_system_prompt(conversation_id, text)

    def messages(self, conversation_id: int) -> list[MessageInfo]:
        """The chat's messages in order."""
        return self.store.messages(conversation_id)

    def open(self, conversation_id: int) -> OpenChat:
        """The chat with its messages and its replies' footers, in one read (Store.chat), however long it is."""
        info, messages, runs = self.store.chat(conversation_id)
        footers = {m.id: footer_text(runs[m.id]) for m in messages if m.role == "assistant" and m.id in runs}
        attached = self.store.documents.for_export(conversation_id)  # every document whole, in one read
        documents = [ChatDocument(info.id, m.id, document, info.tokens)
                     for m in messages for info, document in attached.get(m.id, ())]
        sources = {m.id: stored_sources(runs[m.id].sources, documents) for m in messages
                   if m.id in runs and runs[m.id].sources}
        return OpenChat(info.id, info.system_prompt, messages, footers, info.in_history, documents=documents,
                        sources=sources)

    def search_for(self, conversation_id: int) -> Search:
        """The chat's passage search (FTS5 BM25 over its documents' passages, best first), for the prompt plan."""
        return lambda query, limit: self.store.documents.search(conversation_id, query, limit)

    def message(self, conversation_id: int | None, message_id: int) -> MessageInfo | None:
        """The message `message_id` of the chat, or None when the chat (None: no chat open) has no such message."""
        if conversation_id is None:
            return None
        return next((m for m in self.store.messages(conversation_id) if m.id == message_id), None)

    def last_question(self, conversation_id: int) -> str:
        """The text of the chat's last user message ("" when it has none): what the race window is primed with."""
        asked = [m.text for m in self.store.messages(conversation_id) if m.role == "user"]
        return asked[-1] if asked else ""

    def add_user_message(self, conversation_id: int, text: str) -> MessageInfo:
        """Appends the user's message to the chat (which moves to the top of the list); returns it as stored."""
        return self.store.add_message(conversation_id, "user", text)

    def ask(self, chat: OpenChat, text: str, documents: Sequence[Document] = (),
            count: Callable[[str], int] | None = None) -> MessageInfo:
        """Appends the user's message to the open chat, in the store and in `chat`, with the documents attached to
        it, each with its tokens under the model (`count`: the model's TokenCounter, which has counted them where
        they were read; None: not counted); returns it as stored. When a document cannot be stored, the message is
        taken back and StorageError raised: the message and its attachments stay in the box, to send again."""
        message = self.add_user_message(chat.conversation_id, text)
        attached = []
        try:
            for document in documents:
                tokens = count(document.text) if count is not None else None
                info = self.store.documents.attach(message.id, document, tokens)
                attached.append(ChatDocument(info.id, message.id, document, tokens))
        except StorageError:
            self.store.delete_messages_from(chat.conversation_id, message.position)
            raise
        chat.add(message)
        chat.documents += attached
        return message

    def delete_messages_from(self, conversation_id: int, position: int) -> int:
        """Deletes the chat's messages at `position` and after (editing a message replaces it and what followed);
        returns how many went."""
        return self.store.delete_messages_from(conversation_id, position)

    def remove_last_reply(self, conversation_id: int) -> bool:
        """Deletes the chat's last message if it is a reply (regenerating it); returns whether one was deleted."""
        messages = self.store.messages(conversation_id)
        if not messages or messages[-1].role != "assistant":
            return False
        self.store.delete_messages_from(conversation_id, messages[-1].position)
        return True
