"""What `specchat serve` refuses, and what a client sees when the server cuts its reply short.

The servers here run in this process (RunningServer, as the app's switch runs it) on the tiny model of
server_fixtures.py, bound to 127.0.0.1 on a free port; one test starts a real `specchat serve` process and sends it
SIGTERM. Every request has a timeout and every wait a deadline.

- Host and Origin (DNS rebinding): a Host that is not a loopback name or address, or one allowed, gets 421; an
  Origin that is not a loopback one, or one allowed, gets 403, preflight included, and no generation runs.
- The key is checked on the path the router matches, whatever the Host header says; a POST must be JSON (415);
  a body over the limit gets 413, whether its size is declared or not.
- Bounds: max_tokens beyond the served context (400), a prompt that does not fit, seed and top_k beyond int64,
  stop strings too long, unsupported parameters named in the 400.
- Tokenizing runs off the event loop: a slow template does not hold up /health.
- A non-streamed client that disconnects cancels its generation.
- A restart (stop() of the app's server) or a shutdown (SIGTERM) mid-reply: the stream ends with finish_reason
  "abort" and an error event, a non-streamed request gets 503; stop() returns at once.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import httpx2 as httpx
import openai
import pytest
from server_fixtures import planned_server, stop_server, wait_until

from specchat.engine.decoding.speculative import GenerationConfig
from specchat.server.guard import MAX_BODY_BYTES
from specchat.server.protocol import MAX_STOP_CHARS
from specchat.server.served import ServedModel

TIMEOUT = 60
SERVERS = {"shutdown": ("--max-new-tokens", "4000")}  # a server process, started with the session's others
HELLO = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def post(url: str, body, **options) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT, **options)


# --- Host and Origin ---------------------------------------------------------------------------------------------

def test_a_host_name_that_is_not_this_machine_is_refused_with_421(serve):
    server = serve()
    port = server.port
    for host in ("attacker.example:18999", f"attacker.example:{port}", "127.0.0.1.nip.io", "localhost.attacker.example"):
        for answer in (httpx.get(f"{server.url}/v1/models", headers={"Host": host}, timeout=TIMEOUT),
                       post(server.url, HELLO, headers={"Host": host})):
            assert answer.status_code == 421, host
            error = answer.json()["error"]
            assert error["code"] == "host_not_allowed" and "--allowed-host" in error["message"]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}", f"api.localhost:{port}"):
        assert httpx.get(f"{server.url}/v1/models", headers={"Host": host}, timeout=TIMEOUT).status_code == 200
    assert server.line.load() == (0, 0)


def test_a_configured_host_name_is_answered(serve):
    from specchat.server.guard import HostPolicy

    server = serve(policy=HostPolicy(allowed_hosts=("box.lan",)))
    assert httpx.get(f"{server.url}/v1/models", headers={"Host": "box.lan:8000"}, timeout=TIMEOUT).status_code == 200
    assert httpx.get(f"{server.url}/v1/models", headers={"Host": "other.lan"}, timeout=TIMEOUT).status_code == 421


def test_a_web_page_from_another_origin_is_refused_with_403_and_runs_nothing(serve):
    server = serve()
    evil = {"Origin": "https://attacker.example"}
    answer = post(server.url, HELLO, headers=evil)
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in answer.headers
    preflight = httpx.options(f"{server.url}/v1/chat/completions", timeout=TIMEOUT, headers={
        **evil, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
    assert preflight.status_code == 403
    for origin in ("null", "http://127.0.0.1.attacker.example"):
        assert post(server.url, HELLO, headers={"Origin": origin}).status_code == 403
    local = post(server.url, HELLO, headers={"Origin": "http://localhost:3000"})
    assert local.status_code == 200 and local.headers["access-control-allow-origin"] == "http://localhost:3000"


def test_a_configured_origin_may_use_the_api_with_cors(serve):
    from specchat.server.guard import HostPolicy

    server = serve(policy=HostPolicy(allowed_origins=("https://app.example",)))
    preflight = httpx.options(f"{server.url}/v1/chat/completions", timeout=TIMEOUT, headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    assert post(server.url, HELLO, headers={"Origin": "https://app.example"}).status_code == 200
    assert post(server.url, HELLO, headers={"Origin": "https://other.example"}).status_code == 403


# --- the key, the content type, the body ------------------------------------------------------------------------

def test_the_key_is_checked_on_the_routed_path_whatever_the_host_says(serve):
    from specchat.server.guard import HostPolicy

    server = serve(api_key="s3cret", policy=HostPolicy(allowed_hosts=("*",)))  # the Host check out of the way
    for host in ("x?", "localhost?", "localhost#", f"localhost:{server.port}/x?"):  # CVE-2026-48710's trick
        answer = httpx.get(f"{server.url}/v1/models", headers={"Host": host}, timeout=TIMEOUT)
        assert answer.status_code == 401, host
    assert httpx.get(f"{server.url}/v1/models", timeout=TIMEOUT).status_code == 401
    assert httpx.get(f"{server.url}//v1/models", timeout=TIMEOUT).status_code == 401
    assert post(server.url, HELLO).status_code == 401
    assert httpx.get(f"{server.url}/health", timeout=TIMEOUT).status_code == 200
    keyed = {"Authorization": "Bearer s3cret"}
    assert httpx.get(f"{server.url}/v1/models", headers=keyed, timeout=TIMEOUT).status_code == 200


def test_a_post_that_is_not_json_gets_415(serve):
    server = serve()
    body = json.dumps(HELLO).encode()
    for kind in (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        headers = {"Content-Type": kind} if kind else {}
        answer = httpx.post(f"{server.url}/v1/chat/completions", content=body, headers=headers, timeout=TIMEOUT)
        assert answer.status_code == 415, kind
        assert answer.json()["error"]["code"] == "unsupported_media_type"
    answer = httpx.post(f"{server.url}/v1/chat/completions", content=body, timeout=TIMEOUT,
                        headers={"Content-Type": "application/json; charset=utf-8"})
    assert answer.status_code == 200


def test_a_body_over_the_limit_gets_413_declared_or_streamed(serve):
    server = serve()
    big = {**HELLO, "messages": [{"role": "user", "content": "x" * (MAX_BODY_BYTES + 10)}]}
    answer = post(server.url, big)
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "request_too_large"

    def chunks():  # no Content-Length: the limit is counted as the body arrives
        yield b'{"model": "tiny", "messages": [{"role": "user", "content": "'
        for _ in range(MAX_BODY_BYTES // (1 << 16) + 2):
            yield b"x" * (1 << 16)
        yield b'"}]}'

    answer = httpx.post(f"{server.url}/v1/chat/completions", content=chunks(), timeout=TIMEOUT,
                        headers={"Content-Type": "application/json"})
    assert answer.status_code == 413
    assert post(server.url, HELLO).status_code == 200  # and the server goes on


# --- bounds ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, param", [
    ({"max_tokens": 10**30}, "max_tokens"),
    ({"max_tokens": 257}, "max_tokens"),
    ({"max_completion_tokens": 10**6}, "max_completion_tokens"),
    ({"seed": 2**63}, "seed"),
    ({"seed": -(2**63) - 1}, "seed"),
    ({"top_k": 2**63}, "top_k"),
    ({"stop": ["x" * (MAX_STOP_CHARS + 1)]}, "stop"),
    ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"functions": [{"name": "f", "parameters": {}}]}, "functions"),
    ({"best_of": 2}, "best_of"),
    ({"repetition_penalty": 1.3}, "repetition_penalty"),
    ({"messages": [{"role": "user", "content": "word " * 300}]}, "messages"),
])
def test_values_beyond_the_bounds_get_a_400_naming_them(serve, change, param):
    server = serve(context_size=256)
    answer = post(server.url, {**HELLO, **change})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["message"]
    assert server.line.load() == (0, 0)


def test_suffix_is_refused_on_completions_and_harmless_values_pass(serve):
    server = serve(context_size=256)
    answer = httpx.post(f"{server.url}/v1/completions", timeout=TIMEOUT,
                        json={"model": "tiny", "prompt": "The quick", "suffix": "end", "max_tokens": 4})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "suffix"
    harmless = {"logit_bias": {}, "response_format": {"type": "text"}, "best_of": 1, "top_logprobs": 0,
                "user": "someone", "seed": 2**63 - 1, "top_k": 2**63 - 1}
    assert post(server.url, {**HELLO, **harmless}).status_code == 200


def test_the_served_context_is_fixed_and_a_reply_that_does_not_fit_is_cut_to_it(serve, served_pair):
    server = serve(context_size=256)
    card = httpx.get(f"{server.url}/v1/models", timeout=TIMEOUT).json()["data"][0]
    assert card["specchat"]["context_window"] == 256
    reply = post(server.url, {**HELLO, "max_tokens": 250, "messages": [{"role": "user", "content": "word " * 40}]})
    assert reply.status_code == 200
    usage = reply.json()["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= 256
    assert reply.json()["choices"][0]["finish_reason"] == "length"
    # in the process too: a reply to token ids is cut to the room the served context leaves
    events = list(server.served.stream_ids(list(range(5, 205)), GenerationConfig(max_new_tokens=250)))
    assert events[-1].result.stats.prompt_tokens + events[-1].result.stats.new_tokens <= 256


def test_tokenizing_runs_off_the_event_loop(serve, monkeypatch):
    server = serve()
    started, release = threading.Event(), threading.Event()
    chat_prompt = ServedModel.chat_prompt

    def slow_template(self, request, *documents):
        started.set()
        release.wait(20)
        return chat_prompt(self, request, *documents)

    monkeypatch.setattr(ServedModel, "chat_prompt", slow_template)
    outcome = {}
    threading.Thread(target=lambda: outcome.update(answer=post(server.url, HELLO)), daemon=True).start()
    assert started.wait(20)
    began = time.monotonic()
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200  # the loop is free meanwhile
    assert time.monotonic() - began < 2
    release.set()
    wait_until(lambda: "answer" in outcome, TIMEOUT)
    assert outcome["answer"].status_code == 200


# --- disconnects, restarts and shutdowns -------------------------------------------------------------------------

def recording_results(monkeypatch) -> list:
    """The results of the server's generations, as each job ends."""
    import specchat.server.app as app

    results = []
    answer_job = app.answer_job

    def recording(job, events):
        result = answer_job(job, events)
        results.append(result)
        return result

    monkeypatch.setattr(app, "answer_job", recording)
    return results


