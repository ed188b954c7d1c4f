"""A long chat in the window (issue 46): it opens at its last screen, older messages are drawn in order as the view
goes up (read from the database as needed) without moving what is on screen, the document then reads as the whole
chat drawn at once, a reply still streams at the end, and a search hit far up is read, drawn and scrolled to."""

from PySide6.QtCore import QPoint

from specchat.chats.reply_spans import ReplySpans
from specchat.core.vocabulary import Origin
from specchat.engine.decoding.events import GenerationStats, StepEvent
from specchat.ui.transcript import MessageView, Transcript
from specchat.ui.transcript_pages import BEGINNING, FIRST_SCREEN, LOADING, ListPages

STREAM_TIMEOUT = 120000


def imported_chat(store, count: int) -> int:
    """A chat of `count` short messages (the replies in Markdown, with a drafted span), imported at once."""
    messages = [{"role": "user", "text": f"question {i}"} if i % 2 == 0 else
                {"role": "assistant", "text": f"**answer** {i}\n\n- a `point`", "spans": [[2, 8, "draft"]]}
                for i in range(count)]
    return store.import_json({"format": "specchat-conversation", "version": 2, "title": "Long",
                              "messages": messages}).id


def views(count: int) -> list[MessageView]:
    """Messages as the transcript draws them: questions, and replies with Markdown, code and drafted spans."""
    made = []
    for i in range(count):
        if i % 2 == 0:
            made.append(MessageView(i + 1, "user", f"Question {i}:\nwhat about {i}?"))
        else:
            text = f"## Part {i}\n\n**{i}** squared is {i * i}.\n\n```python\nprint({i})\n```\n\n- one\n- two"
            made.append(MessageView(i + 1, "assistant", text, ReplySpans(spans=[(3, 9, "draft"), (20, 30, "draft")]),
                                    footer=f"{i} tokens"))
    return made


def scroll_up_to_the_top(qtbot, transcript, seen: list) -> None:
    """Scrolls to the top until the first message is drawn, noting the first drawn message after each page."""
    bar = transcript.verticalScrollBar()
    while transcript.pager.more_above:
        bar.setValue(0)
        qtbot.waitUntil(lambda: not transcript.pager._timer.isActive(), timeout=5000)
        seen.append(transcript.messages[0].message_id)


def header_top(transcript, index: int) -> float:
    """Where the drawn message `index`'s header is in the viewport, in pixels from its top."""
    block = transcript.document().findBlock(transcript._starts[index] + 1)
    top = transcript.document().documentLayout().blockBoundingRect(block).top()
    return top - transcript.verticalScrollBar().value()


def test_a_long_chat_opens_at_its_end_and_older_messages_are_drawn_in_order_going_up(qtbot, make_window, store):
    chat_id = imported_chat(store, 900)
    stored = [m.id for m in store.chat(chat_id)[1]]
    window = make_window()
    window.open_conversation(chat_id)
    transcript = window.transcript
    assert [m.message_id for m in transcript.messages] == stored[-FIRST_SCREEN:]
    assert transcript.toPlainText().startswith(LOADING) and window.chat.earlier == 900 - 400
    bar = transcript.verticalScrollBar()
    assert bar.maximum() > 0 and bar.maximum() - bar.value() < 40  # at the end (the cursor's line shown)
    transcript.pager.max_drawn = 150  # the bottom is taken out on the way up
    seen = []
    scroll_up_to_the_top(qtbot, transcript, seen)
    assert seen == sorted(seen, reverse=True) and seen[-1] == stored[0] and window.chat.earlier == 0
    drawn = [m.message_id for m in transcript.messages]
    assert drawn == stored[:len(drawn)] and len(drawn) <= 150 and transcript.pager.more_below
    assert transcript.toPlainText().startswith(BEGINNING + "\nYou\nquestion 0\n")
    while transcript.pager.more_below:  # and back down to the end, drawn again
        bar.setValue(bar.maximum())
        qtbot.waitUntil(lambda: not transcript.pager._timer.isActive(), timeout=5000)
    assert transcript.messages[-1].message_id == stored[-1] and "Regenerate" in transcript.toPlainText()[-200:]
    assert transcript.toPlainText().startswith(LOADING)


def test_a_page_drawn_above_keeps_what_is_on_screen_where_it_was(qtbot):
    transcript = Transcript()
    qtbot.addWidget(transcript)
    transcript.resize(600, 400)
    transcript.show()
    transcript.set_messages(views(300))
    bar = transcript.verticalScrollBar()
    bar.setValue(40)  # the first drawn message's header near the top of the view
    first, before = transcript.messages[0].message_id, header_top(transcript, 0)
    transcript.pager._page()
    index = next(i for i, m in enumerate(transcript.messages) if m.message_id == first)
    assert index > 0 and abs(header_top(transcript, index) - before) <= 1
    assert transcript.cursorForPosition(QPoint(10, 10)).position() > transcript._starts[index - 1]


