"""The window with a tiny model: streaming with highlighted spans, stop, regenerate, reopen, stats on disk."""

import pytest
from PySide6.QtCore import QTimer, QUrl

from specchat.chats.reply_spans import ReplySpans
from specchat.ui.transcript import MessageView, Transcript

STREAM_TIMEOUT = 120000  # generous: a loaded CI machine is slow, and a hang still fails


def send(qtbot, window, text):
    window.composer.setPlainText(text)
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()


def test_reply_streams_and_draft_spans_match_the_engine(qtbot, make_window, store):
    window = make_window()
    seen_during_stream = []  # highlighted positions after each streamed step is drawn (not timer samples: a
    append_stream = window.transcript.append_stream  # tiny model may finish within one frame)

    def append_and_count(event):
        append_stream(event)
        seen_during_stream.append(len(window.transcript.draft_positions()))

    window.transcript.append_stream = append_and_count
    send(qtbot, window, "The quick brown fox")
    assert any(count > 0 for count in seen_during_stream)  # highlighting appeared while streaming

    messages = store.messages(window.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    reply = messages[1]
    assert reply.text and not reply.stopped and reply.finish_reason == "length"
    draft_chars = sum(end - start for start, end, origin in reply.spans if origin == "draft")
    assert draft_chars > 0
    stats = store.conversation_stats(window.conversation_id)
    assert stats.runs == 1 and stats.new_tokens == 40 and stats.mean_alpha == 1.0
    assert store.app_session_stats(window.session.app_session_id).runs == 1


def test_the_calibrated_speedup_compares_decode_speed_with_decode_speed(qtbot, make_window, store):
    """The plain baseline leaves the prompt's processing out, so a reply's speedup must leave it out too."""
    from sqlalchemy import select

    from specchat.storage.tables import GenerationRun

    window = make_window()
    send(qtbot, window, "The quick brown fox")
    with store._reading() as session:
        run = session.scalars(select(GenerationRun)).one()
        decode_speed = run.new_tokens / (run.wall_s - run.prefill_s)
        assert run.prefill_s > 0 and run.speedup_basis == "calibrated"
        assert run.speedup == pytest.approx(decode_speed / window.session.plain_tokens_per_s, rel=1e-3)


def test_reopening_restores_the_highlighting(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "Speculative decoding")
    before = window.transcript.draft_positions()
    text_before = window.transcript.toPlainText()
    window.new_conversation()
    assert window.transcript.draft_positions() == []
    window.open_conversation(window.sidebar.model.index(0, 0).data(256))  # the chat list's first row
    assert window.transcript.toPlainText() == text_before
    assert window.transcript.draft_positions() == before and before


def test_stop_keeps_the_partial_reply(qtbot, make_window, store):
    window = make_window(max_new_tokens=2000)
    window.composer.setPlainText("The quick brown fox")
    on_steps = window._on_steps

    def stop_at_the_first_steps(batch):  # not after a fixed time: a fast machine finishes 2000 tokens in 300 ms
        on_steps(batch)
        window.stop()

    window._on_steps = stop_at_the_first_steps
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()
    reply = store.messages(window.conversation_id)[-1]
    assert reply.stopped and reply.finish_reason == "cancelled"
    assert 0 < len(reply.text) and window.session.store.run_for_message(reply.id).new_tokens < 2000
    assert "stopped" in window.transcript.toPlainText()


def app_links(transcript, action: str) -> list[tuple[str, str]]:
    """The transcript's links for `action` ("previous", "fork", ...): (their text, their href), in order."""
    found, block = [], transcript.document().begin()
    while block.isValid():
        iterator = block.begin()
        while not iterator.atEnd():
            fragment = iterator.fragment()
            if fragment.charFormat().anchorHref().startswith(f"specchat:{action}/"):
                found.append((fragment.text(), fragment.charFormat().anchorHref()))
            iterator += 1
        block = block.next()
    return found


def test_regenerate_samples_a_sibling_and_the_arrows_flip_between_them(qtbot, make_window, store):
    window = make_window()
    send(qtbot, window, "The quick brown fox")
    first = store.messages(window.conversation_id)[-1]
    assert app_links(window.transcript, "previous") == [] and "1/2" not in window.transcript.toPlainText()
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.regenerate()
    messages = store.messages(window.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"] and messages[-1].siblings == (first.id, messages[-1].id)
    assert messages[-1].text != first.text  # sampled at Settings' "Regenerate temperature", not the greedy reply again
    assert store.conversation_stats(window.conversation_id).runs == 2
    shown = window.transcript.toPlainText()
    assert "‹ 2/2 ›" in shown and "sampled at T 0.70" in shown
    assert "× vs plain" not in shown  # the baseline is greedy: a sample's ratio against it would not be the drafter's
    [(arrow, href)] = app_links(window.transcript, "previous")
    window.transcript.anchorClicked.emit(QUrl(href))  # ‹: the first reply, greedy, is back on screen
    assert first.text[:20] in window.transcript.toPlainText() and "‹ 1/2 ›" in window.transcript.toPlainText()
    assert [m.id for m in store.messages(window.conversation_id)] == [messages[0].id, first.id]
    window.open_conversation(window.conversation_id)  # the flip is kept
    assert "‹ 1/2 ›" in window.transcript.toPlainText()
    window._flip_last("next")  # Alt+Right
    assert "‹ 2/2 ›" in window.transcript.toPlainText() and window.chat.messages[-1].id == messages[-1].id


def test_edit_and_resend_keeps_the_old_branch_and_fork_makes_a_chat(qtbot, make_window, store):
    window = make_window()
    send(qtbot, window, "The quick brown fox")
    original = store.messages(window.conversation_id)
    window._on_transcript_action("edit", original[0].id)
    send(qtbot, window, "The lazy dog")
    edited = store.messages(window.conversation_id)
    assert [m.text for m in edited][:1] == ["The lazy dog"] and edited[0].siblings == (original[0].id, edited[0].id)
    assert store.conversation(window.conversation_id).message_count == 4  # nothing was deleted
    window._on_transcript_action("previous", edited[0].id)
    assert [m.id for m in window.chat.messages] == [m.id for m in original]
    [_, (label, href)] = app_links(window.transcript, "fork")  # the reply's "Branch into new chat"
    source = window.conversation_id
    window.transcript.anchorClicked.emit(QUrl(href))
    assert window.conversation_id != source and label == "Branch into new chat"
    assert [m.text for m in store.messages(window.conversation_id)] == [m.text for m in original]
    assert store.conversation(source).message_count == 4


def test_delete_asks_first_then_removes_the_message_and_what_followed_it(qtbot, make_window, store, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    window = make_window()
    send(qtbot, window, "The quick brown fox")
    send(qtbot, window, "The lazy dog")
    kept = store.messages(window.conversation_id)[:2]
    answers = iter([QMessageBox.StandardButton.No, QMessageBox.StandardButton.Yes])
    monkeypatch.setattr(QMessageBox, "question", lambda *args: next(answers))
    links = app_links(window.transcript, "delete")  # one under every message, in order
    assert [label for label, _ in links] == ["Delete"] * 4
    window.transcript.anchorClicked.emit(QUrl(links[2][1]))  # the second question's: the user says No
    assert store.conversation(window.conversation_id).message_count == 4 and "The lazy dog" in \
        window.transcript.toPlainText()
    window.transcript.anchorClicked.emit(QUrl(links[2][1]))  # and then Yes
    assert [m.id for m in store.messages(window.conversation_id)] == [m.id for m in kept]
    assert store.conversation(window.conversation_id).message_count == 2
    assert "The lazy dog" not in window.transcript.toPlainText() and "The quick brown fox" in \
        window.transcript.toPlainText()
    assert window.statusBar().currentMessage() == "Deleted 2 messages."
    assert store.conversation_stats(window.conversation_id).runs == 2  # the statistics keep the deleted reply's run
    send(qtbot, window, "The lazy dog")  # the chat goes on from what is left
    assert [m.role for m in store.messages(window.conversation_id)] == ["user", "assistant"] * 2


def test_event_loop_stays_responsive_while_generating(qtbot, make_window):
    window = make_window(max_new_tokens=300)
    ticks = []
    timer = QTimer(interval=10)
    timer.timeout.connect(lambda: ticks.append(__import__("time").perf_counter()))
    timer.start()
    send(qtbot, window, "The quick brown fox")
    timer.stop()
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert len(ticks) >= 3  # the loop ran during the reply (how often depends on how long the reply took)
    assert max(gaps) < 0.25  # never frozen for more than a quarter of a second


def test_markdown_rendering_keeps_the_spans(qtbot):
    transcript = Transcript()
    qtbot.addWidget(transcript)
    text = "## Title\n\nThe **library** opens at nine.\n\n- five books\n- three weeks\n"
    spans = ReplySpans()
    for phrase in ("library", "opens at nine", "five books"):
        start = text.index(phrase)
        spans.spans.append((start, start + len(phrase), "draft"))
    transcript.set_messages([MessageView(1, "assistant", text, spans)])
    document = transcript.toPlainText()
    highlighted = "".join(document[p] for p in transcript.draft_positions())
    assert highlighted == "libraryopens at ninefive books"
    assert "**" not in document and "##" not in document
    transcript.set_highlighting(False, False)
    assert transcript.draft_positions()  # still marked as drafts (tooltips), only the colour is off


def test_a_model_that_fails_to_load_is_reported_inline(qtbot, store):
    from specchat.ui.main_window import MainWindow
    from specchat.ui.session import ChatSession
    from specchat.ui.settings import AppSettings

    session = ChatSession(store, AppSettings(target="/no/such/model"))
    window = MainWindow(session)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: not session.loading, timeout=10000)
    assert window.banner.isVisible() and "could not be loaded" in window.banner.label.text()
    assert "/no/such/model" in window.banner.label.text()
    window.composer.setPlainText("hello")
    window.send()  # no model: the message stays in the box, nothing crashes
    assert window.composer.toPlainText() == "hello"
    window.close()


def test_settings_persist(qapp):
    from PySide6.QtCore import QSettings

    from specchat.ui.settings import AppSettings

    AppSettings(drafter="none", k=7, adaptive_k=False, temperature=0.7, packed_weights=False).save(QSettings())
    loaded = AppSettings.load(QSettings())
    assert (loaded.drafter, loaded.k, loaded.adaptive_k, loaded.temperature) == ("none", 7, False, 0.7)
    assert loaded.packed_weights is False


def test_turning_packed_weights_off_reloads_the_models_without_them(qtbot, store, model_folders):
    from specchat.ui.session import ChatSession
    from specchat.ui.settings import AppSettings, SettingsDialog

    settings = AppSettings(target=str(model_folders / "target"), drafter="pld")
    assert settings.model_key() != AppSettings(**{**settings.__dict__, "packed_weights": False}).model_key()
    dialog = SettingsDialog(settings, lambda target, draft: (True, ""))
    qtbot.addWidget(dialog)
    assert dialog.packed.isChecked()
    dialog.packed.setChecked(False)
    session = ChatSession(store, dialog.settings())
    qtbot.waitUntil(lambda: not session.loading, timeout=20000)
    assert session.pair is not None and session.pair.packed_weights is False
    assert session.engine_maker()().engine.runner._lean.packed is None  # the engines verify with the plain weights


def test_settings_dialog_checks_the_pair_as_the_user_picks(qtbot, tmp_path, store, tiny_pair, unrelated_draft,
                                                           model_folders):
    from tiny_models import build_byte_tokenizer

    from specchat.ui.session import ChatSession
    from specchat.ui.settings import AppSettings, SettingsDialog

    target_dir, other_dir = model_folders / "target", tmp_path / "other"
    unrelated_draft.save_pretrained(other_dir)
    build_byte_tokenizer(vocab_size=300).save_pretrained(other_dir)
    session = ChatSession(store, AppSettings(), pair=tiny_pair)
    dialog = SettingsDialog(AppSettings(target=str(target_dir), drafter="model", draft=str(other_dir)),
                            session.check_pair, check_thread=session.background)
    qtbot.addWidget(dialog)

    def checked():  # the check runs on the session's background thread (test_pair_check.py)
        qtbot.waitUntil(lambda: not dialog.pair_check.running, timeout=30000)

    checked()
    # another tokenizer: drafting goes through text (issue 21), and the dialog explains it
    assert "vocabulary sizes differ" in dialog.compat.text() and "through text" in dialog.compat.text()
    assert dialog.compat.text().startswith("✔") and dialog.ok_button.isEnabled()
    dialog.draft.set_text(str(model_folders / "draft"))
    dialog.recheck()
    assert dialog.compat.text().startswith("Checking the pair…") and not dialog.ok_button.isEnabled()
    checked()
    assert dialog.compat.text().startswith("✔") and dialog.ok_button.isEnabled()
    dialog.drafter.setCurrentIndex(dialog.drafter.findData("pld"))
    dialog.recheck()
    assert not dialog.draft.isEnabled() and dialog.settings().drafter == "pld"
    dialog.drafter.setCurrentIndex(dialog.drafter.findData("eagle-hybrid"))
    dialog.recheck()  # only the embedded target ships a draft head
    assert "No draft head is trained" in dialog.compat.text() and not dialog.ok_button.isEnabled()
    dialog.target.set_text("")
    dialog.recheck()
    assert "shipped draft head" in dialog.compat.text() and dialog.ok_button.isEnabled()


def test_partial_reply_is_on_disk_while_streaming(qtbot, make_window, store):
    window = make_window(max_new_tokens=3000)
    window.composer.setPlainText("The quick brown fox")
    window.send()
    conversation = window.conversation_id
    assert [m.role for m in store.messages(conversation)] == ["user", "assistant"]  # both saved at once
    qtbot.waitUntil(lambda: len(store.messages(conversation)[-1].text) > 0, timeout=STREAM_TIMEOUT)
    partial = store.messages(conversation)[-1]
    assert partial.stopped  # until it finishes, a crash would leave it marked as unfinished
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.stop()


def test_hovering_a_span_tells_its_origin(qtbot):
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QToolTip

    from specchat.ui.transcript import DRAFT_TIP

    transcript = Transcript()
    qtbot.addWidget(transcript)
    transcript.resize(600, 300)
    transcript.show()
    text = "Drafted words here."
    transcript.set_messages([MessageView(1, "assistant", text, ReplySpans(spans=[(0, len(text), "draft")]))])
    position = transcript.draft_positions()[3]
    cursor = transcript.textCursor()
    cursor.setPosition(position)
    point = transcript.cursorRect(cursor).center()
    event = QHelpEvent(QEvent.Type.ToolTip, point, transcript.viewport().mapToGlobal(point))
    transcript.event(event)
    assert QToolTip.text() == DRAFT_TIP


def test_edit_and_resend_replaces_the_message_and_what_followed(qtbot, make_window, store):
    window = make_window()
    send(qtbot, window, "The quick brown fox")
    send(qtbot, window, "Speculative decoding")
    first_user = store.messages(window.conversation_id)[0]
    window._on_transcript_action("edit", first_user.id)
    assert window.composer.toPlainText() == "The quick brown fox"
    window.composer.setPlainText("The lazy dog")
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()
    messages = store.messages(window.conversation_id)
    assert [(m.role, m.text if m.role == "user" else "") for m in messages] == [("user", "The lazy dog"),
                                                                               ("assistant", "")]


def test_an_edit_started_in_one_chat_never_deletes_another_chats_messages(qtbot, make_window, store):
    window = make_window()
    send(qtbot, window, "The quick brown fox")
    first = window.conversation_id
    window.new_conversation()
    send(qtbot, window, "Speculative decoding")
    send(qtbot, window, "Drafts and targets")
    second = window.conversation_id
    before = [(m.role, m.text) for m in store.messages(second)]
    window.open_conversation(first)
    window._on_transcript_action("edit", store.messages(first)[0].id)  # edit position 0 of the first chat
    window.open_conversation(second)  # then go to the other chat and send from there
    assert "Editing ended" in window.statusBar().currentMessage()
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()
    after = [(m.role, m.text) for m in store.messages(second)]
    assert after[: len(before)] == before and after[len(before)] == ("user", "The quick brown fox")
    assert [m.role for m in store.messages(first)] == ["user", "assistant"]


def test_system_prompt_is_kept_per_conversation_and_used(qtbot, make_window, store, monkeypatch):
    import specchat.engine.chat_engine as reply_sources  # where a local reply's prompt is fitted

    window = make_window()
    send(qtbot, window, "The quick brown fox")
    store.set_system_prompt(window.conversation_id, "Answer briefly.")
    prompts = []
    real_build = reply_sources.build_fitting_prompt
    monkeypatch.setattr(reply_sources, "build_fitting_prompt", lambda tok, history, system, budget: prompts.append(
        system) or real_build(tok, history, system, budget))
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.regenerate()
    assert prompts == ["Answer briefly."]
    window.new_conversation()
    send(qtbot, window, "Another chat")
    assert prompts[-1] is None


def test_race_opens_with_the_prompt_in_the_box_and_chat_waits_for_it(qtbot, make_window):
    window = make_window()
    window.composer.setPlainText("Race this")
    window.open_race()
    race = window.race_window
    assert race.isVisible() and race.prompt.toPlainText() == "Race this"
    window.session.claim_device("race")
    window.send()  # refused while the race holds the model: the text stays in the box
    assert window.composer.toPlainText() == "Race this" and window.active is None
    window.session.release_device("race")
    send(qtbot, window, "Race this")
    assert not window.session.device_busy()


def test_about_names_the_version_and_the_licences(make_window):
    from specchat import __version__
    from specchat.ui.about import AboutDialog, licence_of

    dialog = AboutDialog(make_window())
    text = dialog.text.toPlainText()
    assert f"specchat {__version__}" in text and "SmolLM2-135M-Instruct" in text and "Apache-2.0" in text
    assert "PySide6-Essentials" in text and "LGPL-3.0" in text and "torch" in text
    assert licence_of("SQLAlchemy") == "MIT" and licence_of("no-such-package") == "not installed"
    dialog.close()


@pytest.mark.clock  # the measured costs carry over: this is about the real clock
def test_replies_share_one_engine_built_off_the_gui_thread(qtbot, make_window, monkeypatch):
    """Built in the reply's worker thread (torch work on the GUI thread slowed generation in other threads) and
    once per pair and drafter, so the measured cost curve carries over from reply to reply."""
    import threading

    from specchat.engine.loading.pair import ModelPair

    built_in = []
    original = ModelPair.engine

    def spying_engine(pair, drafter, **options):
        built_in.append(threading.current_thread() is threading.main_thread())
        return original(pair, drafter, **options)

    monkeypatch.setattr(ModelPair, "engine", spying_engine)
    window = make_window()
    send(qtbot, window, "The quick brown fox")
    engine = window.session.engine_maker()().engine
    assert engine.step_costs.draft_token_s and None in engine.acceptance.counts  # measured, kept for the next reply
    send(qtbot, window, "Another one")
    assert built_in == [False]  # one engine, built in the worker's thread
    assert window.session.engine_maker()().engine is engine
    window.session.pair = ModelPair(window.session.pair.target, window.session.pair.draft)  # models reloaded
    assert window.session.engine_maker()().engine is not engine  # the old pair's engine (and models) are let go


def test_a_drafter_that_cannot_run_is_refused_before_a_reply_starts(qtbot, make_window):
    from specchat.core.errors import SpecchatError

    window = make_window(drafter="eagle")  # the tiny target has no draft head
    with pytest.raises(SpecchatError, match="no draft head"):
        window.session.engine_maker()


def test_finished_replies_feed_the_past_replies_index(qtbot, make_window):
    window = make_window(drafter="pld")
    session = window.session
    qtbot.waitUntil(lambda: session.history is not None, timeout=STREAM_TIMEOUT)  # built on the model thread
    assert "past replies" in session.status_text()
    results = []
    remember = session.remember_reply
    session.remember_reply = lambda result: (results.append(result), remember(result))
    send(qtbot, window, "The quick brown fox")
    assert session.engine_maker()().engine.drafter.history is session.history  # the chat's lookup reads it
    assert len(session.history._documents) == 1
    tokens = list(results[0].token_ids)
    found = session.history.match(tokens[:4], 3)
    assert found is not None and found.length >= 2 and found.tokens  # the reply can now be drafted from
    assert window.session.store.runs()[0].drafter == "history"  # recorded (and shown) as what drafted


def test_an_imported_chat_is_drafted_from_only_once_opened(qtbot, make_window, store):
    chat = store.create_conversation("Mine")
    store.add_message(chat.id, "user", "hi")
    store.add_message(chat.id, "assistant", "my own earlier reply")
    imported = store.import_json({"format": "specchat-conversation", "version": 1, "title": "From elsewhere",
                                  "messages": [{"role": "user", "text": "q"},
                                               {"role": "assistant", "text": "words never shown here"}]})
    window = make_window(drafter="pld")
    session = window.session
    qtbot.waitUntil(lambda: session.history is not None, timeout=STREAM_TIMEOUT)
    assert len(session.history._documents) == 1  # only the chat made in the app
    window.open_conversation(imported.id)
    qtbot.waitUntil(lambda: len(session.history._documents) == 2, timeout=STREAM_TIMEOUT)
    assert store.conversation(imported.id).in_history


def test_turning_past_replies_off_forgets_them(qtbot, make_window):
    from dataclasses import replace

    window = make_window(drafter="pld")
    session = window.session
    qtbot.waitUntil(lambda: session.history is not None, timeout=STREAM_TIMEOUT)
    session.apply_settings(replace(session.settings, draft_from_history=False))
    assert session.history is None and "past replies" not in session.status_text()
    assert session.engine_maker()().engine.drafter.history is None  # the chat's drafter reads no history


def test_a_storage_error_while_joining_past_replies_still_opens_the_chat(qtbot, make_window, store, monkeypatch):
    from specchat.core.errors import StorageError

    chat = store.create_conversation("Imported")
    store.add_message(chat.id, "user", "q")
    store.add_message(chat.id, "assistant", "an answer")

    def locked(_conversation_id):
        raise StorageError("the database is locked")

    window = make_window(drafter="pld")
    monkeypatch.setattr(store, "include_in_history", locked)
    window.open_conversation(chat.id)
    assert window.conversation_id == chat.id
    assert "an answer" in window.transcript.toPlainText()  # the chat is shown; only drafting from it waits


def test_a_chat_longer_than_the_context_window_still_gets_replies_and_keeps_every_message(
        qtbot, make_window, store):
    window = make_window(max_new_tokens=8)
    window.conversation_id = store.create_conversation("Long").id
    for i in range(12):  # about 1000 tokens of byte-level text: twice the tiny model's window of 512
        store.add_message(window.conversation_id, "user", f"question {i} " + "about the sea " * 6)
        store.add_message(window.conversation_id, "assistant", f"answer {i} " + "waves and tides " * 6)
    window.open_conversation(window.conversation_id)
    send(qtbot, window, "And the moon?")
    messages = store.messages(window.conversation_id)
    assert len(messages) == 26 and messages[-2].text == "And the moon?" and messages[-1].text
    assert messages[0].text.startswith("question 0")  # nothing deleted: only the prompt was shorter
    assert "oldest messages of this chat are left out" in window.statusBar().currentMessage()
    assert window.banner.isHidden()


def test_settings_applied_mid_reply_leave_the_reply_and_its_record_as_they_started(qtbot, make_window, store,
                                                                                   monkeypatch):
    from dataclasses import replace

    from PySide6.QtCore import QSettings

    monkeypatch.setattr(QSettings, "setValue", lambda *args: None)  # the test's settings stay out of the user's
    window = make_window(drafter="model", max_new_tokens=120)
    window.composer.setPlainText("The quick brown fox")
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()
        qtbot.waitUntil(lambda: window.active is None or bool(window.active.text), timeout=STREAM_TIMEOUT)
        # same models (no reload), other drafter and K: the reply goes on with what it started with
        window.session.apply_settings(replace(window.session.settings, drafter="model", k=9, adaptive_k=True))
        window.session.pair = None  # as a model reload would do mid-reply: the record must not need it
    reply = [m for m in store.messages(window.conversation_id) if m.role == "assistant"][0]
    run = store.run_for_message(reply.id)
    assert run is not None and (run.drafter, run.k, run.adaptive) == ("model", 4, False)
    assert run.new_tokens > 0 and window.active is None and window.banner.isHidden()


def test_only_the_newest_model_load_is_taken(qtbot, make_window, tiny_pair, store):
    from specchat.engine.loading.pair import ModelPair

    window = make_window()
    session = window.session
    older, newer = ModelPair(tiny_pair.target, tiny_pair.draft), ModelPair(tiny_pair.target, tiny_pair.draft)
    target = tiny_pair.target
    store.save_calibration(target.name, target.place, str(target.dtype), 50.0)  # measured at an earlier launch
    session._load_generation = 2  # two loads asked; the first one ends last
    session._on_loaded(newer, generation=2)
    session._on_loaded(older, generation=1)
    assert session.pair is newer and session.plain_tokens_per_s == 50.0  # the stored baseline, at once
    session._on_load_failed("the older load failed", generation=1)
    assert session.pair is newer and session.error is None


def test_a_message_sent_while_the_model_loads_is_saved_and_answered_when_ready(qtbot, make_window, store):
    window = make_window()
    window.session.loading = True  # as while ChatSession loads a pair: not ready, status_changed on each change
    window.session.status_changed.emit()
    assert window.send_button.isEnabled()
    window.composer.setPlainText("The quick brown fox")
    window.send()
    assert [m.role for m in store.messages(window.conversation_id)] == ["user"]  # saved at once
    assert window.composer.toPlainText() == "" and window.active is None
    assert "starts as soon as it is ready" in window.transcript.toPlainText()
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.session.loading = False
        window.session.status_changed.emit()
    assert [m.role for m in store.messages(window.conversation_id)] == ["user", "assistant"]
    assert "starts as soon as it is ready" not in window.transcript.toPlainText()


def test_a_model_that_fails_while_a_message_waits_keeps_it_and_says_so(qtbot, make_window, store):
    window = make_window()
    window.session.loading = True
    window.composer.setPlainText("hello")
    window.send()
    window.session.loading, window.session.pair = False, None  # the load failed: no pair
    window.session.status_changed.emit()
    assert [m.text for m in store.messages(window.conversation_id)] == ["hello"] and window.active is None
    assert "could not be loaded: your message is saved" in window.transcript.toPlainText()
