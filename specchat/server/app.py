"""The HTTP side of `specchat serve`: an OpenAI-compatible API on FastAPI.

Endpoints: GET /v1/models, POST /v1/chat/completions, POST /v1/completions (each streamed as server-sent events
when asked), and GET /health. Every error is OpenAI's JSON error object with a 4xx/5xx status: a malformed request
is a 400 naming the field, a wrong key 401, a web page's origin that is not allowed 403, an unknown model 404, a
host name that is not allowed 421 (guard.py: DNS rebinding), a body over the limit 413, a POST that is not JSON 415,
a full line 429 (with Retry-After), a closing server 503. A client that disconnects cancels its generation, waiting
or running, streamed or not. A reply the server itself cuts short (a restart of the app's server, a shutdown) is
never passed off as complete: a stream ends with finish_reason "abort" and an error event, a non-streamed request
gets a 503.

Tokenizing and templating a prompt run on a thread of their own, never on the event loop: one huge request must
not stall the others. They run inside the line's limit (jobs.py, `admit`): a request takes its place first, so the
tokenizer's queue is as bounded as the generations' (429 beyond it), and a client that disconnects while its prompt
waits for the tokenizer gives its place back and its tokenizing is dropped. A chat request's documents (file parts)
are read before its prompt is made, inside the same place, on a thread of their own (a PDF's pages take longer than
a tokenizer's pass); a client that leaves stops its reading between pages.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..core.vocabulary import CANCELLED
from ..engine.decoding.events import GenerationResult, StepEvent
from . import guard
from .jobs import Admission, Closing, DeviceLine, Ended, Job, LineFull
from .protocol import FINISH_REASONS, Answer, ApiError, ChatCompletionRequest, CompletionRequest
from .served import ChatPrompt, ServedModel, answer_job

SHUTDOWN_WAIT_S = 2.0  # at the end of the lifespan, how long the line's thread is waited for


def aborted_error() -> ApiError:
    """What a client whose reply the server cut short is told (the generation was cancelled by a restart of the
    app's server or a shutdown, not by the client)."""
    return ApiError(503, "the server stopped this reply before it was complete: it is restarting or shutting "
                         "down; send the request again", type="server_error", code="aborted")


def create_app(served: ServedModel, line: DeviceLine, api_key: str | None = None,
               policy: guard.HostPolicy | None = None, max_body_bytes: int = guard.MAX_BODY_BYTES,
               body_timeout_s: float = guard.BODY_TIMEOUT_S) -> FastAPI:
    """The app: the endpoints behind guard.py's checks (policy: the Host and Origin rules; None: loopback only;
    a body must arrive within body_timeout_s)."""
    tokenizing = ThreadPoolExecutor(1, thread_name_prefix="specchat-serve-tokenize")  # one: tokenizers are not
    # guaranteed safe to call from several threads at once
    reading = ThreadPoolExecutor(1, thread_name_prefix="specchat-serve-read")  # a request's documents
    workers = Workers(tokenizing, reading)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        line.close(SHUTDOWN_WAIT_S)  # shutting down: the running generation stops, the waiting ones end with 503
        tokenizing.shutdown(wait=False, cancel_futures=True)
        reading.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="specchat", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    _install_error_handlers(app)
    guard.install(app, policy or guard.HostPolicy(), api_key, max_body_bytes, body_timeout_s)

    @app.get("/health")
    async def health() -> dict:
        running, waiting = line.load()
        return {"status": "ok", "model": served.model_id, "running": running, "waiting": waiting}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [_model_card(served)]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict:
        _check_model(served, model_id)
        return _model_card(served)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return await _answer(request, served, line, body, workers)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await _answer(request, served, line, body, workers)

    return app


def _model_card(served: ServedModel) -> dict:
    return {"id": served.model_id, "object": "model", "created": int(time.time()), "owned_by": "specchat",
            "specchat": {"drafter": served.drafter, "context_window": served.context_size,
                         "device": str(served.pair.target.device)}}


@dataclass(frozen=True)
class Workers:
    """The threads a request's preparation runs on, off the event loop: one tokenizing prompts, one reading
    documents."""

    tokenizing: ThreadPoolExecutor
    reading: ThreadPoolExecutor


MAX_ECHOED_CHARS = 80  # of a name the client sent, in an error message


def _shortened(text: str, limit: int = MAX_ECHOED_CHARS) -> str:
    """`text` cut to `limit` characters with an ellipsis: what an error repeats of what the client sent."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _check_model(served: ServedModel, model_id: str) -> None:
    if model_id != served.model_id:
        shown = _shortened(repr(model_id))
        raise ApiError(404, f"the model {shown} is not served here; this server serves {served.model_id!r} "
                            "(GET /v1/models)", param="model", code="model_not_found")


async def _answer(request: Request, served: ServedModel, line: DeviceLine,
                  body: ChatCompletionRequest | CompletionRequest, workers: Workers) -> Response:
    """Checks the request, queues its generation (_queued_job: its documents read and its prompt tokenized off the
    event loop, within the line's limit), and answers: a stream of events or one JSON reply."""
    _check_model(served, body.model)
    served.check_request(body)
    chat = isinstance(body, ChatCompletionRequest)
    echo = body.prompt_text() if not chat and body.echo else ""
    queued = await _queued_job(request, served, line, body, workers)
    if queued is None:  # the client went away while its prompt was made; nobody reads this
        return Response(status_code=499)
    job, documents = queued
    answer = Answer(chat=chat, model=served.model_id, documents=documents)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(_stream(job, line, answer, include_usage, echo), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    ended = await _wait_for_end(request, job, line)
    if ended is None:  # the client went away; nobody reads this
        return Response(status_code=499)
    if ended.error is not None:
        return _error_response(_as_api_error(ended.error))
    if ended.value.finish_reason == CANCELLED:  # cut short by the server, not finished: no 200 with part of it
        return _error_response(aborted_error())
    return JSONResponse(answer.whole(ended.value, prefix=echo))


async def _queued_job(request: Request, served: ServedModel, line: DeviceLine,
                      body: ChatCompletionRequest | CompletionRequest,
                      workers: Workers) -> tuple[Job, dict | None] | None:
    """The request's job, in the line, and what its reply was given of its documents (None without): a place is
    taken first (429 when the line is full, 503 when the server closes), then the prompt is made (_prompt_of) and
    the job submitted in that place. None when the client disconnected while its prompt was made (the place is
    given back; tokenizing not yet begun is dropped)."""
    with _admitted(line) as place:
        prompt = await _prompt_of(request, served, body, workers)
        if prompt is None:
            return None
        config = served.config_for(body, len(prompt.ids))
        if prompt.messages:  # a chat: its messages, the documents placed in them (their ids are remembered)
            job = Job(lambda job: answer_job(job, served.stream(prompt.messages, prompt.system, config, job.cancel)),
                      asyncio.get_running_loop())
        else:  # a completion's prompt is text, not a conversation
            job = Job(lambda job: answer_job(job, served.stream_ids(prompt.ids, config, job.cancel)),
                      asyncio.get_running_loop())
        _in_line(lambda: line.submit(job, place), line)
    return job, prompt.documents


async def _prompt_of(request: Request, served: ServedModel, body: ChatCompletionRequest | CompletionRequest,
                     workers: Workers) -> ChatPrompt | None:
    """The request's prompt, made off the event loop: a chat's documents read on the reading thread (told to stop
    when the client leaves), then its prompt (or a completion's) on the tokenizing thread. None when the client
    left meanwhile."""
    loop = asyncio.get_running_loop()
    if isinstance(body, CompletionRequest):
        ids = await _unless_disconnected(request, loop.run_in_executor(workers.tokenizing,
                                                                       served.completion_prompt, body))
        return None if ids is None else ChatPrompt(ids)
    documents = []
    if body.has_files():
        leaving = threading.Event()
        documents = await _unless_disconnected(
            request, loop.run_in_executor(workers.reading, served.read_documents, body, leaving), leaving)
        if documents is None:
            return None
    return await _unless_disconnected(request, loop.run_in_executor(workers.tokenizing, served.chat_prompt, body,
                                                                    documents))


def _admitted(line: DeviceLine) -> Admission:
    """A place in the line; ApiError 429 (busy) or 503 (closing) when there is none."""
    return _in_line(line.admit, line)


def _in_line(step, line: DeviceLine):
    """step()'s value; the line's LineFull and Closing as the API errors 429 and 503."""
    try:
        return step()
    except LineFull:
        running, waiting = line.load()
        raise ApiError(429, f"the server is busy: {running + waiting} requests are being answered or are waiting, "
                            "the most it takes; try again shortly", type="rate_limit_error", code="server_busy",
                       headers={"Retry-After": "1"}) from None
    except Closing:
        raise ApiError(503, "the server is shutting down", type="server_error", code="shutting_down") from None


async def _unless_disconnected(request: Request, work: asyncio.Future, leaving: threading.Event | None = None):
    """work's result, or None if the client disconnects first: the work is then cancelled (an executor's task
    that has not started is dropped; one already running finishes unheard, or stops early if it hears `leaving`,
    which is then set)."""
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not work.done():
        if leaving is not None:
            leaving.set()
        work.cancel()
        return None
    return work.result()


async def _wait_for_end(request: Request, job: Job, line: DeviceLine) -> Ended | None:
    """The job's end, or None if the client disconnected first (the job is then withdrawn: a waiting one leaves
    the line, a running one stops at its next step). The disconnect is heard as it happens: uvicorn's receive()
    answers http.disconnect once the body is read and the connection closes."""
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        while True:
            item = asyncio.ensure_future(job.events.get())
            await asyncio.wait((item, gone), return_when=asyncio.FIRST_COMPLETED)
            if not item.done():
                item.cancel()
                line.withdraw(job)
                return None
            if isinstance(item.result(), Ended):
                return item.result()
    finally:
        gone.cancel()


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _stream(job: Job, line: DeviceLine, answer: Answer, include_usage: bool, echo: str) -> AsyncIterator[str]:
    """Server-sent events: one chunk per engine step (the tokens one target pass gave), a last chunk with the
    finish reason, the usage when asked, then [DONE]; a reply the server cut short ends with finish_reason "abort"
    and an error event. If the client disconnects, Starlette cancels this generator at its await, and `finally`
    withdraws the job."""
    ended = False
    try:
        first = True
        if echo:
            yield _event(answer.chunk(echo, None, first=True))
            first = False
        while True:
            item = await job.events.get()
            if isinstance(item, StepEvent):
                yield _event(answer.chunk(item.text_delta, item, first=first))
                first = False
                continue
            ended = True
            if item.error is not None:
                yield _event(_as_api_error(item.error).body())
            else:
                result: GenerationResult = item.value
                finish = FINISH_REASONS.get(result.finish_reason, "stop")
                yield _event(answer.chunk("", None, first=first, finish=finish))
                if include_usage:
                    yield _event(answer.usage_chunk(result.stats.prompt_tokens, result.stats.new_tokens))
                if finish == "abort":  # and say why, as an error event (the openai client raises it)
                    yield _event(aborted_error().body())
            yield "data: [DONE]\n\n"
            return
    finally:
        if not ended:
            line.withdraw(job)


def _event(body: dict) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def _as_api_error(error: BaseException) -> ApiError:
    if isinstance(error, ApiError):
        return error
    if isinstance(error, Closing):
        return ApiError(503, "the server is restarting or shutting down; send the request again", type="server_error",
                        code="shutting_down")
    return ApiError(500, f"generation failed: {type(error).__name__}: {error}", type="server_error")


def _error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_request: Request, error: ApiError) -> JSONResponse:
        return _error_response(error)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, error: RequestValidationError) -> JSONResponse:
        return _error_response(ApiError(400, _describe_validation(error), param=_first_param(error)))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, error: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        return _error_response(ApiError(error.status_code, str(error.detail), type=kind))


MAX_PROBLEM_CHARS = 300  # of one of pydantic's messages, which may quote the value sent (a tag of megabytes)


def _location(problem: dict) -> str | None:
    """Where a problem lies, as OpenAI's `param` names it ('messages.0.content'), or None for the body as a whole:
    a JSON syntax error's location is a character position in the body, which names no field."""
    if problem.get("type") == "json_invalid":
        return None
    location = ".".join(str(part) for part in problem.get("loc", ()) if part != "body")
    return _shortened(location) or None


def _first_param(error: RequestValidationError) -> str | None:
    for problem in error.errors():
        if location := _location(problem):
            return location
    return None


def _describe_validation(error: RequestValidationError) -> str:
    """Pydantic's problems in one line each, each cut to MAX_PROBLEM_CHARS: 'messages.0.role: Input should be
    ...'; a JSON syntax error says where in the body it lies."""
    lines = []
    for problem in error.errors()[:5]:
        message = str(problem.get("msg", "invalid")).removeprefix("Value error, ")
        if problem.get("type") == "json_invalid":
            place = problem.get("loc", ())[-1:]
            where = f" at character {place[0]}" if place and isinstance(place[0], int) else ""
            message = str((problem.get("ctx") or {}).get("error") or message)
            lines.append(_shortened(f"the body is not valid JSON{where}: {message}", MAX_PROBLEM_CHARS))
        else:
            lines.append(_shortened(f"{_location(problem) or 'body'}: {message}", MAX_PROBLEM_CHARS))
    return "; ".join(lines) or "the request is not valid JSON for this endpoint"
