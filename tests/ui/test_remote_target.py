"""The chat with a remote engine: a real `specchat serve` process as the target, chosen in the API menu."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QTextCharFormat
from server_fixtures import (data_dir, plain_reply, planned_server, served_model_dir, served_pair,  # noqa: F401
                             server_pool, stop_server)

from specchat.chats.reply_spans import ReplySpans
from specchat.core.vocabulary import INFERRED_ORIGIN, Origin
from specchat.engine.decoding.events import GenerationStats, StepEvent
from specchat.ui.transcript import INFERRED_TIP, MessageView, Transcript

TIMEOUT = 120000


SERVERS = {"remote": ("--k", "4", "--no-adaptive")}  # started with the session's others (server_fixtures.py)


@pytest.fixture(scope="module")
def remote_server(request):
    running = planned_server(request, "remote")  # its data folder is data_dir
    yield running
    stop_server(running)


def test_a_remote_reply_is_the_servers_plain_decoding_with_its_origins(qtbot, make_window, store, remote_server,
                                                                       served_pair):  # noqa: F811
    window = make_window(drafter="pld", max_new_tokens=24)
    switch = window.remote_target
    with qtbot.waitSignal(switch.connected, timeout=TIMEOUT) as connected:
        switch.connect_to(remote_server.url)
    assert "exact draft highlighting" in connected.args[0]
    assert switch.label.isVisible() and "(exact)" in switch.label.text()

    window.composer.setPlainText("The quick brown fox")
    with qtbot.waitSignal(window.reply_finished, timeout=TIMEOUT):
        window.send()
    reply = store.messages(window.conversation_id)[-1]
    assert reply.role == "assistant" and reply.text == plain_reply(served_pair, "The quick brown fox", 24)
    assert {origin for _, _, origin in reply.spans} <= {"draft", "target"}  # exact: the server's own
    run = store.run_for_message(reply.id)
    assert run.drafter == "remote pld" and run.speedup is None
    assert "tiny at 127.0.0.1" in [row.target for row in store.runs() if row.drafter == "remote pld"][-1]
    assert "remote pld" in window.session.run_footer(reply.id) and "K=" not in window.session.run_footer(reply.id)

    switch.disconnect()  # back to the local models: the next reply is the local pair's
    assert switch.connection is None and not switch.label.isVisible()


def test_a_remote_endpoint_that_is_not_there_is_a_clear_message(qtbot, make_window):
    window = make_window()
    with qtbot.waitSignal(window.remote_target.failed, timeout=TIMEOUT) as failed:
        window.remote_target.connect_to("http://127.0.0.1:9")
    assert "127.0.0.1:9" in failed.args[0] and "Traceback" not in failed.args[0]
    assert window.remote_target.connection is None and "Could not connect" in window.statusBar().currentMessage()


def test_inferred_drafts_are_highlighted_with_their_own_label(qtbot):
    """Tokens a remote engine sent together in one step: the draft colour, dotted underline, an 'inferred' tip,
    live and once the reply is rendered from its stored spans."""
    transcript = Transcript()
    qtbot.addWidget(transcript)
    transcript.begin_reply("")
    text = "Paris is big"
    event = StepEvent(
        token_ids=(-1, -1, -1), origins=(Origin.INFERRED_DRAFT, Origin.INFERRED_DRAFT, Origin.TARGET),
        spans=((0, 5), (5, 8), (8, 12)), text_delta=text, text_offset=0, rejected_ids=(), rejected_text="",
        stats=GenerationStats(), wall_s=0.0)
    transcript.append_stream(event)
    live = transcript.draft_positions(INFERRED_ORIGIN)
    assert len(live) == len("Paris is")
    spans = ReplySpans()  # as the reply controller gathers the step (chats/reply_controller.py)
    spans.add_tokens(event.spans, event.origins)
    assert spans.to_json() == [[0, 8, "inferred"], [8, 12, "target"]]

    transcript.set_messages([MessageView(1, "assistant", text, ReplySpans.from_json(spans.to_json()))])
    rendered = transcript.draft_positions(INFERRED_ORIGIN)
    assert len(rendered) == len("Paris is") and transcript.draft_positions() == []
    cursor = transcript.textCursor()
    cursor.setPosition(rendered[0] + 1)
    fmt = cursor.charFormat()
    assert fmt.underlineStyle() == QTextCharFormat.UnderlineStyle.DotLine and fmt.toolTip() == INFERRED_TIP


def test_the_race_view_races_the_remote_engine_beside_the_local_lanes(qtbot, store, remote_server,
                                                                      served_pair):  # noqa: F811
    """Same model here and on the server: the remote lane's greedy text is plain decoding's; its speed is another
    machine's, so no speedup is claimed; its run is stored under the remote model."""
    from specchat.ui.main_window import MainWindow
    from specchat.ui.session import ChatSession
    from specchat.ui.settings import AppSettings

    session = ChatSession(store, AppSettings(drafter="pld", max_new_tokens=16, k=4, adaptive_k=False),
                          pair=served_pair)
    window = MainWindow(session)
    qtbot.addWidget(window)
    window.open_race()
    race = window.race_window
    assert not race.drafter_boxes["remote"].isEnabled()  # nothing to race before a connection
    with qtbot.waitSignal(window.remote_target.connected, timeout=TIMEOUT):
        window.remote_target.connect_to(remote_server.url)
    assert race.drafter_boxes["remote"].isEnabled()
    for drafter, box in race.drafter_boxes.items():
        box.setChecked(drafter in ("pld", "remote"))
    race.prompt.setPlainText("The quick brown fox")
    race.max_tokens.setValue(16)
    with qtbot.waitSignal(race.race_finished, timeout=TIMEOUT):
        race.start_race()
    assert [t.drafter for t in race.tracks] == ["none", "pld", "remote"]
    plain, _, remote = race.tracks
    assert remote.text == plain.text and remote.same_output(plain)
    cells = [race.results.item(2, column).text() for column in range(race.results.columnCount())]
    assert "other machine" in cells and "✓ yes" in cells
    rows = [row for row in store.runs() if row.source == "race" and row.drafter == "remote"]
    assert rows and "tiny at 127.0.0.1" in rows[-1].target and rows[-1].speedup is None
    window.close()


