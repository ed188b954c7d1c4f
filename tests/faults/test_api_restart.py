"""The app's API server stopped or restarted while a request waits for a busy model thread.

The model thread is held by other work (as by a long chat reply); an API request is then waiting for it. Turning
the server off (or a settings change, which restarts it) must return at once on the GUI thread, and the waiting
client must hear a 503 within a few seconds rather than wait for the model thread; a streamed client whose reply
is cut short sees finish_reason "abort" and an error, never "stop". Every wait has a deadline.
"""

from __future__ import annotations

import threading
import time

import httpx2 as httpx
import openai

from specchat.ui.workers import FunctionWorker

TIMEOUT_S = 60


def hold_model_thread(window) -> threading.Event:
    """Work on the window's model thread that runs until the returned event is set (20 s at most)."""
    release, holding = threading.Event(), threading.Event()

    def hold():
        holding.set()
        release.wait(20)

    window.session.model_thread.submit(FunctionWorker(hold))
    assert holding.wait(20)
    return release


def post_in_background(url: str, body: dict) -> dict:
    outcome: dict = {}

    def ask():
        try:
            outcome["answer"] = httpx.post(f"{url}/chat/completions", json=body, timeout=TIMEOUT_S)
        except httpx.TransportError as error:
            outcome["error"] = error

    threading.Thread(target=ask, daemon=True).start()
    return outcome


def test_stopping_while_the_model_thread_is_busy_returns_at_once_and_the_client_gets_503(qtbot, make_window):
    window = make_window(drafter="pld", max_new_tokens=12)
    switch = window.api_server
    switch.action.setChecked(True)
    server = switch.server
    model = httpx.get(f"{switch.url}/models", timeout=TIMEOUT_S).json()["data"][0]["id"]
    release = hold_model_thread(window)
    try:
        outcome = post_in_background(switch.url, {"model": model, "messages": [{"role": "user", "content": "hi"}]})
        qtbot.waitUntil(lambda: server.line.load() == (1, 0), timeout=20000)  # handed over, waiting for the thread
        began = time.monotonic()
        switch.action.setChecked(False)
        assert time.monotonic() - began < 0.5  # the GUI thread did not wait
        qtbot.waitUntil(lambda: "answer" in outcome or "error" in outcome, timeout=10000)
        assert outcome["answer"].status_code == 503  # told at once, while the model thread is still busy
        assert not release.is_set()
        qtbot.waitUntil(server.stopped, timeout=10000)
    finally:
        release.set()


def test_a_restart_mid_stream_is_an_abort_and_the_url_stays(qtbot, make_window, monkeypatch):
    from specchat.server.jobs import Job

    put = Job.put
    monkeypatch.setattr(Job, "put", lambda job, item: (time.sleep(0.02), put(job, item)))  # a slower model
    window = make_window(drafter="pld", max_new_tokens=12)
    switch = window.api_server
    switch.action.setChecked(True)
    url = switch.url
    api = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=TIMEOUT_S)
    model = api.models.list().data[0].id
    outcome: dict = {"chunks": []}

    def read():
        try:
            for chunk in api.chat.completions.create(model=model, max_tokens=400, stream=True,
                                                     messages=[{"role": "user", "content": "Hold the device"}]):
                outcome["chunks"].append(chunk)
        except openai.APIError as error:
            outcome["error"] = error
        outcome["done"] = True

    threading.Thread(target=read, daemon=True).start()
    qtbot.waitUntil(lambda: len(outcome["chunks"]) >= 2, timeout=30000)
    began = time.monotonic()
    window.session.settings.drafter = "model"
    window.session.status_changed.emit()  # a settings change: the server restarts
    assert time.monotonic() - began < 0.5
    qtbot.waitUntil(lambda: "done" in outcome, timeout=20000)
    finishes = [c.choices[0].finish_reason for c in outcome["chunks"] if c.choices and c.choices[0].finish_reason]
    assert finishes == ["abort"] and "restarting" in str(outcome["error"])
    qtbot.waitUntil(lambda: switch.server is not None, timeout=10000)
    assert switch.url == url and switch.server.served.drafter == "model"
