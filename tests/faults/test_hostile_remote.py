"""A hostile remote engine (API → Chat with a remote engine, `specchat bench --remote`): what the client refuses.

Each server here is a real HTTP server on 127.0.0.1 whose answers a test writes byte by byte: a body larger than
any model list, a streamed line that never ends, chunks that are not JSON objects or carry impossible counts,
/metrics with impossible labels and values, a redirect to another server, a self-signed HTTPS certificate, a
server that never sends its headers or sends them a byte at a time, a stream of comments alone. Each case ends in a
RemoteError with a one-line message (or, for metrics, no figures) within a bounded time; nothing grows without
bound. Text from the server (its model id) is shown in the window as plain text. Every socket has a timeout, every
wait a deadline.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
from local_http import start_server, stop_server
from PySide6.QtCore import Qt

from specchat.core.errors import SpecchatError
from specchat.engine.chat_prompt import Message
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.remote import RemoteEndpoint, RemoteEngine, RemoteError, SpecDecodeCounters, delta
from specchat.remote.engine import plain_http_key_warning
from specchat.remote.transport import MAX_JSON_BYTES, MAX_LINE_BYTES

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": "vllm"}]}).encode()
BOUND_S = 15  # no case may take longer


class FakeServer:
    """Answers each GET/POST with routes[path](handler); every request's path and headers are recorded."""

    def __init__(self, routes: dict, tls: ssl.SSLContext | None = None):
        self.routes, self.requests = routes, []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = BOUND_S

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - http.server's names
                self.answer()

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self.answer()

            def answer(self):
                server.requests.append((self.command, self.path, dict(self.headers)))
                route = server.routes.get(self.path.split("?")[0])
                try:
                    if route is None:
                        send(self, 404, b'{"error": {"message": "no such path"}}')
                    else:
                        route(self)
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
                    pass  # the client went away, as it should

        self.server, self.url = start_server(Handler, tls)

    def close(self):
        self.release.set()
        stop_server(self.server)


def send(handler, status: int, body: bytes, headers: dict | None = None) -> None:
    handler.send_response(status)
    for name, value in {"Content-Type": "application/json", **(headers or {}), "Content-Length": str(len(body))}.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


def models(handler):
    send(handler, 200, MODELS)


def stream_of(*events: bytes, tail: bytes = b"data: [DONE]\n\n"):
    """A route that streams these raw server-sent-event bytes (no Content-Length: until the connection closes)."""
    def route(handler):
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        for event in events:
            handler.wfile.write(event)
        handler.wfile.write(tail)
        handler.close_connection = True
    return route


@pytest.fixture
def serve():
    servers = []

    def start(routes: dict, tls=None) -> FakeServer:
        server = FakeServer(routes, tls)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def refused(call) -> RemoteError:
    began = time.monotonic()
    with pytest.raises(RemoteError) as raised:
        call()
    assert time.monotonic() - began < BOUND_S
    message = str(raised.value)
    assert isinstance(raised.value, SpecchatError) and "\n" not in message and len(message) < 500
    assert raised.value.__cause__ is None
    return raised.value


def reply(url: str, max_tokens: int = 16, cancel=None, read_timeout_s: float = 3):
    endpoint = RemoteEndpoint(url, timeout_s=2)
    engine = RemoteEngine(endpoint, endpoint.connect(), read_timeout_s=read_timeout_s)
    return list(engine.stream([Message("user", "hi")], config=GenerationConfig(max_new_tokens=max_tokens),
                              cancel=cancel or threading.Event()))


def chunk(content=None, completion_tokens=None, **fields) -> bytes:
    body = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}], **fields}
    if completion_tokens is not None:
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": completion_tokens}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


# --- bodies and lines without end -----------------------------------------------------------------------------

