"""HTTP to a remote OpenAI-compatible server, with every read bounded: the standard library's http.client.

The server is untrusted. Each answer is read up to a limit (MAX_JSON_BYTES for the model list and /health,
MAX_METRICS_BYTES for /metrics, MAX_ERROR_BYTES for an error's body) and within a deadline (a server that trickles
bytes cannot hold a read open forever, its headers included); a streamed line is at most MAX_LINE_BYTES and an event
MAX_EVENT_BYTES, and a stream must complete an event within its read timeout (comments alone do not keep it open);
redirects are never followed (a 3xx is an error naming where it pointed) and HTTPS certificates are verified. A
cancel event, where given, is watched from the moment the connection is open: it shuts the socket down, which ends
a read blocked on a slow server at once, before the response headers as well as after them. Every failure is a
RemoteError with a one-line message (no traceback) and a `kind` the UI can act on.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import re
import socket
import ssl
import threading
import time
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

from ..core.errors import SpecchatError

CANCEL_POLL_S = 0.05  # how often the watcher looks at the cancel event
MAX_JSON_BYTES = 8 << 20  # the model list, /health
MAX_METRICS_BYTES = 8 << 20  # /metrics (vLLM's is about 100 kB with many series)
MAX_ERROR_BYTES = 64 << 10  # the body of an error answer: only its message is shown
MAX_LINE_BYTES = 1 << 20  # one line of a streamed answer
MAX_EVENT_BYTES = 4 << 20  # one server-sent event (its data lines together)
READ_CHUNK = 64 << 10


class RemoteError(SpecchatError):
    """A remote endpoint could not be used. kind: "address", "unreachable", "timeout", "auth", "model",
    "not_found", "busy", "request", "server" or "protocol"."""

    def __init__(self, message: str, kind: str = "server"):
        super().__init__(message)
        self.kind = kind


def _root_url(base_url: str) -> str:
    """"host:8000", "http://host:8000/" or ".../v1" -> "http://host:8000" (the API is under /v1). A user name and
    password in the address (user:pass@host) are dropped: they would be shown and stored with the target's name,
    and they are never sent (the key goes in the API key field)."""
    url = base_url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise RemoteError(f"{without_credentials(base_url)!r} has no valid port", "address") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"{without_credentials(base_url)!r} is not an http:// or https:// address", "address")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host if port is None else f"{host}:{port}"
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urlunsplit((parts.scheme, netloc, path, "", ""))


def without_credentials(text: str) -> str:
    """The address `text` without its user name and password ("http://user:pass@host/v1" -> "http://host/v1"):
    what an error message or the UI shows, so that a password typed into an address is never displayed."""
    return re.sub(r"^(\s*[A-Za-z][A-Za-z0-9+.-]*://)?[^/@]*@", r"\1", text)


def is_loopback_host(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_http_key_warning(root: str, api_key: str | None) -> str | None:
    """A warning when an API key would travel unencrypted (http://) to another machine, else None."""
    parts = urlsplit(root)
    if not api_key or parts.scheme != "http" or is_loopback_host(parts.hostname):
        return None
    return (f"the API key would be sent unencrypted to {parts.netloc} (http://): anyone on the network between "
            "could read it; use https:// for a server on another machine")


def _transport_error(error: BaseException, url: str, timeout_s: float) -> RemoteError:
    """A socket or HTTP failure as one line the user can act on."""
    if isinstance(error, TimeoutError):
        return RemoteError(f"{url} did not answer within {timeout_s:g} s", "timeout")
    if isinstance(error, ConnectionRefusedError):
        return RemoteError(f"cannot reach {url}: nothing is listening there (connection refused); is the server "
                           "running, and are the host and port right?", "unreachable")
    if isinstance(error, socket.gaierror):
        return RemoteError(f"cannot reach {url}: the host {urlsplit(url).hostname!r} is unknown", "unreachable")
    if isinstance(error, ssl.SSLCertVerificationError):
        return RemoteError(f"refused {url}: its HTTPS certificate is not trusted ({error.verify_message or error}); "
                           "specchat verifies certificates, so a self-signed one must be added to the system's "
                           "trusted certificates (or SSL_CERT_FILE)", "unreachable")
    if isinstance(error, ssl.SSLError):
        return RemoteError(f"cannot talk to {url} over HTTPS: {error.reason or error}", "unreachable")
    if isinstance(error, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
        return RemoteError(f"{url} closed the connection without a complete answer", "protocol")
    if isinstance(error, http.client.HTTPException):
        return RemoteError(f"{url} did not answer in HTTP ({type(error).__name__})", "protocol")
    return RemoteError(f"cannot reach {url}: {getattr(error, 'strerror', None) or error}", "unreachable")


def _server_message(body: bytes) -> str:
    """The explanation in an error answer: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or the text; one
    line of at most 300 characters."""
    text = body[:MAX_ERROR_BYTES].decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    message = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            message = str(error["message"])
        for key in ("error", "detail", "message"):
            if message is None and isinstance(data.get(key), str) and data[key]:
                message = data[key]
    message = " ".join((message or text).split())
    return (message[:297] + "..." if len(message) > 300 else message) or "no details"


def _status_error(status: int, body: bytes, url: str, what: str, key_given: bool,
                  location: str | None = None) -> RemoteError:
    message = _server_message(body)
    if 300 <= status < 400:
        where = f" to {' '.join(location.split())[:200]!r}" if location else ""
        return RemoteError(f"{url} answered {what} with a redirect (HTTP {status}{where}); specchat does not follow "
                           "redirects: give the server's own address", "request")
    if status in (401, 403):
        problem = "refused the API key" if key_given else "needs an API key"
        return RemoteError(f"{url} {problem} (HTTP {status}: {message}); check the key in the remote engine's "
                           "settings", "auth")
    if status == 404:
        return RemoteError(f"{url} answered 404 to {what}: {message}", "not_found")
    if status == 429:
        return RemoteError(f"{url} is busy (HTTP 429: {message}); try again shortly", "busy")
    if status >= 500:
        return RemoteError(f"{url} failed on {what} (HTTP {status}: {message})", "server")
    return RemoteError(f"{url} refused {what} (HTTP {status}: {message})", "request")


class Deadline:
    """When a read must be over: `seconds` from its start, or from the last push() (a stream's next event). The
    watch (cancel_watch) sets `expired` when it cuts the connection for it: a server that trickles its headers
    byte by byte, or sends only comments, cannot hold a read open, however often each byte comes."""

    def __init__(self, seconds: float):
        self.seconds, self.expired = seconds, False
        self.at = time.monotonic() + seconds

    def push(self) -> None:
        self.at = time.monotonic() + self.seconds

    def passed(self) -> bool:
        return time.monotonic() > self.at


@contextlib.contextmanager
def cancel_watch(connection: http.client.HTTPConnection, cancel: threading.Event | None,
                 deadline: Deadline | None = None):
    """While the block runs, a thread shuts the connection's socket down as soon as `cancel` is set or `deadline`
    passes (then marked expired), so that a read (or the wait for the headers) blocked on the server ends at once."""
    if cancel is None and deadline is None:
        yield
        return
    over = threading.Event()

    def watch():
        while not over.is_set():
            if cancel is not None and cancel.wait(CANCEL_POLL_S):
                break  # Stop
            if cancel is None and over.wait(CANCEL_POLL_S):
                return  # the block has ended
            if deadline is not None and deadline.passed():
                deadline.expired = True
                break
        if not over.is_set():
            with contextlib.suppress(OSError, AttributeError):  # AttributeError: no socket, closed already
                connection.sock.shutdown(socket.SHUT_RDWR)

    threading.Thread(target=watch, name="specchat-remote-cancel", daemon=True).start()
    try:
        yield
    finally:
        over.set()


def read_bounded(response: http.client.HTTPResponse, limit: int, deadline: float, url: str, what: str) -> bytes:
    """The whole body, or RemoteError when it is longer than `limit` or still arriving at `deadline`."""
    chunks, size = [], 0
    while True:
        chunk = response.read1(READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise RemoteError(f"{url} answered {what} with more than {limit >> 20 or 1} MiB; is it an "
                              "OpenAI-compatible server?", "protocol")
        if time.monotonic() > deadline:
            raise RemoteError(f"{url} was still sending its answer to {what} after the time allowed", "timeout")
        chunks.append(chunk)


class _Http:
    """Requests to one server; every failure becomes a RemoteError."""

    def __init__(self, root: str, api_key: str | None, timeout_s: float):
        parts = urlsplit(root)
        self.root, self.api_key, self.timeout_s = root, api_key, timeout_s
        self._https = parts.scheme == "https"
        self._host, self._port, self._prefix = parts.hostname, parts.port, parts.path

    def headers(self, json_body: bool = False) -> dict[str, str]:
        headers = {"User-Agent": "specchat", **({"Content-Type": "application/json"} if json_body else {})}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def connect(self) -> http.client.HTTPConnection:
        if self._https:
            connection = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout_s,
                                                     context=ssl.create_default_context())
        else:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)
        try:
            connection.connect()
        except OSError as error:
            connection.close()
            raise _transport_error(error, self.root, self.timeout_s) from None
        return connection

    def send(self, connection: http.client.HTTPConnection, method: str, path: str,
             body: dict | None = None) -> http.client.HTTPResponse:
        data = None if body is None else json.dumps(body).encode()
        try:
            connection.request(method, self._prefix + path, body=data, headers=self.headers(data is not None))
            return connection.getresponse()
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise _transport_error(error, self.root, self.timeout_s) from None

    def request(self, method: str, path: str, body: dict | None = None, limit: int = MAX_JSON_BYTES,
                cancel: threading.Event | None = None) -> tuple[int, bytes]:
        """(status, body) of one request: the headers and the body read up to `limit` bytes (an error's up to
        MAX_ERROR_BYTES) within three times the timeout, or a RemoteError of kind "timeout"; a set `cancel` ends
        it with a RemoteError of kind "cancelled"."""
        watch = Deadline(3 * self.timeout_s)
        deadline = watch.at
        connection = self.connect()
        try:
            with cancel_watch(connection, cancel, watch):
                response = self.send(connection, method, path, body)  # its own errors are RemoteErrors already
                if 300 <= response.status < 400:
                    raise _status_error(response.status, b"", self.root, f"{method} {path}", bool(self.api_key),
                                        response.getheader("Location"))
                limit = limit if response.status == 200 else MAX_ERROR_BYTES
                try:
                    body = read_bounded(response, limit, deadline, self.root, f"{method} {path}")
                except RemoteError:
                    if response.status == 200:
                        raise
                    body = b""  # an error answer's body is only its message
                if watch.expired:  # the read ended because the connection was cut: what came is not all
                    raise RemoteError("cut at the deadline")
                return response.status, body
        except (OSError, http.client.HTTPException, RemoteError) as error:
            if cancel is not None and cancel.is_set():
                raise RemoteError(f"the request to {self.root}{path} was cancelled", "cancelled") from None
            if watch.expired:
                raise RemoteError(f"{self.root} did not answer {method} {path} within {watch.seconds:g} s",
                                  "timeout") from None
            if isinstance(error, RemoteError):
                raise
            raise _transport_error(error, self.root, self.timeout_s) from None
        finally:
            connection.close()


class _ServerSentEvents:
    """The JSON data of each event of one streamed answer, until `data: [DONE]`. The cancel watcher runs from the
    moment the connection is open, so Stop is heard while the server has not sent its headers yet; a stream
    cancelled then simply yields nothing (`cancelled` is true). The headers, and then each event, must arrive
    within read_timeout_s (a Deadline the watcher keeps): a RemoteError of kind "timeout" otherwise."""

    def __init__(self, http_: _Http, path: str, body: dict, what: str, read_timeout_s: float,
                 cancel: threading.Event | None):
        self._http, self.cancel = http_, cancel
        self.connection = http_.connect()
        self.connection.sock.settimeout(read_timeout_s)
        self._read_timeout_s = read_timeout_s
        self.deadline = Deadline(read_timeout_s)
        self._watch = cancel_watch(self.connection, cancel, self.deadline)
        self._watch.__enter__()
        self.response = None
        try:
            self.response = http_.send(self.connection, "POST", path, body)
            if self.deadline.expired:  # the headers ended because the connection was cut
                raise RemoteError("cut at the deadline")
        except RemoteError:
            if not self.cancelled:
                self.close()
                if self.deadline.expired:
                    raise RemoteError(f"{http_.root} did not send the headers of {what} within "
                                      f"{read_timeout_s:g} s", "timeout") from None
                raise
            self.response = None
            return
        self.deadline.push()
        if self.response.status != 200:
            try:
                answer = read_bounded(self.response, MAX_ERROR_BYTES, time.monotonic() + http_.timeout_s,
                                      http_.root, what)
            except (RemoteError, OSError, http.client.HTTPException):
                answer = b""
            location = self.response.getheader("Location")
            self.close()
            raise _status_error(self.response.status, answer, http_.root, what, bool(http_.api_key), location)

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def __iter__(self) -> Iterator[dict]:
        data: list[str] = []
        size = 0
        while self.response is not None and not self.cancelled:
            raw = self._line()
            if raw is None:  # the server closed the stream, or Stop
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
                size += len(line)
                if size > MAX_EVENT_BYTES:
                    raise RemoteError(f"{self._http.root} streamed an event larger than {MAX_EVENT_BYTES >> 20} "
                                      "MiB", "protocol")
            elif not line and data:  # a blank line ends an event
                text, data, size = "\n".join(data), [], 0
                if text.strip() == "[DONE]":
                    return
                self.deadline.push()
                yield self._parse(text)
                self.deadline.push()  # the time the caller took is not the server's

    def _line(self) -> bytes | None:
        try:
            raw = self.response.readline(MAX_LINE_BYTES + 1)
        except (OSError, http.client.HTTPException, ValueError) as error:
            if self.cancelled:
                return None
            if self.deadline.expired:
                raise self._no_event() from None
            raise _transport_error(error, self._http.root, self._read_timeout_s) from None
        if self.deadline.expired and not self.cancelled:  # the read ended because the connection was cut
            raise self._no_event()
        if len(raw) > MAX_LINE_BYTES:
            raise RemoteError(f"{self._http.root} streamed a line longer than {MAX_LINE_BYTES >> 20} MiB; is it an "
                              "OpenAI-compatible server?", "protocol")
        return raw or None

    def _no_event(self) -> RemoteError:
        return RemoteError(f"{self._http.root} sent no complete event for {self._read_timeout_s:g} s (only comments "
                           "or a line that did not end)", "timeout")

    def _parse(self, text: str) -> dict:
        try:
            chunk = json.loads(text)
        except (ValueError, RecursionError):
            raise RemoteError(f"{self._http.root} streamed something that is not JSON: {text[:80]!r}",
                              "protocol") from None
        if not isinstance(chunk, dict):
            raise RemoteError(f"{self._http.root} streamed JSON that is not an object: {text[:80]!r}",
                              "protocol")
        return chunk

    def close(self) -> None:
        self._watch.__exit__(None, None, None)
        self.connection.close()