def test_the_dashboards_benchmark_measures_the_remote_engine_too(qtbot, store, remote_server, served_pair,
                                                                  tmp_path):  # noqa: F811
    import json

    from specchat.bench import BenchRunner, BenchSettings, load_prompts
    from specchat.remote import RemoteEndpoint
    from specchat.ui.main_window import MainWindow
    from specchat.ui.session import ChatSession
    from specchat.ui.settings import AppSettings

    session = ChatSession(store, AppSettings(drafter="pld", max_new_tokens=16, k=4, adaptive_k=False),
                          pair=served_pair)
    window = MainWindow(session)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.remote_target.connected, timeout=TIMEOUT):
        window.remote_target.connect_to(remote_server.url)
    window.open_dashboard()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "chat", "turns": ["The quick brown fox"]}),
                       encoding="utf-8")
    with qtbot.waitSignal(window.dashboard.benchmark_finished, timeout=TIMEOUT):
        assert window.dashboard.start_benchmark(str(prompts), limit=0, max_new_tokens=8)
    runs = {row.drafter: row for row in store.runs() if row.source == "bench"}
    assert set(runs) == {"none", "pld", "remote"}
    assert "tiny at 127.0.0.1" in runs["remote"].target and runs["remote"].speedup is None
    assert runs["remote"].new_tokens == runs["none"].new_tokens == 8

    # the same runner without Qt: the remote reply is plain decoding's text, and no speedup is claimed for it
    endpoint = RemoteEndpoint(remote_server.url)
    runner = BenchRunner(served_pair, BenchSettings(k=4, adaptive=False, max_new_tokens=8, repeats=1),
                         remote=endpoint.engine(endpoint.connect()))
    records = runner.run(load_prompts(prompts.read_text().splitlines(), "prompts.jsonl"), ["none", "remote"])
    remote = next(r for r in records if r.mode == "remote")
    assert remote.identical and remote.speedup is None
    window.close()