def test_all_drawn_the_transcript_reads_as_the_chat_drawn_at_once(qtbot):
    chat = views(240)
    whole = Transcript()
    qtbot.addWidget(whole)
    whole.pager.first_screen = 0  # everything at once
    whole.set_messages(chat)
    paged = Transcript()
    qtbot.addWidget(paged)
    paged.resize(600, 400)
    paged.show()
    paged.set_messages(chat)
    assert len(paged.messages) == FIRST_SCREEN
    scroll_up_to_the_top(qtbot, paged, [])
    top, text = paged.toPlainText().split("\n", 1)
    assert top == BEGINNING and text == whole.toPlainText()
    offset = len(top) + 1
    assert [p - offset for p in paged.draft_positions()] == whole.draft_positions()


def test_a_reply_streaming_while_older_messages_are_drawn_above_ends_in_its_place(qtbot):
    chat, reply = views(120), MessageView(999, "assistant", "**Streamed** reply", ReplySpans())
    whole = Transcript()
    qtbot.addWidget(whole)
    whole.pager.first_screen = 0
    whole.set_messages(chat + [reply])
    transcript = Transcript()
    qtbot.addWidget(transcript)
    transcript.resize(600, 400)
    transcript.show()
    transcript.set_messages(chat)
    transcript.show_pending("The model is still loading")
    transcript.begin_reply("1 old message left out", message_id=999)
    transcript.append_stream(StepEvent(token_ids=(1, 2), origins=(Origin.TARGET, Origin.TARGET),
                                       spans=((0, 6), (6, 10)), text_delta="**Streamed", text_offset=0,
                                       rejected_ids=(), rejected_text="", stats=GenerationStats(), wall_s=0.0))
    scroll_up_to_the_top(qtbot, transcript, [])  # pages drawn above the open reply
    assert transcript.toPlainText().endswith("Assistant\n**Streamed")
    transcript.end_reply(reply)
    assert transcript.toPlainText().split("\n", 1)[1] == whole.toPlainText()


def test_a_reply_streams_at_the_end_after_scrolling_far_up_and_regenerates_there(qtbot, make_window, store):
    chat_id = imported_chat(store, 600)
    window = make_window()
    window.open_conversation(chat_id)
    transcript = window.transcript
    transcript.pager.max_drawn = 80
    for _ in range(12):  # far enough up that the chat's end is no longer drawn
        transcript.verticalScrollBar().setValue(0)
        qtbot.waitUntil(lambda: not transcript.pager._timer.isActive(), timeout=5000)
    assert not transcript.pager.at_end()
    window.composer.setPlainText("The quick brown fox")
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()
    stored = store.chat(chat_id)[1]
    assert len(stored) == 602 and [m.text for m in stored[-2:]][0] == "The quick brown fox"
    assert [m.message_id for m in transcript.messages[-2:]] == [m.id for m in stored[-2:]]
    assert transcript.pager.at_end() and "Regenerate" in transcript.toPlainText().rsplit("\n", 1)[-1]
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.regenerate()
    again = store.chat(chat_id)[1]
    assert len(again) == 602 and again[-1].siblings == (stored[-1].id, again[-1].id)
    assert transcript.messages[-1].message_id == again[-1].id and "‹ 2/2 ›" in transcript.toPlainText()


def test_an_edit_far_from_the_end_and_a_search_hit_far_up(qtbot, make_window, store):
    chat_id = imported_chat(store, 1000)
    stored = store.chat(chat_id)[1]
    window = make_window()
    window.open_conversation(chat_id)
    transcript = window.transcript
    assert transcript.scroll_to_message(stored[5].id)  # not held: read a page at a time, then drawn around it
    qtbot.waitUntil(lambda: any(m.message_id == stored[5].id for m in transcript.messages), timeout=10000)
    index = next(i for i, m in enumerate(transcript.messages) if m.message_id == stored[5].id)
    assert 0 <= header_top(transcript, index) < transcript.viewport().height() // 2
    assert window.chat.earlier == 0 and not transcript.pager.at_end()
    window._on_transcript_action("edit", stored[4].id)  # a question far up: edited, the branch goes from there
    window.composer.setPlainText("An edited question")
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()
    branch = store.chat(chat_id)[1]
    assert [m.id for m in branch[:4]] == [m.id for m in stored[:4]] and len(branch) == 6
    assert branch[4].text == "An edited question" and branch[4].siblings == (stored[4].id, branch[4].id)
    assert [m.message_id for m in transcript.messages] == [m.id for m in branch] and transcript.pager.at_end()


def test_list_pages_find_messages_by_id():
    pages = ListPages(views(10))
    assert [v.message_id for v in pages.before(5, 2)] == [3, 4] and pages.before(99, 2) == []
    assert [v.message_id for v in pages.after(9, 5)] == [10] and pages.reach(3) and pages.reach(99) is False
    assert [v.message_id for v in pages.around(5, 1, 1)] == [4, 5, 6] and pages.around(99, 1, 1) is None
