"""The chats the window lists and opens: their titles, system prompts and messages in the Store, and the open chat
kept in memory (OpenChat), so that a reply neither re-reads what it has just written nor asks for its footers one
by one. No Qt.

Every method of Conversations is one unit of work on the Store (one short database session) and raises StorageError
when the database refuses it or the chat is gone."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Callable, Sequence

from ..documents.document import Document
from ..engine.chat_engine import PromptFitter
from ..engine.chat_prompt import Message
from ..storage.records import ConversationInfo, FolderInfo, MessageHit, MessageInfo, RunInfo
from .context_plan import (ChatDocument, DeferredCounts, PromptPlan, Search, Source, counter_for, document_block,
                           passages_block, plan_prompt, stored_sources)
from .copy_sources import KeptSources
from .plan_start import first_planned, shifted
from .run_book import footer_text

UNFITTED_WINDOW = 1 << 30  # a remote engine fits the prompt itself: the plan keeps everything

TITLE_CHARS = 48  # a new chat is titled with the first line of its first message, cut to this length
OPEN_LAST = 400  # messages of a chat's branch read when it opens (its end): the rest is read as it is needed
READ_STEP = 200  # messages read at a time before those held (a few ms), as the transcript or the plan needs them
FLIP_LAST = 20_000  # a flip keeps the messages above the one flipped when its new branch is read within this many

# message id, count -> the `count` messages before it on the branch with their latest runs (Store.earlier)
ReadEarlier = Callable[[int, int], "tuple[list[MessageInfo], dict[int, RunInfo]]"]


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
    again before its next reply.
    earlier: a long chat is held from its end (Conversations.open reads its last OPEN_LAST messages): how many
    messages of its branch come before `messages`, not read yet; load_earlier reads them, as the transcript scrolls
    up or the plan needs them (`read_earlier`, the Store's read)."""

    conversation_id: int
    system_prompt: str | None = None
    messages: list[MessageInfo] = field(default_factory=list)
    footers: dict[int, str] = field(default_factory=dict)
    in_history: bool = True  # its replies may feed the history drafter (an imported chat: once opened)
    stale: bool = False
    documents: list[ChatDocument] = field(default_factory=list)  # attached to its messages, in order
    sources: dict[int, tuple[Source, ...]] = field(default_factory=dict)  # what each reply was given, by message id
    earlier: int = 0
    read_earlier: ReadEarlier | None = field(default=None, repr=False, compare=False)
    kept_sources: KeptSources = field(default_factory=KeptSources, repr=False, compare=False)  # copied_sources'
    _positions: dict[int, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        self._positions = {m.id: m.position for m in self.messages}  # message id -> depth: index() finds it by it

    @classmethod
    def of(cls, info: ConversationInfo) -> OpenChat:
        """A chat just made (Conversations.start, create): no messages yet, nothing to read."""
        return cls(info.id, info.system_prompt, in_history=info.in_history)

    def question_as_read(self) -> str:
        """The chat's last question as the model read it, for the race (the question alone, about a document the
        lanes would not see, races something else): after the documents its reply was given, whole
        (context_plan.document_block), or the passages it was given (passages_block); a question not answered yet
        after every document of the branch, whole. "" when the chat has no question."""
        asked = [i for i, m in enumerate(self.messages) if m.role == "user"]
        if not asked:
            return ""
        question = self.messages[asked[-1]]
        reply = next((m for m in self.messages[asked[-1] + 1:] if m.role == "assistant"), None)
        given = self.sources.get(reply.id, ()) if reply is not None else ()
        passages = [s for s in given if s.passage is not None]
        if passages:
            return passages_block(passages) + question.text
        read = {s.document_id for s in given}
        return "".join(document_block(d.name, d.document.text) for d in self.documents
                       if (d.message_id is not None if reply is None else d.document_id in read)) + question.text

    def history(self) -> list[Message]:
        """The messages as the engine reads them (role and text), in order."""
        return [Message(m.role, m.text) for m in self.messages]

    def plan(self, prompts: PromptFitter | None, max_new_tokens: int, search: Search | None = None,
             typed: str | None = None, pending: Sequence[Document] = (),
             deferred: DeferredCounts | None = None) -> PromptPlan:
        """What the next reply reads (context_plan.plan_prompt): the chat's turns and documents within the window of
        `prompts` (None: a remote engine, which fits its prompt itself: everything is kept). `typed` and `pending`:
        a message being typed and the documents attached to it, not stored yet (the meter under the composer).
        A long chat is planned from its anchor (plan_start.py), the same whether all of it or only its end is held:
        older messages are read first when the window reaches back past what is held. `deferred`: the counts of
        a plan on the GUI thread (the meter's), which guess what is not counted yet and keep it owed; None: every
        text counted now."""
        count = len if prompts is None else deferred or counter_for(prompts.tokenizer)
        window = UNFITTED_WINDOW if prompts is None else prompts.window
        asked = [] if typed is None else [Message("user", typed)]
        start = self._planned_from(count, window, bool(asked))
        held = self.messages[start:]
        turns, ids = [Message(m.role, m.text) for m in held] + asked, [m.id for m in held] + [None] * len(asked)
        documents = list(self.documents)
        if typed is not None:
            documents += [ChatDocument(None, None, document) for document in pending]
        if prompts is None:
            plan = plan_prompt(turns, ids, documents, self.system_prompt, len, UNFITTED_WINDOW, max_new_tokens)
        else:
            plan = plan_prompt(turns, ids, documents, self.system_prompt, count, window, max_new_tokens, search,
                               deferred.document if deferred is not None else None)
        return shifted(plan, self.earlier + start)

    def _planned_from(self, count: Callable[[str], int], window: int, typed: bool) -> int:
        """The index in `messages` of the plan's first turn (plan_start.first_planned), reading older messages while
        what is held does not reach back to it (everything, for a window that takes everything)."""
        while True:
            earlier_turns = len(self.messages) - (0 if typed else 1)
            newest_first = (m.text for m in islice(reversed(self.messages), 0 if typed else 1, None))
            anchor = first_planned(newest_first, max(0, earlier_turns), count, window, self.earlier)
            if anchor is not None:
                return anchor - self.earlier
            if not self.load_earlier(READ_STEP):
                return 0  # nothing more to read (the chat changed under it): plan what is held

    def load_earlier(self, count: int) -> list[MessageInfo]:
        """Reads up to `count` messages before the first one held (a chat held from its end) and puts them before
        it, with their replies' footers and sources; returns them, oldest first ([] when the chat's first message
        is held already). StorageError when the database refuses the read."""
        if not self.earlier or not self.messages or self.read_earlier is None or count <= 0:
            return []
        read, runs = self.read_earlier(self.messages[0].id, min(count, self.earlier))
        self.messages[:0] = read
        self.earlier = read[0].position if read and read[0].parent_id is not None else 0
        for m in read:
            self._positions[m.id] = m.position
            run = runs.get(m.id)
            if run is not None and m.role == "assistant":
                self.footers[m.id] = footer_text(run)
            if run is not None and run.sources:
                self.sources[m.id] = stored_sources(run.sources, self.documents)
        return read

    def index(self, message_id: int) -> int | None:
        """Where message `message_id` is in `messages`, None when it is not held: found at once by its depth, which
        is its place in a branch held from its end (a long chat's 150,000 messages are not searched one by one)."""
        position = self._positions.get(message_id)
        if position is not None and self.messages:
            at = position - self.messages[0].position
            if 0 <= at < len(self.messages) and self.messages[at].id == message_id:
                return at
        if position is None and len(self._positions) >= len(self.messages):
            return None  # every held message is known (add, load_earlier): it is not held
        return next((i for i, m in enumerate(self.messages) if m.id == message_id), None)

    def add(self, message: MessageInfo, footer: str = "") -> None:
        """A message just written to the chat (as the store returned it), with its reply's footer if any."""
        self.messages.append(message)
        self._positions[message.id] = message.position
        if footer:
            self.footers[message.id] = footer

    def above(self, below: OpenChat) -> OpenChat:
        """The chat held as this one above the depth where `below` starts, then as `below` (the same chat read
        again from that depth down, after a flip there): what was read above stays held, so the transcript keeps
        what it shows above the flipped message. `below`'s documents are the branch's."""
        depth = below.messages[0].position
        kept = [m for m in self.messages if m.position < depth]
        ids = {m.id for m in kept}
        return OpenChat(below.conversation_id, below.system_prompt, kept + below.messages,
                        {i: f for i, f in self.footers.items() if i in ids} | below.footers, below.in_history,
                        documents=below.documents, sources={i: s for i, s in self.sources.items() if i in ids}
                        | below.sources, earlier=self.earlier if kept else below.earlier,
                        read_earlier=below.read_earlier, kept_sources=below.kept_sources)

    def cut_from(self, position: int) -> None:
        """Forgets the messages at `position` and after, and their documents: the branch on screen now leaves them
        (an edit, a regenerated reply: they stay stored, one flip away)."""
        gone = {m.id for m in self.messages if m.position >= position}
        self.messages = [m for m in self.messages if m.position < position]
        self.documents = [d for d in self.documents if d.message_id not in gone]
        if position < self.earlier:  # it was not held (nor its documents): what is stored is read again
            self.earlier, self.stale = position, True

    def copied_sources(self, message_id: int) -> dict[tuple[int, int], str]:
        """Where held reply `message_id`'s accepted drafts were copied from among the chat's documents ((start,
        end) -> "from report.pdf, p. 3": copy_sources.span_sources), computed once and kept; {} for a message not
        held or not a reply."""
        message = self.message(message_id)
        if message is None or message.role != "assistant":
            return {}
        return self.kept_sources.of(message.id, message.text, message.spans, self.documents)

    def message(self, message_id: int) -> MessageInfo | None:
        """The held message `message_id`, or None."""
        at = self.index(message_id)
        return None if at is None else self.messages[at]

    def last_reply(self) -> MessageInfo | None:
        """The last message if it is a reply (what Regenerate replaces), else None."""
        return self.messages[-1] if self.messages and self.messages[-1].role == "assistant" else None


class Conversations:
    """The conversation operations of the chat window, over a Store (store)."""

    def __init__(self, store):
        self.store = store
        self.kept_sources = KeptSources()  # the copied spans' sources of the replies drawn, kept across reopenings

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

    def open(self, conversation_id: int, last: int | None = OPEN_LAST, since: int = 0) -> OpenChat:
        """The chat with its messages and its replies' footers, in one read (Store.chat): the last `last` messages
        of its branch (none above the depth `since`), the rest read when needed (OpenChat.load_earlier), so that a
        chat of any length opens at once; None: every message. Its documents are all those on its branch."""
        info, messages, runs = self.store.chat(conversation_id, last, since)
        footers = {m.id: footer_text(runs[m.id]) for m in messages if m.role == "assistant" and m.id in runs}
        attached = self.store.documents.for_export(conversation_id)  # every document whole, in one read
        held = [m.id for m in messages]
        earlier = messages[0].position if messages and messages[0].parent_id is not None else 0
        unread = set(attached).difference(held)
        above = self.store.on_branch_above(held[0], unread) if earlier and unread else set()
        documents = [ChatDocument(info.id, message_id, document, info.tokens)
                     for message_id in sorted(above) + held  # ids grow down a branch: in the branch's order
                     for info, document in attached.get(message_id, ())]
        sources = {m.id: stored_sources(runs[m.id].sources, documents) for m in messages
                   if m.id in runs and runs[m.id].sources}
        return OpenChat(info.id, info.system_prompt, messages, footers, info.in_history, documents=documents,
                        sources=sources, earlier=earlier,
                        read_earlier=lambda message_id, count: self.store.earlier(conversation_id, message_id, count),
                        kept_sources=self.kept_sources)

    def search_for(self, conversation_id: int) -> Search:
        """The chat's passage search (FTS5 BM25 over its documents' passages, best first), for the prompt plan."""
        return lambda query, limit: self.store.documents.search(conversation_id, query, limit)

    def message(self, conversation_id: int | None, message_id: int) -> MessageInfo | None:
        """The message `message_id` of the chat, or None when the chat (None: no chat open) has no such message."""
        if conversation_id is None:
            return None
        return next((m for m in self.store.messages(conversation_id) if m.id == message_id), None)

    def add_user_message(self, conversation_id: int, text: str) -> MessageInfo:
        """Appends the user's message to the chat (which moves to the top of the list); returns it as stored."""
        return self.store.add_message(conversation_id, "user", text)

    def ask(self, chat: OpenChat, text: str, documents: Sequence[Document] = (),
            count: Callable[[str], int | None] | None = None, instead_of: MessageInfo | None = None) -> MessageInfo:
        """Adds the user's message to the open chat, in the store and in `chat`, with the documents attached to it,
        each with its tokens under the model (`count`: the model's TokenCounter, which has counted them where they
        were read; None: not counted); returns it as stored. `instead_of`: the message being edited, which the new
        one joins as a sibling (a branch: the edited message and what followed it stay, one flip away).

        The message and its documents are written in one transaction: when any cannot be, nothing is stored and
        StorageError is raised, so the message and its attachments stay in the box, to send again."""
        counted = [(document, count(document.text) if count is not None else None) for document in documents]
        message, stored = self.store.ask(chat.conversation_id, text, counted,
                                         sibling_of=instead_of.id if instead_of is not None else None)
        if instead_of is not None:
            chat.cut_from(instead_of.position)
        chat.add(message)
        chat.documents += [ChatDocument(info.id, message.id, document, tokens)
                           for info, (document, tokens) in zip(stored, counted)]
        return message

    def branch_before(self, chat: OpenChat, reply: MessageInfo) -> None:
        """Makes room for a new sibling of `reply` (Regenerate): the branch on screen ends at the message it answers,
        so that the next reply is added beside it; `reply` and what followed it stay, one flip away."""
        self.store.tree.end_at(chat.conversation_id, reply.parent_id)
        chat.cut_from(reply.position)

    def show_branch(self, conversation_id: int, message_id: int) -> None:
        """Puts on screen the branch through `message_id` (down to the newest message under it)."""
        self.store.tree.show_branch(conversation_id, message_id)

    def flip(self, chat: OpenChat, message_id: int, step: int) -> OpenChat:
        """Shows the sibling `step` places from `message_id` (-1: the one before, ‹; +1: the one after, ›) and
        what followed it; returns the chat read again. A flip past either end stays where it is."""
        message = chat.message(message_id)
        if message is None or message_id not in message.siblings:
            return chat
        index = message.siblings.index(message_id) + step
        if 0 <= index < len(message.siblings):
            self.store.tree.show_branch(chat.conversation_id, message.siblings[index])
        fresh = self.open(chat.conversation_id, FLIP_LAST, since=message.position)
        return chat.above(fresh) if fresh.messages and fresh.earlier == message.position else fresh

    def fork(self, conversation_id: int, message_id: int) -> ConversationInfo:
        """A new chat of the branch from the first message down to `message_id` ("Branch into a new chat")."""
        return self.store.conversation(self.store.tree.fork(conversation_id, message_id))

    def delete_message(self, conversation_id: int, message_id: int) -> int:
        """Deletes the message and everything that followed it; returns how many messages went."""
        return self.store.tree.delete(conversation_id, message_id)

    # -- the sidebar: pins, folders, search (Store.chat_list) ---------------------------------------------------

    def folders(self) -> list[FolderInfo]:
        """Every folder with its number of chats, by name."""
        return self.store.chat_list.folders()

    def create_folder(self, name: str) -> FolderInfo:
        """A new, empty folder; StorageError for an empty, too long or taken name."""
        return self.store.chat_list.create_folder(name)

    def rename_folder(self, folder_id: int, name: str) -> FolderInfo:
        """Renames the folder (the same checks as create_folder)."""
        return self.store.chat_list.rename_folder(folder_id, name)

    def delete_folder(self, folder_id: int) -> bool:
        """Deletes the folder, keeping its chats (in no folder); False when it was already gone."""
        return self.store.chat_list.delete_folder(folder_id)

    def move_to_folder(self, conversation_id: int, folder_id: int | None) -> None:
        """Puts the chat in the folder (None: in no folder)."""
        self.store.chat_list.move(conversation_id, folder_id)

    def pin(self, conversation_id: int, pinned: bool) -> None:
        """Pins the chat to the top of the list, or unpins it."""
        self.store.chat_list.pin(conversation_id, pinned)

    def search_messages(self, query: str, limit: int = 200) -> list[MessageHit]:
        """The chats whose title and the messages whose text hold every word of `query`, with highlighted snippets
        (chat_list.ChatList.search)."""
        return self.store.chat_list.search(query, limit)
