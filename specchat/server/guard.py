"""What every request to `specchat serve` (and the app's API switch) passes before it reaches an endpoint.

Plain ASGI middleware, in this order (the outermost first):
1. HostAndOriginGuard. DNS rebinding: a web page the user opens can make its own domain resolve to 127.0.0.1 and
   then talk to this server as if it were its own site, reading the replies. The browser then sends that domain as
   the Host header, so a Host that is not a loopback name or address, or a name the user allowed (--allowed-host),
   gets 421 (Ollama checks the same after CVE-2024-28224). A request whose Origin header (which browsers send with
   every cross-site POST) is not allowed gets 403: pages from loopback origins and those given with
   --allowed-origin may use the API; no other web page may, not even blindly. Clients that are not browsers send no
   Origin and are not affected.
2. Starlette's CORSMiddleware, for the allowed origins only: it answers their preflight requests and adds the
   headers that let their pages read the replies.
3. RequestLimits: the API key (on scope["path"], the path the router matches, never the URL rebuilt from the Host
   header: with Starlette before 1.0.1 `Host: x?` made `request.url.path` empty and skipped the key,
   CVE-2026-48710), `Content-Type: application/json` on every POST (415 otherwise: a page cannot send a JSON body
   with a "simple" content type that skips the preflight), and a bound on the body (413): the body is read here, up
   to MAX_BODY_BYTES and within BODY_TIMEOUT_S (408 after it, and the connection closed), and replayed to the
   endpoint. (The headers' deadline and the cap on connections are below the app: limits.py.)
Each refusal is OpenAI's JSON error object with a message that says what to change.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import re
import socket
from dataclasses import dataclass, field

from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse

from .protocol import ApiError

MAX_BODY_BYTES = 4 << 20  # a request's body; 4 MiB holds far more text than the served context
BODY_TIMEOUT_S = 60.0  # the whole body must arrive within this (a client that trickles it holds a connection)
OPEN_PATHS = ("/health",)  # answered without the key (liveness probes); everything else needs it when one is set
LOOPBACK_ORIGIN = r"https?://(localhost|[a-z0-9.-]+\.localhost|127(\.\d{1,3}){3}|\[::1\])(:\d{1,5})?"


def _host_name(host: str) -> str:
    """ "Example.COM:8000" -> "example.com", "[::1]:8000" -> "::1", "localhost." -> "localhost"."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback_name(name: str) -> bool:
    """localhost, a name under .localhost (RFC 6761: always this machine), or a loopback address."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostPolicy:
    """Which Host and Origin headers the server accepts.

    allowed_hosts: names the user configured (--allowed-host; "*" accepts any Host). Loopback names and addresses
    are always accepted; a server bound beyond loopback (which needs a key) also accepts any IP address (a page
    cannot rebind an address, only a name) and this machine's own host name. allowed_origins: origins the user
    configured (--allowed-origin, e.g. "http://localhost:3000" or "https://app.example"; "*" any); origins on
    loopback are always accepted."""

    bind_host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    _names: frozenset[str] = field(init=False, repr=False, default=frozenset())

    def __post_init__(self):
        names = {_host_name(host) for host in self.allowed_hosts if host.strip()}
        if not is_loopback_name(_host_name(self.bind_host)):
            names |= {_host_name(n) for n in _machine_names()}
        object.__setattr__(self, "_names", frozenset(names))

    def host_allowed(self, host: str | None) -> bool:
        """A request without Host (HTTP/1.0) is no browser's: accepted."""
        if not host or "*" in self._names:
            return True
        name = _host_name(host)
        if is_loopback_name(name) or name in self._names:
            return True
        return _is_ip(name) and not is_loopback_name(_host_name(self.bind_host))

    def origins(self) -> list[str]:
        return [origin.strip().rstrip("/").lower() for origin in self.allowed_origins if origin.strip()]

    def origin_allowed(self, origin: str | None) -> bool:
        if origin is None:
            return True
        origin = origin.strip().rstrip("/").lower()
        return "*" in self.origins() or origin in self.origins() or re.fullmatch(LOOPBACK_ORIGIN, origin) is not None


