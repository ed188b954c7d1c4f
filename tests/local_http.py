"""A real HTTP server on 127.0.0.1 for the fake Hubs and hostile servers of the tests, on its own thread.

Quiet about clients that go away (a cancelled download, a refused TLS handshake), and quick to stop: serve_forever
looks for a shutdown every POLL_S (the standard library's default of 0.5 s, paid at every test's teardown, was most
of those tests' time).
"""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

POLL_S = 0.01


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that hung up mid-answer is what these tests provoke


def start_server(handler: type[BaseHTTPRequestHandler], tls=None) -> tuple[QuietServer, str]:
    """Serves `handler` on a free port of 127.0.0.1 (wrapped in the ssl context `tls` when given); returns the
    server and its URL."""
    server = QuietServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    scheme = "https" if tls is not None else "http"
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True).start()
    return server, f"{scheme}://127.0.0.1:{server.server_address[1]}"


def stop_server(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


def serve_get(answer: Callable[[BaseHTTPRequestHandler], None]) -> tuple[QuietServer, str]:
    """Serves GET requests with answer(handler) (HTTP/1.1, no request log; a client that went away mid-answer is
    ignored); returns the server and its URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 - http.server's name
            try:
                answer(self)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away (a cancelled download)

    return start_server(Handler)


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict | None = None) -> None:
    """A whole answer: the status, the headers with the body's Content-Length, the body."""
    handler.send_response(status)
    for name, value in {**(headers or {}), "Content-Length": str(len(body))}.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


def send_file_head(handler: BaseHTTPRequestHandler, content: bytes) -> int:
    """The status and headers of a file answer that honours a "bytes=N-" Range (206 from N, else 200); returns N,
    where the body the caller writes starts."""
    wanted = handler.headers.get("Range")
    start = int(re.fullmatch(r"bytes=(\d+)-", wanted)[1]) if wanted else 0
    handler.send_response(206 if start else 200)
    if start:
        handler.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}")
    handler.send_header("Content-Length", str(len(content) - start))
    handler.end_headers()
    return start