def raw_request(url: str, body: dict) -> socket.socket:
    """A non-streamed request on a plain socket, so that the test can close it whenever it likes."""
    host, port = url.removeprefix("http://").split(":")
    connection = socket.create_connection((host, int(port)), timeout=TIMEOUT)
    data = json.dumps(body).encode()
    connection.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return connection


def test_a_non_streamed_client_that_disconnects_cancels_its_generation(serve, monkeypatch):
    server = serve()
    results = recording_results(monkeypatch)
    connection = raw_request(server.url, {**HELLO, "max_tokens": 4000, "messages": [
        {"role": "user", "content": "Cancel me"}]})
    wait_until(lambda: server.line.load()[0] == 1, 30)
    time.sleep(0.3)
    connection.close()  # the client leaves mid-generation
    wait_until(lambda: results, 30)
    assert results[0].finish_reason == "cancelled" and results[0].stats.new_tokens < 4000
    assert server.line.load() == (0, 0)
    assert post(server.url, HELLO).status_code == 200  # and the server goes on serving


def test_a_restart_mid_reply_is_an_abort_for_a_stream_and_a_503_otherwise(serve, served_pair):
    server = serve()
    api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=TIMEOUT)
    stream = iter(api.chat.completions.create(model="tiny", max_tokens=4000, stream=True,
                                              messages=[{"role": "user", "content": "Hold the device"}]))
    next(stream)
    waiting = {}
    threading.Thread(target=lambda: waiting.update(answer=post(server.url, {**HELLO, "max_tokens": 8})),
                     daemon=True).start()
    wait_until(lambda: server.line.load() == (1, 1), 30)
    began = time.monotonic()
    server.stop(timeout_s=None)  # what the window does: it must not wait
    assert time.monotonic() - began < 0.5
    chunks = []
    with pytest.raises(openai.APIError, match="restarting or shutting down"):
        for chunk in stream:
            chunks.append(chunk)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["abort"]  # never "stop" for a reply cut short
    wait_until(lambda: "answer" in waiting, 30)
    assert waiting["answer"].status_code == 503
    assert server.stop(20)


