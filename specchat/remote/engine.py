"""A target model on another machine: any OpenAI-compatible server (specchat serve, vLLM, SGLang, ...) streams the
reply, and the reply comes back as the same StepEvents the local engine yields, so the chat, the race view and the
dashboard draw it unchanged.

Where each token came from:
- specchat serve says it exactly: every chunk carries a `specchat` field with each token's origin and the chunk's
  text cut by origin (server/protocol.py). The highlighting is then the server's own.
- Another engine does not say. vLLM streams one chunk per engine step, and with speculation a step adds the
  accepted drafts plus one token of the target's own, so a chunk of n > 1 tokens is read as n - 1 accepted drafts
  and 1 target token: Origin.INFERRED_DRAFT. n comes from the usage the server reports in every chunk when asked
  (`continuous_usage_stats`, vLLM and SGLang), or else from a local tokenizer of the same model when one is given
  (an estimate: the whole chunk is then marked inferred). It is an inference: the server may merge steps into one
  chunk when the client reads slowly, or hold text back (stop strings), so the UI must say so.
- alpha and tau: from specchat serve's extension, or vLLM's per-request metrics when on (this reply's); else from
  vLLM's /metrics counters read before and after the reply (server-wide: other users' requests between the two
  reads count too) or SGLang's gauges (its recent batches). RemoteEngine.figures holds them with their scope.

HTTP is the standard library's http.client: a streamed reply is read line by line, and Stop closes the socket
from a watcher thread, which ends a blocked read at once; the server sees the client go and stops generating.
Every failure is a RemoteError with a one-line message (no traceback) and a `kind` the UI can act on.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

from ..engine import GenerationConfig, GenerationResult, GenerationStats, Message, Origin, SpecchatError, StepEvent
from .metrics import SpecDecodeCounters, SpecDecodeDelta, delta, engine_of_metrics, parse_prometheus_text

DEFAULT_TIMEOUT_S = 10.0  # connecting, listing the models, reading /metrics
STREAM_TIMEOUT_S = 300.0  # the longest silence between two chunks (a long prompt's prefill on a busy server)
CANCEL_POLL_S = 0.05  # how often the watcher looks at the cancel event
UNKNOWN_TOKEN_ID = -1  # a remote server sends text, not token ids
USAGE_PER_CHUNK_KINDS = ("vllm", "sglang")  # servers that report usage in every chunk when asked


class RemoteError(SpecchatError):
    """A remote endpoint could not be used. kind: "address", "unreachable", "timeout", "auth", "model",
    "not_found", "busy", "request", "server" or "protocol"."""

    def __init__(self, message: str, kind: str = "server"):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class EndpointInfo:
    """What connect() found: the model it will use and what the server can tell about speculation."""

    url: str  # the server's root (API under /v1)
    model: str
    models: tuple[str, ...]
    kind: str  # "specchat", "vllm", "sglang" or "openai-compatible"
    has_metrics: bool  # GET /metrics answers with Prometheus text
    spec_metrics: bool  # ... that has speculative-decoding series
    exact_origins: bool  # each token's origin comes from the server (specchat serve)
    drafter: str | None = None  # specchat serve's drafter
    context_window: int | None = None

    @property
    def name(self) -> str:  # "model at host:port"
        return f"{self.model} at {urlsplit(self.url).netloc}"

    def describe(self) -> str:
        """One line for the settings and the status bar."""
        engines = {"specchat": "specchat serve", "vllm": "vLLM", "sglang": "SGLang"}
        engine = engines.get(self.kind, "an OpenAI-compatible server")
        if self.exact_origins:
            drafter = f", drafter {self.drafter}" if self.drafter else ""
            return f"{self.name} on {engine}{drafter}: exact draft highlighting, alpha and tau per reply"
        figures = ("alpha and tau from /metrics (server-wide)" if self.spec_metrics
                   else "no speculative-decoding metrics")
        return f"{self.name} on {engine}: accepted drafts inferred from streamed steps; {figures}"


@dataclass(frozen=True)
class RemoteFigures:
    """One reply's speculation figures and where they come from (the UI shows `label()`)."""

    origins: str  # "exact", "inferred" (tokens per chunk from the server's usage), "estimated" (local tokenizer),
    # or "none" (no count: nothing highlighted)
    alpha: float | None
    tau: float | None
    source: str
    server_wide: bool
    tokens_per_chunk: float | None = None  # this reply's own tokens per streamed chunk (tau, if one chunk = one step)
    delta: SpecDecodeDelta | None = None

    def label(self) -> str:
        figures = " · ".join(f"{name} {value:.2f}" for name, value in (("α", self.alpha), ("τ", self.tau))
                             if value is not None) or "α, τ unknown"
        highlight = {"exact": "draft highlighting exact",
                     "inferred": "accepted drafts inferred from streamed steps",
                     "estimated": "accepted drafts inferred from streamed steps (token counts estimated)",
                     "none": "no draft highlighting"}[self.origins]
        return f"{figures} ({self.source}); {highlight}"


