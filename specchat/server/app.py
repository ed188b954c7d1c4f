"""The HTTP side of `specchat serve`: an OpenAI-compatible API on FastAPI.

Endpoints: GET /v1/models, POST /v1/chat/completions, POST /v1/completions (each streamed as server-sent events
when asked), and GET /health. Every error is OpenAI's JSON error object with a 4xx/5xx status: a malformed request
is a 400 naming the field, a wrong key 401, an unknown model 404, a full line 429 (with Retry-After), a closing
server 503. A client that disconnects cancels its generation, waiting or running.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..engine import GenerationResult, StepEvent
from .jobs import Closing, DeviceLine, Ended, Job, LineFull
from .protocol import FINISH_REASONS, Answer, ApiError, ChatCompletionRequest, CompletionRequest
from .served import ServedModel

DISCONNECT_POLL_S = 0.25  # how often a non-streamed request checks that its client is still there


def create_app(served: ServedModel, line: DeviceLine, api_key: str | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        line.close()  # shutting down: the running generation stops, the waiting ones end with 503

    app = FastAPI(title="specchat", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    _install_error_handlers(app)

    @app.middleware("http")
    async def require_key(request: Request, call_next):
        if api_key is not None and request.url.path.startswith("/v1/") and not _key_matches(request, api_key):
            return _error_response(ApiError(401, "a valid API key is needed: send 'Authorization: Bearer KEY'",
                                            type="authentication_error", code="invalid_api_key"))
        return await call_next(request)

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
        return await _answer(request, served, line, body)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await _answer(request, served, line, body)

    return app


def _model_card(served: ServedModel) -> dict:
    return {"id": served.model_id, "object": "model", "created": int(time.time()), "owned_by": "specchat",
            "specchat": {"drafter": served.drafter, "context_window": served.pair.context_window(),
                         "device": str(served.pair.target.device)}}


def _check_model(served: ServedModel, model_id: str) -> None:
    if model_id != served.model_id:
        raise ApiError(404, f"the model {model_id!r} is not served here; this server serves {served.model_id!r} "
                            "(GET /v1/models)", param="model", code="model_not_found")


def _key_matches(request: Request, api_key: str) -> bool:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), api_key.encode())


async def _answer(request: Request, served: ServedModel, line: DeviceLine,
                  body: ChatCompletionRequest | CompletionRequest) -> Response:
    """Checks the request, queues its generation, and answers: a stream of events or one JSON reply."""
    _check_model(served, body.model)
    config = served.config_for(body)
    chat = isinstance(body, ChatCompletionRequest)
    prompt_ids = served.chat_prompt(body) if chat else served.completion_prompt(body)
    echo = body.prompt_text() if not chat and body.echo else ""
    answer = Answer(chat=chat, model=served.model_id)
    job = Job(lambda job: served.generate(job, prompt_ids, config), asyncio.get_running_loop())
    try:
        line.submit(job)
    except LineFull:
        running, waiting = line.load()
        raise ApiError(429, f"the server is busy: one reply is being generated and {waiting} are waiting, the most "
                            "it queues; try again shortly", type="rate_limit_error", code="server_busy",
                       headers={"Retry-After": "1"}) from None
    except Closing:
        raise ApiError(503, "the server is shutting down", type="server_error", code="shutting_down") from None
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(_stream(job, line, answer, include_usage, echo), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    ended = await _wait_for_end(request, job, line)
    if ended is None:  # the client went away; nobody reads this
        return Response(status_code=499)
    if ended.error is not None:
        return _error_response(_as_api_error(ended.error))
    return JSONResponse(answer.whole(ended.value, prefix=echo))


async def _wait_for_end(request: Request, job: Job, line: DeviceLine) -> Ended | None:
    """The job's end, or None if the client disconnected first (the job is then withdrawn)."""
    while True:
        try:
            item = await asyncio.wait_for(job.events.get(), DISCONNECT_POLL_S)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                line.withdraw(job)
                return None
            continue
        if isinstance(item, Ended):
            return item


async def _stream(job: Job, line: DeviceLine, answer: Answer, include_usage: bool, echo: str) -> AsyncIterator[str]:
    """Server-sent events: one chunk per engine step (the tokens one target pass gave), a last chunk with the
    finish reason, the usage when asked, then [DONE]. If the client disconnects, Starlette cancels this generator
    at its await, and `finally` withdraws the job."""
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
        return ApiError(503, "the server is shutting down", type="server_error", code="shutting_down")
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


def _first_param(error: RequestValidationError) -> str | None:
    for problem in error.errors():
        location = [str(part) for part in problem.get("loc", ()) if part != "body"]
        if location:
            return ".".join(location)
    return None


def _describe_validation(error: RequestValidationError) -> str:
    """Pydantic's problems in one line each: 'messages.0.role: Input should be ...'."""
    lines = []
    for problem in error.errors()[:5]:
        location = ".".join(str(part) for part in problem.get("loc", ()) if part != "body") or "body"
        message = problem.get("msg", "invalid").removeprefix("Value error, ")
        lines.append(f"{location}: {message}")
    return "; ".join(lines) or "the request is not valid JSON for this endpoint"