def _machine_names() -> list[str]:
    try:
        name = socket.gethostname()
    except OSError:
        return []
    return [name, name.split(".")[0], f"{name.split('.')[0]}.local"] if name else []


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


async def _refuse(scope, receive, send, error: ApiError) -> None:
    await JSONResponse(error.body(), status_code=error.status, headers=error.headers)(scope, receive, send)


class HostAndOriginGuard:
    """421 for a Host that is not allowed, 403 for an Origin that is not (HostPolicy)."""

    def __init__(self, app, policy: HostPolicy):
        self.app, self.policy = app, policy

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        host = _header(scope, b"host")
        if not self.policy.host_allowed(host):
            return await _refuse(scope, receive, send, ApiError(
                421, f"this server does not answer to the host name {_host_name(host or '')[:100]!r}: use "
                     "127.0.0.1 or localhost, or start it with --allowed-host NAME (a web page using another "
                     "name may be trying to reach it through DNS rebinding)", code="host_not_allowed"))
        origin = _header(scope, b"origin")
        if not self.policy.origin_allowed(origin):
            return await _refuse(scope, receive, send, ApiError(
                403, f"requests from web pages at {origin[:100]!r} are not allowed; start the server with "
                     "--allowed-origin ORIGIN to let that page use the API", type="permission_error",
                code="origin_not_allowed"))
        return await self.app(scope, receive, send)


class RequestLimits:
    """The API key (401), the JSON content type of a POST (415) and the body's size (413)."""

    def __init__(self, app, api_key: str | None, max_body_bytes: int = MAX_BODY_BYTES,
                 body_timeout_s: float = BODY_TIMEOUT_S):
        self.app, self.api_key, self.max_body_bytes = app, api_key, max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]  # what the router matches; never rebuilt from the Host header
        if self.api_key is not None and path not in OPEN_PATHS and not _key_matches(scope, self.api_key):
            return await _refuse(scope, receive, send, ApiError(
                401, "a valid API key is needed: send 'Authorization: Bearer KEY'", type="authentication_error",
                code="invalid_api_key"))
        if scope["method"] != "POST":
            return await self.app(scope, receive, send)
        kind = (_header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
        if kind != "application/json":
            return await _refuse(scope, receive, send, ApiError(
                415, f"send the request body as JSON with 'Content-Type: application/json' (got "
                     f"{kind[:60] or 'no content type'!r})", param="content-type", code="unsupported_media_type"))
        try:  # wait_for, not asyncio.timeout (3.11+): Python 3.10 is supported; its timeout is asyncio's own class
            body = await asyncio.wait_for(self._read_body(scope, receive), self.body_timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            return await _refuse(scope, receive, send, ApiError(
                408, f"the request body did not arrive within {self.body_timeout_s:g} s; the connection is closed",
                code="request_timeout", headers={"Connection": "close"}))
        if body is None:
            return await _refuse(scope, receive, send, ApiError(
                413, f"the request body is larger than {self.max_body_bytes // (1 << 20)} MiB",
                code="request_too_large"))
        return await self.app(scope, _replaying(body, receive), send)

    async def _read_body(self, scope, receive) -> bytes | None:
        """The whole body, or None once it is known to exceed the limit (by Content-Length, or as it arrives)."""
        declared = _header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_body_bytes:
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _replaying(body: bytes, receive):
    """A receive() that gives the body read already, then the connection's own messages (its disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay():
        if pending:
            return pending.pop()
        return await receive()

    return replay


def _key_matches(scope, api_key: str) -> bool:
    scheme, _, given = (_header(scope, b"authorization") or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), api_key.encode())


def install(app, policy: HostPolicy, api_key: str | None, max_body_bytes: int = MAX_BODY_BYTES,
            body_timeout_s: float = BODY_TIMEOUT_S) -> None:
    """Adds the three layers to a FastAPI app (Starlette runs the last added first)."""
    app.add_middleware(RequestLimits, api_key=api_key, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s)
    origins = policy.origins()
    app.add_middleware(CORSMiddleware, allow_origins=origins, allow_origin_regex=LOOPBACK_ORIGIN,
                       allow_methods=["GET", "POST"], allow_headers=["authorization", "content-type"])
    app.add_middleware(HostAndOriginGuard, policy=policy)