def _root_url(base_url: str) -> str:
    """"host:8000", "http://host:8000/" or ".../v1" -> "http://host:8000" (the API is under /v1)."""
    url = base_url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise RemoteError(f"{base_url!r} has no valid port", "address") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"{base_url!r} is not an http:// or https:// address", "address")
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _transport_error(error: BaseException, url: str, timeout_s: float) -> RemoteError:
    """A socket or HTTP failure as one line the user can act on."""
    if isinstance(error, TimeoutError):
        return RemoteError(f"{url} did not answer within {timeout_s:g} s", "timeout")
    if isinstance(error, ConnectionRefusedError):
        return RemoteError(f"cannot reach {url}: nothing is listening there (connection refused); is the server "
                           "running, and are the host and port right?", "unreachable")
    if isinstance(error, socket.gaierror):
        return RemoteError(f"cannot reach {url}: the host {urlsplit(url).hostname!r} is unknown", "unreachable")
    if isinstance(error, ssl.SSLError):
        return RemoteError(f"cannot talk to {url} over HTTPS: {error.reason or error}", "unreachable")
    if isinstance(error, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
        return RemoteError(f"{url} closed the connection without a complete answer", "protocol")
    if isinstance(error, http.client.HTTPException):
        return RemoteError(f"{url} did not answer in HTTP ({type(error).__name__})", "protocol")
    return RemoteError(f"cannot reach {url}: {getattr(error, 'strerror', None) or error}", "unreachable")


def _server_message(body: bytes) -> str:
    """The explanation in an error answer: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or the text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200] or "no details"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for key in ("error", "detail", "message"):
            if isinstance(data.get(key), str) and data[key]:
                return data[key]
    return " ".join(text.split())[:200] or "no details"


def _status_error(status: int, body: bytes, url: str, what: str, key_given: bool) -> RemoteError:
    message = _server_message(body)
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

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
        connection = self.connect()
        try:
            response = self.send(connection, method, path, body)  # its own errors are RemoteErrors already
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as error:
            raise _transport_error(error, self.root, self.timeout_s) from None
        finally:
            connection.close()


class _ServerSentEvents:
    """The JSON data of each event of one streamed answer, until `data: [DONE]`. While it is read, a watcher thread
    shuts the socket down as soon as `cancel` is set, so that a read blocked on a slow server ends at once."""

    def __init__(self, http_: _Http, path: str, body: dict, what: str, read_timeout_s: float,
                 cancel: threading.Event | None):
        self._http, self.cancel = http_, cancel
        self.connection = http_.connect()
        self.connection.sock.settimeout(read_timeout_s)
        self._read_timeout_s = read_timeout_s
        self.response = http_.send(self.connection, "POST", path, body)
        if self.response.status != 200:
            answer = self.response.read()
            self.connection.close()
            raise _status_error(self.response.status, answer, http_.root, what, bool(http_.api_key))
        self._closed = threading.Event()
        if cancel is not None:
            threading.Thread(target=self._watch, name="specchat-remote-cancel", daemon=True).start()

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def _watch(self) -> None:
        while not self._closed.is_set():
            if self.cancel.wait(CANCEL_POLL_S):
                with contextlib.suppress(OSError, AttributeError):  # AttributeError: no socket, closed already
                    self.connection.sock.shutdown(socket.SHUT_RDWR)
                return

    def __iter__(self) -> Iterator[dict]:
        data: list[str] = []
        while not self.cancelled:
            try:
                raw = self.response.readline()
            except (OSError, http.client.HTTPException, ValueError) as error:
                if self.cancelled:
                    return
                raise _transport_error(error, self._http.root, self._read_timeout_s) from None
            if not raw:  # the server closed the stream
                return
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif not line and data:  # a blank line ends an event
                text, data = "\n".join(data), []
                if text.strip() == "[DONE]":
                    return
                try:
                    chunk = json.loads(text)
                except ValueError:
                    raise RemoteError(f"{self._http.root} streamed something that is not JSON: {text[:80]!r}",
                                      "protocol") from None
                yield chunk

    def close(self) -> None:
        self._closed.set()
        self.connection.close()


class RemoteEndpoint:
    """An OpenAI-compatible server: its models, what kind of engine it is, and its speculative-decoding metrics."""

    def __init__(self, base_url: str, api_key: str | None = None, model: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S):
        self.url, self.api_key, self.model = _root_url(base_url), api_key or None, model or None
        self.timeout_s = timeout_s
        self.http = _Http(self.url, self.api_key, timeout_s)

    def get_json(self, path: str, what: str) -> object:
        status, body = self.http.request("GET", path)
        if status != 200:
            raise _status_error(status, body, self.url, what, bool(self.api_key))
        try:
            return json.loads(body)
        except ValueError:
            raise RemoteError(f"{self.url}{path} did not answer with JSON: is it an OpenAI-compatible server?",
                              "protocol") from None

    def list_models(self) -> list[dict]:
        """The model cards of GET /v1/models (each has at least an `id`)."""
        answer = self.get_json("/v1/models", "the model list (GET /v1/models)")
        cards = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(cards, list):
            raise RemoteError(f"{self.url}/v1/models is not a model list: is it an OpenAI-compatible server?",
                              "protocol")
        return [card for card in cards if isinstance(card, dict) and isinstance(card.get("id"), str)]

    def connect(self) -> EndpointInfo:
        """Checks the server, the key and the model (the first one served when none was named), and finds what it
        can tell about speculation."""
        cards = self.list_models()
        ids = [card["id"] for card in cards]
        if not ids:
            raise RemoteError(f"{self.url} serves no model", "model")
        model = self.model or ids[0]
        if model not in ids:
            raise RemoteError(f"the model {model!r} is not served at {self.url}; it serves "
                              f"{', '.join(repr(i) for i in ids)}", "model")
        card = cards[ids.index(model)]
        metrics = self.metrics_text()
        extension = card.get("specchat") if isinstance(card.get("specchat"), dict) else {}
        kind = self._kind(card, metrics)
        window = extension.get("context_window") or card.get("max_model_len")
        return EndpointInfo(url=self.url, model=model, models=tuple(ids), kind=kind, has_metrics=metrics is not None,
                            spec_metrics=metrics is not None and SpecDecodeCounters.from_text(metrics) is not None,
                            exact_origins=kind == "specchat", drafter=extension.get("drafter"),
                            context_window=window if isinstance(window, int) else None)

    def metrics_text(self) -> str | None:
        """GET /metrics as Prometheus text; None when the server has none (metrics are optional)."""
        try:
            status, body = self.http.request("GET", "/metrics")
        except RemoteError:
            return None
        text = body.decode("utf-8", "replace")
        return text if status == 200 and parse_prometheus_text(text) else None

    def read_spec_counters(self) -> SpecDecodeCounters | None:
        text = self.metrics_text()
        return SpecDecodeCounters.from_text(text) if text is not None else None

    def engine(self, info: EndpointInfo | None = None, tokenizer=None) -> RemoteEngine:
        return RemoteEngine(self, info, tokenizer=tokenizer)

    def _kind(self, card: dict, metrics: str | None) -> str:
        if isinstance(card.get("specchat"), dict) or self._health_names_a_model():
            return "specchat"
        owner = str(card.get("owned_by", "")).lower()
        if owner in ("vllm", "sglang"):
            return owner
        return (engine_of_metrics(metrics) if metrics else None) or "openai-compatible"

    def _health_names_a_model(self) -> bool:
        """specchat serve's /health answers {"model", "running", "waiting"}; vLLM's and SGLang's answer nothing."""
        try:
            status, body = self.http.request("GET", "/health")
            answer = json.loads(body) if status == 200 else None
        except (RemoteError, ValueError):
            return False
        return isinstance(answer, dict) and "model" in answer and "running" in answer


class RemoteEngine:
    """Generates on a remote endpoint with the local engine's stream() shape: StepEvents, the last with a result.

    tokenizer (optional): a local tokenizer of the same model, used to count the tokens of a chunk when the server
    does not report usage per chunk. use_extension=False ignores specchat serve's origins (the inferred path)."""

    def __init__(self, endpoint: RemoteEndpoint, info: EndpointInfo | None = None, tokenizer=None,
                 use_extension: bool = True, read_timeout_s: float = STREAM_TIMEOUT_S):
        self.endpoint, self._info, self.tokenizer = endpoint, info, tokenizer
        self.use_extension, self.read_timeout_s = use_extension, read_timeout_s
        self.figures: RemoteFigures | None = None  # the last reply's, set before its last event is yielded

    @property
    def info(self) -> EndpointInfo:
        if self._info is None:
            self._info = self.endpoint.connect()
        return self._info

    def generate(self, messages: Sequence[Message], system: str | None = None,
                 config: GenerationConfig | None = None, cancel: threading.Event | None = None) -> GenerationResult:
        for event in self.stream(messages, system, config, cancel):
            if event.result is not None:
                return event.result
        raise RemoteError("the reply ended without a result", "protocol")  # unreachable: stream ends with one

    def stream(self, messages: Sequence[Message], system: str | None = None, config: GenerationConfig | None = None,
               cancel: threading.Event | None = None) -> Iterator[StepEvent]:
        """One StepEvent per streamed chunk that carried tokens; the last has finish_reason and result set."""
        config, info, self.figures = config or GenerationConfig(), self.info, None
        exact = info.exact_origins and self.use_extension
        seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**31)
        before = self.endpoint.read_spec_counters() if info.spec_metrics and not exact else None
        speculation_off = info.has_metrics and not info.spec_metrics  # known: then no chunk is a speculative step
        reply = _Reply(exact, self.tokenizer, time.perf_counter(), infer=not speculation_off)
        events = _ServerSentEvents(self.endpoint.http, "/v1/chat/completions",
                                   self._request_body(info, messages, system, config, seed, not exact),
                                   f"a reply from {info.model!r} (POST /v1/chat/completions)", self.read_timeout_s,
                                   cancel)
        try:
            for data in events:
                event = reply.add(data, self.endpoint.url)
                if event is not None:
                    yield event
            cancelled = events.cancelled and reply.openai_finish is None
        finally:
            events.close()
        if not cancelled and reply.openai_finish is None:
            raise RemoteError(f"the stream from {self.endpoint.url} ended before the reply did", "protocol")
        after = self.endpoint.read_spec_counters() if before is not None else None
        self.figures = reply.figures(delta(before, after))
        yield reply.last_event(cancelled, seed)

    def _request_body(self, info: EndpointInfo, messages: Sequence[Message], system: str | None,
                      config: GenerationConfig, seed: int, inferring: bool) -> dict:
        sampling = config.sampling
        stream_options: dict = {"include_usage": True}
        if inferring and info.kind in USAGE_PER_CHUNK_KINDS:  # a field other servers may refuse
            stream_options["continuous_usage_stats"] = True
        body = {"model": info.model, "stream": True, "stream_options": stream_options,
                "messages": ([{"role": "system", "content": system}] if system else [])
                + [{"role": m.role, "content": m.content} for m in messages],
                "max_tokens": config.max_new_tokens, "temperature": sampling.temperature, "top_p": sampling.top_p,
                "seed": seed}
        if sampling.top_k > 0:  # not OpenAI's parameter; vLLM, SGLang, llama.cpp and specchat serve take it
            body["top_k"] = sampling.top_k
        if config.stop_strings:
            body["stop"] = list(config.stop_strings)
        return body


