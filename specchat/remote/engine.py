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

HTTP is the standard library's http.client (transport.py): a streamed reply is read line by line, and Stop closes
the socket from a watcher thread, which ends a blocked read at once (before the headers too); the server sees the
client go and stops generating. Every failure is a RemoteError with a one-line message (no traceback) and a `kind`
the UI can act on.

The server is untrusted: every read is bounded (transport.py), and what a chunk says is checked before it is used:
a chunk that is not a JSON object, a count of tokens beyond the reply's limit, text that is not a string, are each
a RemoteError of kind "protocol", never a TypeError or a list a billion entries long. Names shown to the user
(model ids, the drafter) are cut to MAX_NAME_CHARS.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Sequence
from urllib.parse import urlsplit

from ..core.vocabulary import UNKNOWN_TOKEN, Origin
from ..engine.chat_prompt import Message
from ..engine.decoding.events import GenerationResult, GenerationStats, StepEvent
from ..engine.decoding.speculative import GenerationConfig
from .metrics import SpecDecodeCounters, SpecDecodeDelta, delta, engine_of_metrics, parse_prometheus_text
from .transport import (MAX_METRICS_BYTES, RemoteError, _Http, _root_url, _server_message, _ServerSentEvents,
                        _status_error, plain_http_key_warning)

__all__ = ["EndpointInfo", "RemoteEndpoint", "RemoteEngine", "RemoteError", "RemoteFigures", "plain_http_key_warning"]