def test_a_model_list_larger_than_the_limit_is_refused(serve):
    def huge(handler):
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.end_headers()  # no length: it would go on for ever
        block = b" " * (1 << 20)
        for _ in range(MAX_JSON_BYTES // len(block) + 4):
            handler.wfile.write(block)
        handler.close_connection = True

    server = serve({"/v1/models": huge})
    error = refused(lambda: RemoteEndpoint(server.url, timeout_s=2).connect())
    assert error.kind == "protocol" and "more than 8 MiB" in str(error)


def test_a_streamed_line_that_never_ends_is_refused(serve):
    line = b"data: " + b"x" * (MAX_LINE_BYTES + 10)
    server = serve({"/v1/models": models, "/v1/chat/completions": stream_of(line, tail=b"")})
    error = refused(lambda: reply(server.url))
    assert error.kind == "protocol" and "line longer than 1 MiB" in str(error)


def trickle(server: FakeServer, first: bytes, drip: bytes):
    """A route that sends `first`, then `drip` every 50 ms, each well within any read timeout, until the test ends
    (at most 2 * BOUND_S): only an overall deadline ends the read."""
    def route(handler):
        handler.wfile.write(first)
        handler.wfile.flush()
        end = time.monotonic() + 2 * BOUND_S
        while not server.release.wait(0.05) and time.monotonic() < end:
            handler.wfile.write(drip)
            handler.wfile.flush()
        handler.close_connection = True
    return route


def test_headers_sent_a_byte_at_a_time_meet_an_overall_deadline(serve):
    server = serve({})
    server.routes["/v1/models"] = trickle(server, b"HTTP/1.1 200 OK\r\n", b"X-Slow: 1\r\n")
    error = refused(lambda: RemoteEndpoint(server.url, timeout_s=1).connect())
    assert error.kind == "timeout" and "within 3 s" in str(error)
    server.routes.update({"/v1/models": models, "/v1/chat/completions": trickle(
        server, b"HTTP/1.1 200 OK\r\n", b"X-Slow: 1\r\n")})
    error = refused(lambda: reply(server.url, read_timeout_s=1.5))  # 30 times the 50 ms between the bytes
    assert error.kind == "timeout" and "headers" in str(error) and "within 1.5 s" in str(error)


def test_a_stream_of_comments_alone_meets_a_deadline(serve):
    server = serve({"/v1/models": models})
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    server.routes["/v1/chat/completions"] = trickle(server, head + chunk("ok", 1), b": keep-alive\n\n")
    error = refused(lambda: reply(server.url, read_timeout_s=1.5))  # 30 times the 50 ms between the comments
    assert error.kind == "timeout" and "no complete event for 1.5 s" in str(error)


# --- malformed chunks --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("event, words", [
    (b"data: [1, 2, 3]\n\n", "not an object"),
    (b'data: "text"\n\n', "not an object"),
    (b"data: {not json\n\n", "not JSON"),
    (b"data: " + b"[" * 100000 + b"\n\n", "not JSON"),  # nesting deeper than the parser's recursion
    (b'data: {"choices": {"0": {}}}\n\n', "choices are not a list"),
    (b'data: {"choices": [{"delta": ["x"]}]}\n\n', "delta is not text"),
    (b'data: {"choices": [{"delta": {"content": 5}}]}\n\n', "delta is not text"),
    (chunk("x", completion_tokens=10**9), "10"),
    (chunk("x", completion_tokens=-4), "completion tokens"),
])
def test_a_chunk_that_is_not_what_the_format_says_is_a_clear_error(serve, event, words):
    server = serve({"/v1/models": models, "/v1/chat/completions": stream_of(chunk("ok", 1), event)})
    error = refused(lambda: reply(server.url))
    assert error.kind == "protocol" and words in str(error)


def test_a_server_that_sends_more_than_was_asked_is_stopped(serve):
    endless = [chunk("word ") for _ in range(200)]  # no usage: one token a chunk, far beyond max_tokens
    server = serve({"/v1/models": models, "/v1/chat/completions": stream_of(*endless)})
    error = refused(lambda: reply(server.url, max_tokens=16))
    assert "more of a reply than was asked for" in str(error)
    origins = {"choices": [{"delta": {"content": "x"}}], "specchat": {"origins": ["draft"] * 10**5}}
    exact = serve({"/v1/models": lambda h: send(h, 200, json.dumps({"data": [{"id": "m", "specchat": {}}]}).encode()),
                   "/v1/chat/completions": stream_of(b"data: " + json.dumps(origins).encode() + b"\n\n")})
    assert "more of a reply" in str(refused(lambda: reply(exact.url, max_tokens=16)))


# --- metrics ---------------------------------------------------------------------------------------------------

