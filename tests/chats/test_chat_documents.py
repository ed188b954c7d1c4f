"""Documents in a chat on a real database: kept with their message, read back with the chat, put in the reply's
prompt whole or as the passages that match, and a message whose document cannot be stored taken back whole."""

from dataclasses import replace

import pytest
from test_reply_controller import Fitter, engine  # noqa: F401  (the controller's test fitter)

from specchat.chats import Conversations, OpenChat, ReplyController, ReplyRecorder, RunBook
from specchat.core.errors import StorageError
from specchat.documents.reading import document_from_text


@pytest.fixture
def conversations(store):
    return Conversations(store)


def warranty_document(paragraphs: int = 1):
    filler = "\n\n".join(f"Section {i} is about shipping times and the colour of the boxes." for i in range(paragraphs))
    return document_from_text("contract.txt", filler + "\n\nThe warranty lasts five years from the day of purchase.")


def test_a_document_stays_with_its_message_and_comes_back_with_the_chat(conversations):
    chat = OpenChat.of(conversations.start("What does it say?"))
    message = conversations.ask(chat, "What does it say?", [warranty_document()])
    assert [d.message_id for d in chat.documents] == [message.id]
    reopened = conversations.open(chat.conversation_id)
    assert [(d.name, d.message_id) for d in reopened.documents] == [("contract.txt", message.id)]
    assert reopened.documents[0].document.text == chat.documents[0].document.text
    hits = conversations.search_for(chat.conversation_id)("how long is the warranty", 3)
    assert "five years" in hits[0].passage.text


def test_a_message_whose_document_cannot_be_stored_is_taken_back(store, conversations):
    chat = OpenChat.of(conversations.start("Read this"))
    broken = replace(warranty_document(), sha256="not a checksum")
    with pytest.raises(StorageError):
        conversations.ask(chat, "Read this", [broken])
    assert store.messages(chat.conversation_id) == [] and chat.messages == [] and chat.documents == []


def test_the_reply_reads_the_whole_document_before_the_question(store, conversations):
    chat = OpenChat.of(conversations.start("How long is the warranty?"))
    conversations.ask(chat, "How long is the warranty?", [warranty_document()])
    controller = ReplyController(ReplyRecorder(store, RunBook(store, store.start_app_session("t"))),
                                 conversations.search_for)
    began = controller.start(chat, engine([]))
    (question,) = began.job.messages
    assert question.content.startswith('<document name="contract.txt">\n')
    assert "The warranty lasts five years" in question.content
    assert question.content.endswith("How long is the warranty?")
    assert [s.label for s in began.sources] == ["contract.txt"] and began.note == ""


def test_a_document_too_long_for_the_window_gives_its_matching_passages(store, conversations):
    chat = OpenChat.of(conversations.start("How long is the warranty?"))
    conversations.ask(chat, "How long is the warranty?", [warranty_document(paragraphs=400)])
    controller = ReplyController(ReplyRecorder(store, RunBook(store, store.start_app_session("t"))),
                                 conversations.search_for)
    small = engine([])
    small.prompts.window = 600  # words: far less than the document's
    began = controller.start(chat, small)
    (question,) = began.job.messages
    assert "The warranty lasts five years" in question.content
    assert question.content.count("<passage source=") == len(began.sources) < 400
    assert "contract.txt is longer than the context window holds" in began.note
    assert len(question.content.split()) < 600