class _Reply:
    """The reply as the chunks arrive: its text, per-token origins and spans, and the statistics so far."""

    def __init__(self, exact: bool, tokenizer, started: float, infer: bool = True):
        self.exact, self.tokenizer, self.started, self.infer = exact, tokenizer, started, infer
        self.text, self.origins, self.spans = "", [], []  # the reply so far, each token's Origin and (start, end)
        self.stats = GenerationStats()
        self.steps = 0  # chunks that carried tokens
        self.completion_tokens: int | None = None  # the server's count, from the last usage seen
        self.openai_finish: str | None = None
        self.stop_reason = None
        self.per_request: dict = {}  # vLLM's own count for this reply (--per-request-spec-decode-metrics)
        self.counted_by: set[str] = set()  # where the chunks' token counts came from: "server", "tokenizer"

    def add(self, data: dict, url: str) -> StepEvent | None:
        """The event for one chunk, or None when it carried no token (the role, the finish, the usage)."""
        if "error" in data:
            raise RemoteError(f"{url} stopped the reply: {_server_message(json.dumps(data).encode())}", "server")
        counted_before = self.completion_tokens or 0
        usage = data.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("prompt_tokens"), int):
                self.stats.prompt_tokens = usage["prompt_tokens"]
            if isinstance(usage.get("completion_tokens"), int):
                self.completion_tokens = usage["completion_tokens"]
        metrics = data.get("metrics")  # vLLM puts its per-request figures on the usage chunk
        if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            self.per_request = metrics["speculative_decoding"]
        choices = data.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            return None
        choice = choices[0]
        if choice.get("finish_reason"):
            self.openai_finish, self.stop_reason = choice["finish_reason"], choice.get("stop_reason")
        text = (choice.get("delta") or {}).get("content") or ""
        figures = data.get("specchat") if self.exact else None
        offset = len(self.text)
        if isinstance(figures, dict) and isinstance(figures.get("origins"), list):
            origins = [Origin.DRAFT if name == "draft" else Origin.TARGET for name in figures["origins"]]
            spans = _spans_from_runs(text, figures.get("runs"), origins, offset)
            self._count_exact(figures, len(origins))
        else:
            count, exactly = self._token_count(text, usage, counted_before)
            origins = _inferred_origins(bool(text), count, exactly, self.infer)
            spans = [(offset, offset + len(text))] + [(offset + len(text),) * 2] * (len(origins) - 1)
            self._count_inferred(origins)
        if not origins:
            return None
        self.text += text
        self.origins += origins
        self.spans += spans
        self.steps += 1
        now = time.perf_counter() - self.started
        if self.steps == 1:
            self.stats.prefill_s = now  # the time to the first token: the prompt's pass, the network and the line
        self.stats.wall_s = now
        return StepEvent(step=self.steps - 1, token_ids=(UNKNOWN_TOKEN_ID,) * len(origins), origins=tuple(origins),
                         spans=tuple(spans), text_delta=text, text_offset=offset, rejected_ids=(), rejected_text="",
                         stats=self.stats.copy())

    def _token_count(self, text: str, usage, counted_before: int) -> tuple[int | None, bool]:
        """The chunk's token count, and whether it is the server's (else the local tokenizer's estimate)."""
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.counted_by.add("server")
            return usage["completion_tokens"] - counted_before, True
        if self.tokenizer is not None and text:
            self.counted_by.add("tokenizer")
            return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]), False
        return None, False

    def _count_exact(self, figures: dict, tokens: int) -> None:
        self.stats.new_tokens += tokens
        for name in ("draft_proposed", "draft_accepted", "target_passes"):  # the server's counts so far
            if isinstance(figures.get(name), int):
                setattr(self.stats, name, figures[name])

    def _count_inferred(self, origins: list[Origin]) -> None:
        """One chunk = one target pass; its inferred tokens are counted as accepted drafts, none as proposed (the
        stream does not show the rejected ones), so stats.alpha stays 0 and RemoteFigures gives alpha instead."""
        if not origins:
            return
        stats = self.stats
        stats.target_passes += 1
        stats.draft_accepted += origins.count(Origin.INFERRED_DRAFT)
        # The server's count when it reports one per chunk (a text-only chunk's carrier token is not a token).
        stats.new_tokens = self.completion_tokens if self.completion_tokens is not None else (
            stats.new_tokens + len(origins))

    def last_event(self, cancelled: bool, seed: int) -> StepEvent:
        stats = self.stats
        stats.wall_s = time.perf_counter() - self.started
        if self.completion_tokens is not None:
            stats.new_tokens = self.completion_tokens
        reason = _finish_reason(self.openai_finish, self.stop_reason, cancelled)
        result = GenerationResult(text=self.text, token_ids=(UNKNOWN_TOKEN_ID,) * len(self.origins),
                                  origins=tuple(self.origins), spans=tuple(self.spans), finish_reason=reason,
                                  stats=stats.copy(), seed=seed)
        return StepEvent(step=self.steps, token_ids=(), origins=(), spans=(), text_delta="", text_offset=len(self.text),
                         rejected_ids=(), rejected_text="", stats=stats.copy(), finish_reason=reason, result=result)

    def figures(self, change: SpecDecodeDelta | None) -> RemoteFigures:
        per_chunk = self.stats.new_tokens / self.steps if self.steps else None
        origins = ("none" if not self.infer else "inferred" if "server" in self.counted_by else
                   "estimated" if "tokenizer" in self.counted_by else "none")
        if self.exact:
            return RemoteFigures(origins="exact", alpha=self.stats.alpha, tau=self.stats.tau, server_wide=False,
                                 source="this reply's, counted by the server (specchat serve)",
                                 tokens_per_chunk=per_chunk)
        steps, drafted, accepted = (self.per_request.get(name) for name in
                                    ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens"))
        if all(isinstance(n, int) for n in (steps, drafted, accepted)) and steps > 0 and drafted > 0:
            return RemoteFigures(origins=origins, alpha=accepted / drafted, tau=1 + accepted / steps, server_wide=False,
                                 source="this reply's, counted by vLLM (--per-request-spec-decode-metrics)",
                                 tokens_per_chunk=per_chunk, delta=change)
        if change is not None:
            return RemoteFigures(origins=origins, alpha=change.alpha, tau=change.tau, source=change.scope,
                                 server_wide=change.server_wide, tokens_per_chunk=per_chunk, delta=change)
        return RemoteFigures(origins=origins, alpha=None, tau=None, server_wide=False, tokens_per_chunk=per_chunk,
                             source="the server publishes no speculative-decoding metrics")


def _inferred_origins(has_text: bool, count: int | None, exactly: bool, infer: bool = True) -> list[Origin]:
    """A chunk's tokens: n counted by the server -> n - 1 accepted drafts and the target's own token (one engine
    step); n estimated -> all n inferred (the whole chunk); no count -> one token, nothing claimed. A chunk with
    text but no new token (text held back, then released) gets one target token to carry the text. infer=False
    (the server's metrics show speculation is off: several tokens in a chunk are merged steps) claims nothing."""
    if count is None or count <= 1 or not infer:
        return [Origin.TARGET] * max(count or 0, int(has_text))
    if exactly:
        return [Origin.INFERRED_DRAFT] * (count - 1) + [Origin.TARGET]
    return [Origin.INFERRED_DRAFT] * count


def _spans_from_runs(text: str, runs, origins: list[Origin], offset: int) -> list[tuple[int, int]]:
    """Spans for a chunk's tokens such that origin_runs() gives back the server's runs (its text cut by origin).

    The server joins consecutive tokens of one origin into a run and leaves out tokens with no text of their own,
    so each run is matched to the next token of its origin (a greedy subsequence match), which gets the run's
    text; the tokens in between get empty spans. Per-token boundaries inside a run are not sent; only the runs
    matter for the highlighting. Runs that do not fit the origins fall back to the whole text on the first token."""
    pieces = [(run.get("text", ""), Origin.DRAFT if run.get("origin") == "draft" else Origin.TARGET)
              for run in runs or () if isinstance(run, dict)]
    spans: list[tuple[int, int]] = []
    position, k = offset, 0
    for origin in origins:
        if k < len(pieces) and pieces[k][1] == origin:
            spans.append((position, position + len(pieces[k][0])))
            position += len(pieces[k][0])
            k += 1
        else:
            spans.append((position, position))
    if k == len(pieces) and position - offset == len(text) and "".join(p for p, _ in pieces) == text:
        return spans
    return [(offset, offset + len(text))] + [(offset + len(text),) * 2] * (len(origins) - 1) if origins else []


def _finish_reason(openai_reason: str | None, stop_reason, cancelled: bool) -> str:
    """OpenAI's finish reason as the engine's: "stop" is a stop string when the server names it (vLLM's
    stop_reason), else the end-of-sequence token."""
    if cancelled:
        return "cancelled"
    return {"length": "length", "stop": "stop" if isinstance(stop_reason, str) else "eos"}.get(openai_reason, "stop")