BAD_METRICS = """# a server's /metrics, each line wrong in its own way
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="²"} 5
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="٣"} 5
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="999999999"} 5
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 3
vllm:spec_decode_num_drafts_total +Inf
vllm:spec_decode_num_draft_tokens_total NaN
vllm:spec_decode_num_accepted_tokens_total 1e308
vllm:spec_decode_num_accepted_tokens_total 1e308
vllm:spec_decode_num_draft_tokens_total{engine="1"} -7
not a sample at all {{{
"""


def test_metrics_with_impossible_labels_and_values_give_no_figures_and_no_error(serve):
    counters = SpecDecodeCounters.from_text(BAD_METRICS)
    assert counters.accepted_per_position == (3.0,)  # only the ASCII position below the bound counts
    assert counters.drafts is None
    change = delta(counters, SpecDecodeCounters.from_text(BAD_METRICS.replace("} 3", "} 4")))
    assert change.alpha is None and change.tau is None
    sglang = SpecDecodeCounters.from_text("sglang:spec_accept_rate 7\nsglang:spec_accept_length -1\n")
    assert delta(None, sglang).alpha is None and delta(None, sglang).tau is None
    server = serve({"/v1/models": models, "/metrics": lambda h: send(h, 200, BAD_METRICS.encode())})
    info = RemoteEndpoint(server.url, timeout_s=2).connect()  # connects; the metrics give what they can
    assert info.model == "m" and info.has_metrics


def test_a_metrics_read_is_cancelled_at_once(serve):
    server = serve({"/v1/models": models})
    server.routes["/metrics"] = lambda handler: server.release.wait(BOUND_S)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    began = time.monotonic()
    assert RemoteEndpoint(server.url, timeout_s=10).read_spec_counters(cancel) is None
    assert time.monotonic() - began < 2  # not the 10 s timeout


def test_stop_is_heard_before_the_server_sends_its_headers(serve):
    server = serve({"/v1/models": models})
    server.routes["/v1/chat/completions"] = lambda handler: server.release.wait(BOUND_S)
    endpoint = RemoteEndpoint(server.url, timeout_s=2)
    engine = RemoteEngine(endpoint, endpoint.connect(), read_timeout_s=60)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    began = time.monotonic()
    events = list(engine.stream([Message("user", "hi")], config=GenerationConfig(max_new_tokens=8), cancel=cancel))
    assert time.monotonic() - began < 2  # not the 60 s read timeout
    assert events[-1].result.finish_reason == "cancelled" and events[-1].result.text == ""


# --- redirects, TLS, credentials ----------------------------------------------------------------------------------