def test_a_restart_mid_non_streamed_reply_is_a_503_not_a_partial_200(serve):
    server = serve()
    outcome = {}
    threading.Thread(target=lambda: outcome.update(answer=post(server.url, {**HELLO, "max_tokens": 4000})),
                     daemon=True).start()
    wait_until(lambda: server.line.load()[0] == 1, 30)
    time.sleep(0.3)
    server.stop(timeout_s=None)
    wait_until(lambda: "answer" in outcome, 30)
    answer = outcome["answer"]
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "aborted"


def test_a_shutdown_mid_reply_tells_the_client(request):
    server = planned_server(request, "shutdown")
    try:
        with httpx.stream("POST", f"{server.url}/v1/chat/completions", timeout=TIMEOUT, json={
                "model": "tiny", "stream": True, "max_tokens": 4000,
                "messages": [{"role": "user", "content": "Hold the device"}]}) as answer:
            lines = answer.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            server.process.send_signal(signal.SIGTERM)
            rest = [line for line in lines if line.startswith("data: ")]
        events = [json.loads(line[6:]) for line in rest if line != "data: [DONE]"]
        finishes = [e["choices"][0]["finish_reason"] for e in events if e.get("choices")
                    and e["choices"][0]["finish_reason"]]
        assert finishes == ["abort"] and events[-1]["error"]["code"] == "aborted"
        assert rest[-1] == "data: [DONE]"
        server.process.wait(30)
    finally:
        if server.process.poll() is None:
            stop_server(server)
    assert "Traceback" not in "".join(server.log)