DEFAULT_TIMEOUT_S = 10.0  # connecting, listing the models, reading /metrics
STREAM_TIMEOUT_S = 300.0  # the longest silence between two chunks (a long prompt's prefill on a busy server)
USAGE_PER_CHUNK_KINDS = ("vllm", "sglang")  # servers that report usage in every chunk when asked
MAX_NAME_CHARS = 200  # a model id or drafter name from the server, as shown and stored
MAX_MODELS = 1000  # model cards read from /v1/models
TOKEN_SLACK = 16  # a server may count a few tokens more than it was asked for (an end-of-sequence token)
MAX_COUNT = 2**31 - 1  # any count a server reports (stored in the database's integers)


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
        except (ValueError, RecursionError):
            raise RemoteError(f"{self.url}{path} did not answer with JSON: is it an OpenAI-compatible server?",
                              "protocol") from None

    def list_models(self) -> list[dict]:
        """The model cards of GET /v1/models (each has at least an `id`)."""
        answer = self.get_json("/v1/models", "the model list (GET /v1/models)")
        cards = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(cards, list):
            raise RemoteError(f"{self.url}/v1/models is not a model list: is it an OpenAI-compatible server?",
                              "protocol")
        return [card for card in cards[:MAX_MODELS] if isinstance(card, dict) and isinstance(card.get("id"), str)
                and 0 < len(card["id"]) <= MAX_NAME_CHARS]  # a longer "id" is no model's: left out

    def connect(self) -> EndpointInfo:
        """Checks the server, the key and the model (the first one served when none was named), and finds what it
        can tell about speculation."""
        cards = self.list_models()
        ids = [card["id"] for card in cards]
        if not ids:
            raise RemoteError(f"{self.url} serves no model", "model")
        model = self.model or ids[0]
        if model not in ids:
            served = ", ".join(repr(i) for i in ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
            raise RemoteError(f"the model {model!r} is not served at {self.url}; it serves {served}", "model")
        card = cards[ids.index(model)]
        metrics = self.metrics_text()
        extension = card.get("specchat") if isinstance(card.get("specchat"), dict) else {}
        kind = self._kind(card, metrics)
        window = extension.get("context_window") or card.get("max_model_len")
        drafter = extension.get("drafter")
        return EndpointInfo(url=self.url, model=model, models=tuple(ids), kind=kind, has_metrics=metrics is not None,
                            spec_metrics=metrics is not None and SpecDecodeCounters.from_text(metrics) is not None,
                            exact_origins=kind == "specchat",
                            drafter=drafter if isinstance(drafter, str) and len(drafter) <= MAX_NAME_CHARS else None,
                            context_window=window if _count(window) else None)

    def metrics_text(self, cancel: threading.Event | None = None) -> str | None:
        """GET /metrics as Prometheus text (at most MAX_METRICS_BYTES; a set `cancel` ends the read at once); None
        when the server has none, or the read failed (metrics are optional)."""
        try:
            status, body = self.http.request("GET", "/metrics", limit=MAX_METRICS_BYTES, cancel=cancel)
        except RemoteError:
            return None
        text = body.decode("utf-8", "replace")
        return text if status == 200 and parse_prometheus_text(text) else None

    def read_spec_counters(self, cancel: threading.Event | None = None) -> SpecDecodeCounters | None:
        text = self.metrics_text(cancel)
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
    """A ChatEngine (engine/chat_engine.py) on a remote endpoint: StepEvents, the last with a result.

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

    def stream(self, messages: Sequence[Message], system: str | None = None, config: GenerationConfig | None = None,
               cancel: threading.Event | None = None) -> Iterator[StepEvent]:
        """One StepEvent per streamed chunk that carried tokens; the last has finish_reason and result set."""
        config, info, self.figures = config or GenerationConfig(), self.info, None
        exact = info.exact_origins and self.use_extension
        seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**31)
        before = self.endpoint.read_spec_counters(cancel) if info.spec_metrics and not exact else None
        speculation_off = info.has_metrics and not info.spec_metrics  # known: then no chunk is a speculative step
        reply = _Reply(exact, self.tokenizer, time.perf_counter(), infer=not speculation_off,
                       limit=config.max_new_tokens)
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
        after = self.endpoint.read_spec_counters(cancel) if before is not None and not cancelled else None
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

    def __init__(self, exact: bool, tokenizer, started: float, infer: bool = True, limit: int | None = None):
        """limit: the reply's token limit (max_tokens); a server that reports or sends more (twice as many, and
        TOKEN_SLACK) is refused, so a hostile count cannot build lists of any length."""
        self.exact, self.tokenizer, self.started, self.infer = exact, tokenizer, started, infer
        self.most = min(MAX_COUNT, 2 * (limit or MAX_COUNT) + TOKEN_SLACK)  # tokens this reply may have
        self.text, self.origins, self.spans = "", [], []  # the reply so far, each token's Origin and (start, end)
        self.stats = GenerationStats()
        self.steps = 0  # chunks that carried tokens
        self.completion_tokens: int | None = None  # the server's count, from the last usage seen
        self.openai_finish: str | None = None
        self.stop_reason = None
        self.per_request: dict = {}  # vLLM's own count for this reply (--per-request-spec-decode-metrics)
        self.counted_by: set[str] = set()  # where the chunks' token counts came from: "server", "tokenizer"

    def add(self, data: dict, url: str) -> StepEvent | None:
        """The event for one chunk, or None when it carried no token (the role, the finish, the usage).
        RemoteError ("protocol") for a chunk whose fields are not what the format says, or that goes beyond the
        reply's limit."""
        if not isinstance(data, dict):
            raise RemoteError(f"{url} streamed JSON that is not an object", "protocol")
        if "error" in data:
            raise RemoteError(f"{url} stopped the reply: {_server_message(json.dumps(data).encode())}", "server")
        counted_before = self.completion_tokens or 0
        usage = data.get("usage")
        self._read_usage(usage, url)
        metrics = data.get("metrics")  # vLLM puts its per-request figures on the usage chunk
        if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            self.per_request = metrics["speculative_decoding"]
        choice, text = _choice_and_text(data, url)
        if choice is None:
            return None
        if choice.get("finish_reason"):
            self.openai_finish, self.stop_reason = str(choice["finish_reason"])[:40], choice.get("stop_reason")
        figures = data.get("specchat") if self.exact else None
        offset = len(self.text)
        if isinstance(figures, dict) and isinstance(figures.get("origins"), list):
            self._check_room(len(figures["origins"]), text, url)
            origins = [Origin.DRAFT if name == "draft" else Origin.TARGET for name in figures["origins"]]
            spans = _spans_from_runs(text, figures.get("runs"), origins, offset)
            self._count_exact(figures, len(origins))
        else:
            count, exactly = self._token_count(text, usage, counted_before)
            self._check_room(count or 1, text, url)
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
        return StepEvent(token_ids=(UNKNOWN_TOKEN,) * len(origins), origins=tuple(origins),
                         spans=tuple(spans), text_delta=text, text_offset=offset, rejected_ids=(), rejected_text="",
                         stats=self.stats, wall_s=now)

    def _read_usage(self, usage, url: str) -> None:
        """The server's token counts, if it sent usable ones; a completion count beyond the limit is refused."""
        if not isinstance(usage, dict):
            return
        if _count(usage.get("prompt_tokens")):
            self.stats.prompt_tokens = usage["prompt_tokens"]
        completion = usage.get("completion_tokens")
        if completion is not None and not isinstance(completion, bool) and isinstance(completion, int):
            if not 0 <= completion <= self.most:
                raise RemoteError(f"{url} reported {completion} completion tokens for a reply of at most "
                                  f"{self.most}: not a count specchat can use", "protocol")
            self.completion_tokens = completion

    def _check_room(self, tokens: int, text: str, url: str) -> None:
        """RemoteError once the reply would have more tokens (or text) than its limit allows."""
        if len(self.origins) + tokens > self.most or len(self.text) + len(text) > 256 * self.most:
            raise RemoteError(f"{url} sent more of a reply than was asked for (at most {self.most} tokens); "
                              "the reply was stopped", "protocol")

    def _token_count(self, text: str, usage, counted_before: int) -> tuple[int | None, bool]:
        """The chunk's token count, and whether it is the server's (else the local tokenizer's estimate)."""
        if isinstance(usage, dict) and self.completion_tokens is not None and _count(usage.get("completion_tokens")):
            self.counted_by.add("server")
            return usage["completion_tokens"] - counted_before, True
        if self.tokenizer is not None and text:
            self.counted_by.add("tokenizer")
            return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]), False
        return None, False

    def _count_exact(self, figures: dict, tokens: int) -> None:
        self.stats.new_tokens += tokens
        for name in ("draft_proposed", "draft_accepted", "target_passes"):  # the server's counts so far
            if _count(figures.get(name)):
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
        result = GenerationResult(text=self.text, token_ids=(UNKNOWN_TOKEN,) * len(self.origins),
                                  origins=tuple(self.origins), spans=tuple(self.spans), finish_reason=reason,
                                  stats=stats.copy(), seed=seed)
        return StepEvent(token_ids=(), origins=(), spans=(), text_delta="", text_offset=len(self.text),
                         rejected_ids=(), rejected_text="", stats=stats, wall_s=stats.wall_s, finish_reason=reason,
                         result=result)

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


