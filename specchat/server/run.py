"""Running the server: binding, the API key rule, and a clean shutdown (the CLI's `specchat serve` and the app's
toggle both use serve_in_thread or serve_forever)."""

from __future__ import annotations

import ipaddress
import socket
import threading

import uvicorn

from ..engine import SpecchatError
from .app import create_app
from .jobs import DeviceLine
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
                            "(--api-key KEY or SPECCHAT_API_KEY), or bind to 127.0.0.1")


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


class RunningServer:
    """A server on its own thread (the app's toggle); stop() ends it and its generation."""

    def __init__(self, served: ServedModel, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 api_key: str | None = None, max_waiting: int = 8, run_on_device=None):
        check_binding(host, api_key)
        self.served = served
        self.line = DeviceLine(max_waiting, run_on_device=run_on_device)
        self.socket = bind(host, port)
        self.url = url_of(self.socket)
        app = create_app(served, self.line, api_key)
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on",
                                                    timeout_graceful_shutdown=GRACEFUL_S))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.socket]},
                                        name="specchat-serve-http", daemon=True)

    def start(self) -> RunningServer:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Cancels the generations first: uvicorn's shutdown waits for open connections, so a stream would
        otherwise run to its token limit while the caller (the window) waits."""
        self.line.close(timeout_s)
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self.socket.close()
        return not self._thread.is_alive()


def serve_forever(served: ServedModel, host: str, port: int, api_key: str | None, max_waiting: int,
                  announce=print) -> None:
    """The CLI's server: runs until Ctrl-C (uvicorn handles the signal and shuts down gracefully)."""
    check_binding(host, api_key)
    line = DeviceLine(max_waiting)
    sock = bind(host, port)
    announce(f"specchat serve: {served.model_id} (drafter {served.drafter}) on {url_of(sock)}/v1"
             + (" · API key required" if api_key else ""))
    config = uvicorn.Config(create_app(served, line, api_key), log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=GRACEFUL_S)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        line.close()
        sock.close()
