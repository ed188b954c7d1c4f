"""A real HTTP server on 127.0.0.1 for the fake Hubs and hostile servers of the tests, on its own thread.

Quiet about clients that go away (a cancelled download, a refused TLS handshake), and quick to stop: serve_forever
looks for a shutdown every POLL_S (the standard library's default of 0.5 s, paid at every test's teardown, was most
of those tests' time).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
