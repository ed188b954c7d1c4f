"""The window's API switch: the loaded models over HTTP, on the window's own model thread, with its URL shown."""

from __future__ import annotations

import threading

import httpx2 as httpx
import openai
from PySide6.QtCore import QThread

from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.speculative import GenerationConfig

TIMEOUT = 120000


def ask_in_background(url: str, text: str, max_tokens: int = 12) -> dict:
    """The request runs on a plain thread: the GUI thread must stay free to hand the work to the model thread."""
    outcome: dict = {}

    def ask():
        try:
            api = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=TIMEOUT / 1000)
            model = api.models.list().data[0].id
            outcome["reply"] = api.chat.completions.create(
                model=model, messages=[{"role": "user", "content": text}], max_tokens=max_tokens)
        except Exception as error:  # reported to the test
            outcome["error"] = error
        outcome["done"] = True

    threading.Thread(target=ask, daemon=True).start()
    return outcome


def test_the_switch_serves_the_loaded_model_on_the_model_thread(qtbot, make_window, store, tiny_pair, monkeypatch):
    window = make_window(drafter="pld", max_new_tokens=12)
    switch = window.api_server
    threads = []
    from specchat.server.served import ServedModel

    stream = ServedModel.stream

    def recording(self, *args, **kwargs):
        threads.append(QThread.currentThread())
        return stream(self, *args, **kwargs)

    monkeypatch.setattr(ServedModel, "stream", recording)
    switch.action.setChecked(True)
    assert switch.url and switch.url.startswith("http://127.0.0.1:") and switch.label.isVisible()
    assert switch.url in switch.label.text()
    outcome = ask_in_background(switch.url, "The quick brown fox")
    qtbot.waitUntil(lambda: "done" in outcome, timeout=TIMEOUT)
    assert "error" not in outcome, outcome.get("error")
    prompt = build_prompt_ids(tiny_pair.target.tokenizer, [Message("user", "The quick brown fox")])
    plain = tiny_pair.engine("none").generate(prompt, GenerationConfig(max_new_tokens=12)).text
    assert outcome["reply"].choices[0].message.content == plain
    assert threads == [window.session.model_thread.thread_object()]  # the window's one model thread
    assert switch.server.served.engines is window.session.engines  # the chat's engines: one cache
    assert [run.source for run in store.runs()][-1:] == ["api"]

    url = switch.url
    switch.action.setChecked(False)
    assert switch.server is None and not switch.label.isVisible()
    qtbot.waitUntil(lambda: refused(url), timeout=10000)  # it shuts down on its own threads


def test_the_server_follows_new_settings_and_stops_with_the_window(qtbot, make_window):
    window = make_window(drafter="pld", max_new_tokens=12)
    switch = window.api_server
    switch.action.setChecked(True)
    first = switch.server
    assert first is not None and first.served.drafter == "pld"
    settings = window.session.settings
    settings.drafter = "model"
    url = switch.url
    window.session.status_changed.emit()  # what apply_settings does once the settings are saved
    assert switch.server is None  # the old one is stopping; the new one waits for its port, on a timer
    qtbot.waitUntil(lambda: switch.server is not None, timeout=10000)
    assert switch.server is not first and switch.server.served.drafter == "model"
    assert switch.url == url  # the same port again: clients keep their URL
    window.close()
    assert switch.server is None
    qtbot.waitUntil(lambda: refused(url), timeout=10000)


def refused(url: str) -> bool:
    try:
        httpx.get(url.removesuffix("/v1") + "/health", timeout=5)
    except httpx.ConnectError:
        return True
    return False
