"""Continue in the window, with the tiny model on a real database: the link under the chat's last reply when it was
cut short (only there), the reply going on in its own place with its text first, and the result the reply that was
never cut, with both parts' runs."""

from PySide6.QtCore import QUrl

from specchat.engine.chat_prompt import Message
from specchat.engine.decoding.speculative import GenerationConfig

STREAM_TIMEOUT = 120000  # generous: a loaded CI machine is slow, and a hang still fails


def send(qtbot, window, text):
    window.composer.setPlainText(text)
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()


def continue_links(transcript) -> list[str]:
    """The hrefs of the transcript's Continue links, in order."""
    found, block = [], transcript.document().begin()
    while block.isValid():
        iterator = block.begin()
        while not iterator.atEnd():
            href = iterator.fragment().charFormat().anchorHref()
            if href.startswith("specchat:continue/"):
                found.append(href)
            iterator += 1
        block = block.next()
    return found


def test_continue_goes_on_with_the_last_reply_in_its_place(qtbot, make_window, store):
    window = make_window(drafter="model", max_new_tokens=12)  # the tiny target never ends a turn: the limit does
    send(qtbot, window, "The quick brown fox")
    first = store.stored_reply(store.messages(window.conversation_id)[-1].id)
    assert first.message.finish_reason == "length" and len(first.token_ids) == 12
    [href] = continue_links(window.transcript)
    assert href.startswith(f"specchat:continue/{first.message.id}?")
    streamed = []
    on_steps = window._on_steps

    def seen(batch):  # what the reply's region shows while the continuation streams
        on_steps(batch)
        streamed.append(window.transcript.toPlainText())

    window._on_steps = seen
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.transcript.anchorClicked.emit(QUrl(href))
    assert streamed and all(text.count("Assistant") == 1 and first.message.text.strip()[:8] in text
                            for text in streamed)  # the earlier text stays, in the one reply, as the rest streams
    final = store.stored_reply(first.message.id)
    assert [m.id for m in store.messages(window.conversation_id)][-1] == first.message.id  # the same message
    fitted = window.session.engines.fitter().fit([Message("user", "The quick brown fox")], None, 12).ids
    whole = window.session.engines.engine("model").generate(fitted, GenerationConfig(max_new_tokens=24, k=4,
                                                                                      adaptive_k=False))
    assert final.token_ids == whole.token_ids and final.message.text == whole.text
    assert [run.new_tokens for run in final.runs] == [12, 12]
    shown = window.transcript.toPlainText()
    assert "continued, part 2 (bit-identical to one uninterrupted reply)" in shown and shown.count("Assistant") == 1
    assert len(continue_links(window.transcript)) == 1  # cut by the limit again: it can go on again
    send(qtbot, window, "And then?")
    [href] = continue_links(window.transcript)  # only the last reply offers it
    assert href.startswith(f"specchat:continue/{store.messages(window.conversation_id)[-1].id}?")


def test_a_stopped_reply_offers_continue_and_one_that_ended_does_not(qtbot, make_window, store):
    window = make_window(drafter="model", max_new_tokens=2000)
    on_steps = window._on_steps

    def stop_at_the_first_steps(batch):
        on_steps(batch)
        window.stop()

    window._on_steps = stop_at_the_first_steps
    send(qtbot, window, "The quick brown fox")
    reply = store.messages(window.conversation_id)[-1]
    assert reply.finish_reason == "cancelled" and len(continue_links(window.transcript)) == 1
    store.update_message(reply.id, finish_reason="eos")  # a reply that ended by itself has nothing to go on from
    window.open_conversation(window.conversation_id)
    assert continue_links(window.transcript) == []