def _count(value) -> bool:
    """Whether a server's number is a usable count: an integer (not a bool) from 0 to MAX_COUNT."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _choice_and_text(data: dict, url: str) -> tuple[dict | None, str]:
    """The chunk's first choice and its text (delta.content); (None, "") when it has no choice. RemoteError for
    fields of the wrong kind (choices not a list, delta not an object, content not a string)."""
    choices = data.get("choices") or []
    if not isinstance(choices, list):
        raise RemoteError(f"{url} streamed a chunk whose choices are not a list", "protocol")
    if not choices or not isinstance(choices[0], dict):
        return None, ""
    delta_ = choices[0].get("delta") or {}
    text = delta_.get("content") if isinstance(delta_, dict) else None
    if not isinstance(delta_, dict) or not isinstance(text or "", str):
        raise RemoteError(f"{url} streamed a chunk whose delta is not text", "protocol")
    return choices[0], text or ""


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
              for run in (runs if isinstance(runs, list) else ()) if isinstance(run, dict)
              and isinstance(run.get("text", ""), str)]
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
    stop_reason), else the end-of-sequence token; "abort" (the server cut the reply short: vLLM, specchat serve) is
    a cancelled reply, not a finished one."""
    if cancelled or openai_reason == "abort":
        return "cancelled"
    return {"length": "length", "stop": "stop" if isinstance(stop_reason, str) else "eos"}.get(openai_reason, "stop")