def test_a_redirect_to_another_host_is_not_followed(serve):
    other = serve({"/v1/models": models})
    server = serve({"/v1/models": lambda h: send(h, 302, b"", {"Location": f"{other.url}/v1/models"})})
    error = refused(lambda: RemoteEndpoint(server.url, api_key="k3y", timeout_s=2).connect())
    assert "redirect" in str(error) and "HTTP 302" in str(error) and other.url in str(error)
    assert other.requests == []  # the key never went there


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_a_self_signed_certificate_is_refused(serve, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server = serve({"/v1/models": models}, tls=tls)
    error = refused(lambda: RemoteEndpoint(server.url, api_key="k3y", timeout_s=2).connect())
    assert "certificate is not trusted" in str(error) and error.kind == "unreachable"
    assert server.requests == []  # no request was sent over it, so neither was the key


def test_credentials_in_the_address_are_neither_kept_nor_sent(serve):
    server = serve({"/v1/models": models})
    address = server.url.replace("http://", "http://alice:hunter2@") + "/v1"
    info = RemoteEndpoint(address, timeout_s=2).connect()
    assert "hunter2" not in info.url and "alice" not in info.name and info.name == f"m at {server.url[7:]}"
    assert all("hunter2" not in json.dumps(headers) for _, _, headers in server.requests)


def test_a_key_over_plain_http_to_another_machine_is_warned_about():
    assert "unencrypted" in plain_http_key_warning("http://10.0.0.5:8000", "k3y")
    assert plain_http_key_warning("https://10.0.0.5:8000", "k3y") is None
    assert plain_http_key_warning("http://127.0.0.1:8000", "k3y") is None
    assert plain_http_key_warning("http://localhost:8000", "k3y") is None
    assert plain_http_key_warning("http://10.0.0.5:8000", None) is None


def test_the_keys_on_the_command_line_are_discouraged_in_help_and_read_from_env_or_file(tmp_path, monkeypatch,
                                                                                          capsys):
    from specchat.commands.options import secret_from

    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    monkeypatch.setenv("SPECCHAT_API_KEY", "from-env")
    assert secret_from(None, key_file, "SPECCHAT_API_KEY", "--api-key") == "from-file"
    assert secret_from(None, None, "SPECCHAT_API_KEY", "--api-key") == "from-env"
    monkeypatch.setenv("SPECCHAT_API_KEY", " from-env \n")  # trimmed, as the server trims the client's key
    assert secret_from(None, None, "SPECCHAT_API_KEY", "--api-key") == "from-env"
    monkeypatch.setenv("SPECCHAT_API_KEY", "   ")
    assert secret_from(None, None, "SPECCHAT_API_KEY", "--api-key") is None
    assert capsys.readouterr().err == ""
    assert secret_from("typed", None, "SPECCHAT_API_KEY", "--api-key") == "typed"
    assert "ps" in capsys.readouterr().err
    with pytest.raises(SpecchatError, match="empty"):
        (tmp_path / "empty").write_text("")
        secret_from(None, tmp_path / "empty", "SPECCHAT_API_KEY", "--api-key")
    import sys

    from specchat.commands.options import without_keys

    assert without_keys(["bench", "--remote-key", "k3y", "--api-key=k3y", "--out", "r.json"]) == [
        "bench", "--remote-key", "…", "--api-key=…", "--out", "r.json"]  # what a bench report records
    for command, words in ((["serve", "--help"], ("SPECCHAT_API_KEY", "--api-key-file")),
                           (["bench", "--help"], ("SPECCHAT_REMOTE_KEY", "--remote-key-file"))):
        done = subprocess.run([sys.executable, "-m", "specchat", *command], capture_output=True, text=True,
                              timeout=120)
        text = " ".join(done.stdout.split())
        assert all(word in text for word in words), command


# --- the window shows a server's text as text -------------------------------------------------------------------

HOSTILE_ID = "<img src='http://127.0.0.1:9/x.png'><a href='https://attacker.example'>click</a>"


def test_a_remote_model_id_with_markup_is_shown_as_plain_text(qtbot, make_window, serve):
    body = json.dumps({"data": [{"id": HOSTILE_ID, "owned_by": "vllm"}]}).encode()
    server = serve({"/v1/models": lambda h: send(h, 200, body)})
    window = make_window()
    switch = window.remote_target
    with qtbot.waitSignal(switch.connected, timeout=BOUND_S * 1000):
        switch.connect_to(server.url)
    assert switch.label.textFormat() == Qt.TextFormat.PlainText and HOSTILE_ID in switch.label.text()
    assert "<img" not in switch.label.toolTip() and "&lt;img" in switch.label.toolTip()
    window.open_race()
    race = window.race_window
    race._refresh_drafter_boxes()
    tip = next(box.toolTip() for drafter, box in race.drafter_boxes.items() if drafter == "remote")
    assert "<img" not in tip and "&lt;img" in tip
    assert race.settings_label.textFormat() == Qt.TextFormat.PlainText
    assert window.model_label.textFormat() == Qt.TextFormat.PlainText
    assert window.banner.label.textFormat() == Qt.TextFormat.PlainText


def test_chart_labels_show_a_remote_name_as_written(qtbot):
    """Qt Charts draws legends and axis labels as HTML; a group named after a remote model is escaped for them."""
    from specchat.ui.dashboard.charts import GroupBarsChart

    chart = GroupBarsChart("Acceptance", "acceptance.png", "position", "accepted", percent=True)
    qtbot.addWidget(chart)
    chart.show_bars(["1", HOSTILE_ID], [(HOSTILE_ID, "#1f77b4", [50.0, 20.0])], 100.0, "none")
    assert chart.x_axis.categories() == ["1", "&lt;img src='http://127.0.0.1:9/x.png'&gt;&lt;a "
                                         "href='https://attacker.example'&gt;click&lt;/a&gt;"]
    assert chart.bar_series.barSets()[0].label().startswith("&lt;img")
    assert list(chart.bar_values()) == [HOSTILE_ID]  # what the chart says, as written
