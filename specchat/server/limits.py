"""Connection limits of `specchat serve`, below the app: deadlines on a request's headers and a cap on connections.

uvicorn closes a keep-alive connection that stays idle between requests (timeout_keep_alive), but it waits for ever
for a request's headers: a client that connects and sends nothing, or sends its headers a byte at a time
(slowloris), holds a connection open, and with --host 0.0.0.0 it does so before the API key is checked. Here:
- the headers of each request must be complete within `header_timeout_s` of its first byte (of the connection, for
  the first request), however steadily bytes arrive; otherwise the client gets a 408 JSON error and the connection
  is closed;
- the body must arrive within `body_timeout_s` (guard.py reads it: 408 too);
- at most `max_connections` are open at once: the next one gets a 503 JSON error and is closed at once;
- a request h11 cannot parse (a Content-Length that is not a number or comes twice, a bad chunk size, two Host
  headers) gets the API's 400 JSON error, not uvicorn's plain-text one, and the connection is closed.
The protocol is uvicorn's h11 implementation with a timer per connection; nothing else of it changes.
"""

from __future__ import annotations

import http
import json
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .protocol import ApiError


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may take to send a request's headers and its body, how long an idle keep-alive
    connection stays open, and how many connections may be open at once."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0  # a body is at most guard.MAX_BODY_BYTES (4 MiB)
    keep_alive_s: float = 5.0  # uvicorn's default
    max_connections: int = 64

    def uvicorn_options(self) -> dict:
        """The uvicorn.Config arguments that apply them (the body's deadline is guard.py's)."""
        return {"http": protocol_with(self), "timeout_keep_alive": self.keep_alive_s}


def protocol_with(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's HTTP protocol class (Config's `http`), keeping `limits`."""
    return type("LimitedH11Protocol", (LimitedH11Protocol,), {"limits": limits})


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with a deadline on each request's headers and a cap on open connections."""

    limits = ConnectionLimits()

    def connection_made(self, transport) -> None:
        """Counts the connection (uvicorn), refuses it when there are too many, and starts the headers' clock."""
        self._deadline = None  # (the phase it watches, its timer)
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refuse(ApiError(503, f"the server has {self.limits.max_connections} connections open, the most "
                                       "it takes; try again shortly", type="server_error", code="server_busy"))
            return
        self._follow()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _waiting_for_headers(self) -> bool:
        """True while a request's headers are incomplete: a new connection's first request, or bytes of a later
        one (an idle keep-alive connection is uvicorn's timeout_keep_alive's)."""
        if self.transport is None or self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return False
        return self.cycle is None or bool(self.conn.trailing_data[0])

    def _follow(self) -> None:
        """Starts the headers' clock when they begin to arrive, stops it when they are complete; a clock that runs
        is left running, so bytes that keep coming do not move the deadline."""
        waiting = self._waiting_for_headers()
        if waiting == (self._deadline is not None):
            return
        self._disarm()
        if waiting:
            self._deadline = self.loop.call_later(self.limits.header_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self._waiting_for_headers():
            self._refuse(ApiError(408, f"the request's headers did not arrive within "
                                       f"{self.limits.header_timeout_s:g} s; the connection is closed",
                                  code="request_timeout"))

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 cannot parse (its `msg` is a fixed sentence), as the API's JSON error,
        sent through h11 so that it is framed as HTTP/1.1; then the connection is closed."""
        error = ApiError(400, "the request is not valid HTTP/1.1 (its request line, a header, its Content-Length or "
                              "its chunked body); the connection is closed", code="malformed_http")
        body = json.dumps(error.body()).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        try:
            for event in (h11.Response(status_code=400, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
        except h11.LocalProtocolError:  # a response had begun: nothing more can be framed on this connection
            pass
        self.transport.close()

    def _refuse(self, error: ApiError) -> None:
        """Answers `error` as JSON, outside h11 (no request was read), and closes the connection."""
        body = json.dumps(error.body()).encode()
        head = (f"HTTP/1.1 {error.status} {http.HTTPStatus(error.status).phrase}\r\ncontent-type: application/json"
                f"\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
        self.transport.write(head + body)
        self.transport.close()
