"""A long chat opened at its end (issue 46): OpenChat holds its last messages and reads older ones as they are
needed; its prompt plan is the plan of the whole chat; a reply, a regenerated reply, an edit and a flip work on it."""

from datetime import datetime, timezone

from specchat.chats import Conversations, OpenChat
from specchat.chats.plan_start import ANCHOR_STRIDE
from specchat.engine.chat_engine import PromptFitter
from specchat.storage.records import MessageInfo

HANDBOOK_TEXT = "The handbook says: keys are at the front desk. " * 20


class Words:
    """A tokenizer of one token a word (the plan only counts tokens)."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": text.split()}


def imported_chat(store, count: int) -> int:
    """A chat of `count` messages, questions and replies of varied length, imported at once; returns its id."""
    messages = [{"role": "user" if i % 2 == 0 else "assistant",
                 "text": f"message {i} " + "word " * (3 + (i * 7) % 23)} for i in range(count)]
    return store.import_json({"format": "specchat-conversation", "version": 2, "title": "Long",
                              "messages": messages}).id


def test_a_long_chat_opens_with_its_end_and_reads_older_messages_when_asked(store):
    conversations = Conversations(store)
    chat_id = imported_chat(store, 3000)
    whole = conversations.open(chat_id, last=None)
    chat = conversations.open(chat_id, last=100)
    assert chat.messages == whole.messages[-100:] and chat.earlier == 2900 and whole.earlier == 0
    read = chat.load_earlier(250)
    assert read == whole.messages[2650:2900] and chat.messages == whole.messages[-350:] and chat.earlier == 2650
    assert chat.index(whole.messages[2650].id) == 0 and chat.message(whole.messages[2999].id) == whole.messages[-1]
    assert chat.index(whole.messages[10].id) is None  # not held
    chat.load_earlier(10_000)
    assert chat.messages == whole.messages and chat.earlier == 0 and chat.load_earlier(5) == []


def test_the_plan_of_a_chat_held_from_its_end_is_the_plan_of_the_whole_chat(store, tokenizer):
    """The prompt (its token ids), what it leaves out and the meter, at many ends of a chat far longer than the
    window, with a document attached near its start (read at the first kept turn), and with a message typed."""
    conversations = Conversations(store)
    chat_id = imported_chat(store, 3000)
    ids = [m.id for m in conversations.open(chat_id, last=None).messages]
    store.documents.attach(ids[4], _document())
    prompts = PromptFitter(tokenizer, 2048)
    for end in (2998, 2996, 2900, 2602, 1800, 700, 300, 40):  # each a question
        store.tree.end_at(chat_id, ids[end])
        whole, tail = conversations.open(chat_id, last=None), conversations.open(chat_id, last=60)
        for typed in (None, "and then?"):
            expected, planned = whole.plan(prompts, 64, typed=typed), tail.plan(prompts, 64, typed=typed)
            assert planned == expected
            assert prompts.fit(planned.messages, None, 64).ids == prompts.fit(expected.messages, None, 64).ids
        assert expected.left_out > 0 and '<document name="handbook.txt">' in expected.messages[0].content
        assert len(tail.messages) < 60 + 2 * ANCHOR_STRIDE  # read only back to the plan's start
    short = conversations.open(chat_id, last=60)  # the branch ends at message 40: all of it is read
    assert len(short.messages) == 41 and short.earlier == 0


def test_the_start_of_a_long_chat_plan_moves_in_blocks_as_it_grows():
    prompts, chat, starts = PromptFitter(Words(), 300), OpenChat(1), []
    for turn in range(1200):
        role = "user" if turn % 2 == 0 else "assistant"
        chat.add(_held(turn, role, f"turn {turn} " + "word " * (4 + turn % 9)))
        if role == "user":
            plan = chat.plan(prompts, 50)
            assert plan.meter.used <= 300 - 50 and plan.messages[0].role == "user"
            starts.append(plan.left_out)
    changes = sum(1 for a, b in zip(starts, starts[1:]) if a != b)
    assert starts[-1] > 1000 and changes <= len(starts) // 3  # moves in blocks, not at every turn


def test_reply_regenerate_edit_and_flip_on_a_chat_held_from_its_end(store):
    conversations = Conversations(store)
    chat_id = imported_chat(store, 1000)
    chat = conversations.open(chat_id, last=50)

    def stored_end() -> list:
        return conversations.open(chat_id, last=None).messages[chat.earlier:]

    asked = conversations.ask(chat, "a new question")  # a reply follows it
    chat.add(store.add_message(chat_id, "assistant", "its answer"))
    assert chat.messages == stored_end() and chat.messages[-2] == asked and chat.earlier == 950
    conversations.branch_before(chat, chat.last_reply())  # Regenerate: a second answer beside it
    chat.add(store.add_message(chat_id, "assistant", "another answer"))
    assert chat.messages == stored_end() and len(chat.messages[-1].siblings) == 2
    edited = chat.messages[-20]
    new = conversations.ask(chat, "an edited question", instead_of=edited)
    assert chat.messages == stored_end() and chat.messages[-1] == new and len(new.siblings) == 2
    flipped = conversations.flip(chat, new.id, -1)  # back to the first version, and what followed it
    assert flipped.earlier == 950 and flipped.messages[:30] == chat.messages[:30]
    assert flipped.messages == conversations.open(chat_id, last=None).messages[950:]
    assert flipped.messages[-1].text == "another answer"
    above = conversations.open(chat_id, last=50)
    above.cut_from(above.earlier - 10)  # an edit of a message not held: the chat is read again before a reply
    assert above.stale and above.messages == []


def _held(turn: int, role: str, text: str) -> MessageInfo:
    return MessageInfo(id=turn + 1, conversation_id=1, position=turn, role=role, text=text,
                       created_at=datetime.now(timezone.utc), parent_id=turn or None)


def _document():
    from specchat.documents.document import Document, Passage

    return Document("handbook.txt", "text", HANDBOOK_TEXT, None, (), "0" * 64, len(HANDBOOK_TEXT),
                    (Passage(0, None, 0, len(HANDBOOK_TEXT), HANDBOOK_TEXT),))
