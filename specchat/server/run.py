"""Running the server: binding, the API key rule, and a clean shutdown (the CLI's `specchat serve` uses
serve_forever, the app's toggle RunningServer).

Shutting down cancels the generations first, the moment the server is told to exit (Ctrl-C, SIGTERM, the app's
stop()), so an open stream ends with finish_reason "abort" within uvicorn's graceful period instead of running to
its token limit; a waiting request gets 503. RunningServer.stop() can return at once: the app calls it on the GUI
thread, which must never wait for a busy model thread or for uvicorn.

Both run with ConnectionLimits (limits.py): deadlines on a request's headers and body, and a cap on connections."""

from __future__ import annotations

import ipaddress
import socket
import threading

import uvicorn

from ..core.errors import SpecchatError
from .app import create_app
from .guard import HostPolicy
from .jobs import DeviceLine
from .limits import ConnectionLimits
from .served import ServedModel

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
GRACEFUL_S = 2  # at shutdown, open streams get this long to end (their generations are cancelled) before they are cut


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(host: str, api_key: str | None) -> None:
    """Anyone on the network could use a server bound elsewhere than this machine: it needs a key then."""
    if not is_loopback(host) and not api_key:
        raise SpecchatError(f"binding to {host} makes the model reachable from other machines: give an API key "
                            "(SPECCHAT_API_KEY, --api-key-file FILE or --api-key KEY), or bind to 127.0.0.1")


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (port 0: any free port), bound before uvicorn starts so the URL is known at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise SpecchatError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """uvicorn's server, which cancels the generations as soon as it is told to exit (a signal)."""

    def __init__(self, config: uvicorn.Config, line: DeviceLine):
        super().__init__(config)
        self.line = line

    def handle_exit(self, sig, frame) -> None:
        self.line.close(0)  # cancel now, wait for nothing: the streams then end within the graceful period
        super().handle_exit(sig, frame)


def _config(app, limits: ConnectionLimits) -> uvicorn.Config:
    return uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=GRACEFUL_S,
                          **limits.uvicorn_options())


class RunningServer:
    """A server on its own thread (the app's toggle); stop() ends it and its generation."""

    def __init__(self, served: ServedModel, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 api_key: str | None = None, max_waiting: int = 8, run_on_device=None,
                 policy: HostPolicy | None = None, limits: ConnectionLimits | None = None):
        check_binding(host, api_key)
        limits = limits or ConnectionLimits()
        self.served = served
        self.line = DeviceLine(max_waiting, run_on_device=run_on_device)
        self.socket = bind(host, port)
        self.url = url_of(self.socket)
        self.port = self.socket.getsockname()[1]
        app = create_app(served, self.line, api_key, policy or HostPolicy(bind_host=host),
                         body_timeout_s=limits.body_timeout_s)
        self._server = _Server(_config(app, limits), self.line)
        self._thread = threading.Thread(target=self._run, name="specchat-serve-http", daemon=True)

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self.socket.close()  # uvicorn closes it at shutdown; this also covers a start that failed

    def start(self) -> RunningServer:
        self._thread.start()
        return self

    def stop(self, timeout_s: float | None = 10.0) -> bool:
        """Cancels the generations (a stream ends with "abort", a waiting request with 503), then tells uvicorn to
        exit. timeout_s None returns at once (the window: stopped() says when it is over); otherwise it waits
        that long for the server's thread. Returns whether the server has stopped."""
        self.line.close(0)
        self._server.should_exit = True
        if not self._thread.is_alive() and self._thread.ident is None:  # never started
            self.socket.close()
        elif timeout_s is not None:
            self._thread.join(timeout_s)
        return self.stopped()

    def stopped(self) -> bool:
        """True once the server has shut down (its port is free again)."""
        return not self._thread.is_alive()


def serve_forever(served: ServedModel, host: str, port: int, api_key: str | None, max_waiting: int,
                  announce=print, policy: HostPolicy | None = None, limits: ConnectionLimits | None = None) -> None:
    """The CLI's server: runs until Ctrl-C or SIGTERM (uvicorn handles the signal and shuts down gracefully, after
    the generations are cancelled)."""
    check_binding(host, api_key)
    limits = limits or ConnectionLimits()
    line = DeviceLine(max_waiting)
    sock = bind(host, port)
    announce(f"specchat serve: {served.model_id} (drafter {served.drafter}) on {url_of(sock)}/v1"
             + (" · API key required" if api_key else "") + f" · context {served.context_size} tokens")
    try:
        app = create_app(served, line, api_key, policy or HostPolicy(bind_host=host),
                         body_timeout_s=limits.body_timeout_s)
        _Server(_config(app, limits), line).run(sockets=[sock])
    finally:
        line.close()
        sock.close()
