"""The model `specchat serve` answers with: prompts from requests, the generation config, and the run record.

Requests may leave sampling parameters out; they then take the server's defaults (greedy unless the server was
started with a temperature), not OpenAI's temperature 1, because greedy replies are the ones that are exactly
plain decoding's and comparable across runs. Every generation is stored with source "api" in the same statistics
as the app's chats, races and benchmarks, so the dashboard shows what the server did.

The served context is sized once, at start (`--ctx-size`, as `llama-server -c` and vLLM's `--max-model-len`): a
prompt and its reply together never exceed it, so no request can make the engine's KV cache grow toward the
model's training length (gigabytes on an 8B model). A `max_tokens` beyond it is a 400; a smaller one that does not
fit after the prompt is cut to the room left (the reply then ends with finish_reason "length").

A chat request may carry documents (file parts: file_parts.py). They are placed by the rule the window and
`specchat generate --attach` follow (context_plan.plan_in_memory): whole, before the text of the message that
carried them, when they fit the served context with room for the reply; else the passages that best match the last
user message, labelled with their source and page. A request without documents is templated as it is.
"""

from __future__ import annotations

import functools
import sys
import threading
from dataclasses import dataclass, replace
from typing import Iterator, Sequence

from ..chats.context_plan import ChatDocument, TokenCounter, plan_in_memory
from ..chats.run_context import RunContext
from ..core.errors import PromptError, SpecchatError, StorageError
from ..engine.chat_engine import EngineCache
from ..engine.chat_prompt import Message, build_prompt_ids, tokenizer_lock
from ..engine.decoding.events import GenerationResult, StepEvent
from ..engine.decoding.sampling import SamplingParams
from ..engine.decoding.speculative import GenerationConfig
from ..engine.loading.pair import ModelPair
from .file_parts import DocumentLimits, check_file_parts, documents_field, read_file_parts
from .jobs import Job
from .protocol import ApiError, ChatCompletionRequest, CompletionRequest, SamplingRequest

DEFAULT_CONTEXT_SIZE = 4096  # positions, prompt and reply together (llama.cpp's default -c); the model's own if less


def api_model_id(name: str) -> str:
    """A model's name as clients write it: "SmolLM2-135M-Instruct (embedded, GGUF Q4_1)" -> "SmolLM2-135M-Instruct"
    (the description in brackets dropped, spaces as dashes)."""
    return "-".join(name.split(" (")[0].split()) or "model"


def served_context(pair: ModelPair, requested: int | None) -> int:
    """The served context: `requested` (--ctx-size; None: DEFAULT_CONTEXT_SIZE), at most the model's window.
    SpecchatError for a size under 16 positions, which could not hold a prompt and a reply."""
    size = DEFAULT_CONTEXT_SIZE if requested is None else requested
    if size < 16:
        raise SpecchatError(f"--ctx-size must be at least 16 positions (got {size})")
    return min(size, pair.context_window())


@dataclass(frozen=True)
class ChatPrompt:
    """A request's prompt ids, fitted to the served context; for a chat, the messages and system prompt they were
    made of (the documents placed in them: what stream() answers), and what its reply was given of the request's
    documents (file_parts.documents_field; None without documents)."""

    ids: list[int]
    messages: tuple[Message, ...] = ()
    system: str | None = None
    documents: dict | None = None


class ServedModel:
    """The API's model as a ChatEngine: `stream(messages, system, config, cancel)` answers a conversation through the
    target's chat template within the served context, and records the run; `stream_ids` does the same for a
    completion's prompt, which is text, not a chat."""

    def __init__(self, pair: ModelPair, run: RunContext, store=None, model_id: str | None = None,
                 context_size: int | None = None, engines: EngineCache | None = None,
                 document_limits: DocumentLimits = DocumentLimits()):
        """run: the drafter and the generation config a request gets for each parameter it leaves out (the CLI's or
        the window's settings) on this pair (RunContext.of_pair), which every request's run is recorded with;
        context_size: the served context (served_context: --ctx-size, else the default, at most the model's);
        engines: the pair's EngineCache when the server shares its engines (the window's chat), else its own;
        document_limits: the bounds on a request's documents. SpecchatError when the pair cannot run the drafter."""
        pair.check_drafter(run.drafter)
        self.pair, self.run, self.store, self.document_limits = pair, run, store, document_limits
        self.model_id = model_id or api_model_id(pair.target.name)
        self.context_size = served_context(pair, context_size)
        self.engines = engines or EngineCache(pair)
        # A request's prompt is made off the event loop, to answer 400 before it queues, and again by stream() on
        # the device thread: the last few are remembered, so it is tokenized once.
        self._chat_ids = functools.lru_cache(maxsize=8)(self._template)

    @property
    def drafter(self) -> str:
        return self.run.drafter

    @property
    def defaults(self) -> GenerationConfig:
        """What a request gets for each parameter it leaves out."""
        return self.run.config

    # --- requests to prompts -------------------------------------------------------------------------------------

    @staticmethod
    def conversation(request: ChatCompletionRequest) -> tuple[tuple[Message, ...], str | None]:
        """The request's messages and system prompt: system and developer messages are joined into the system
        prompt, which templates place first."""
        system = "\n\n".join(m.text() for m in request.messages if m.role in ("system", "developer")) or None
        return tuple(Message(m.role, m.text()) for m in request.messages if m.role in ("user", "assistant")), system

    def read_documents(self, request: ChatCompletionRequest,
                       cancel: threading.Event | None = None) -> list[ChatDocument]:
        """The request's file parts read into documents (file_parts.read_file_parts, within document_limits), each
        attached to the turn that carried it; ApiError 400 naming the part and the file for one that cannot be read.
        Slow (a PDF's pages): called off the event loop; `cancel` stops it when the client leaves."""
        return read_file_parts(request, self.document_limits, cancel)

    def chat_prompt(self, request: ChatCompletionRequest, documents: Sequence[ChatDocument] = ()) -> ChatPrompt:
        """The conversation's prompt, with `documents` (read_documents) placed by the window's rule; ApiError 400
        when it cannot be one or does not fit the served context."""
        messages, system = self.conversation(request)
        if not documents:
            return ChatPrompt(self.prompt_ids(messages, system), messages, system)
        # A counter of its own, dropped with the request: counter_for's remembers every text it counts, and a
        # server's clients send ever new documents.
        count = TokenCounter(self.pair.target.tokenizer)
        try:
            plan = plan_in_memory(messages, range(len(messages)), documents, system, count, self.context_size,
                                  request.token_limit() or self.defaults.max_new_tokens)
        except PromptError as error:
            raise ApiError(400, f"messages: {error}", param="messages", code="context_length_exceeded") from None
        return ChatPrompt(self.prompt_ids(plan.messages, system), plan.messages, system,
                          documents_field(plan, documents))

    def prompt_ids(self, messages: Sequence[Message], system: str | None) -> list[int]:
        return list(self._chat_ids(tuple(messages), system))

    def _template(self, messages: tuple[Message, ...], system: str | None) -> tuple[int, ...]:
        try:
            ids = build_prompt_ids(self.pair.target.tokenizer, messages, system)
        except PromptError as error:
            raise ApiError(400, f"messages: {error}", param="messages") from None
        return tuple(self._fitting(ids, "messages"))

    def completion_prompt(self, request: CompletionRequest) -> list[int]:
        text = request.prompt_text()
        if not text:
            raise ApiError(400, "the prompt is empty", param="prompt")
        tokenizer = self.pair.target.tokenizer
        with tokenizer_lock(tokenizer):  # the window's meter may be counting with it (engine/chat_prompt.py)
            ids = tokenizer(text, add_special_tokens=True)["input_ids"]
        return self._fitting(ids, "prompt")

    def _fitting(self, ids: list[int], param: str) -> list[int]:
        window = self.context_size
        if len(ids) >= window:
            raise ApiError(400, f"the prompt has {len(ids)} tokens; this server reads at most {window}, reply "
                                "included (--ctx-size)", param=param, code="context_length_exceeded")
        return ids

    def check_request(self, request: SamplingRequest) -> None:
        """400 before any work for what no prompt can make valid: unsupported parameters, a token limit beyond the
        served context, and a chat's file parts over document_limits (file_parts.check_file_parts)."""
        request.refuse_what_we_cannot_do()
        if isinstance(request, ChatCompletionRequest):
            check_file_parts(request, self.document_limits)
        limit = request.token_limit()
        if limit is not None and limit > self.context_size:
            param = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
            raise ApiError(400, f"{param} is {limit}; this server's context holds {self.context_size} tokens, "
                                "prompt and reply together (--ctx-size)", param=param,
                           code="context_length_exceeded")

    def config_for(self, request: SamplingRequest, prompt_tokens: int = 0) -> GenerationConfig:
        """The request's generation config; its token limit cut to the room the prompt leaves in the context."""
        self.check_request(request)
        d = self.defaults
        try:
            sampling = SamplingParams(
                temperature=d.sampling.temperature if request.temperature is None else request.temperature,
                top_p=d.sampling.top_p if request.top_p is None else request.top_p,
                top_k=d.sampling.top_k if request.top_k is None else request.top_k)
        except ValueError as error:
            raise ApiError(400, str(error)) from None
        return replace(d, max_new_tokens=min(request.token_limit() or d.max_new_tokens,
                                             self._room(prompt_tokens)), sampling=sampling,
                       seed=d.seed if request.seed is None else request.seed,
                       stop_strings=request.stop_strings() or d.stop_strings)

    def _room(self, prompt_tokens: int) -> int:
        return max(1, self.context_size - prompt_tokens)

    # --- on the device thread ------------------------------------------------------------------------------------

    def stream(self, messages: Sequence[Message], system: str | None, config: GenerationConfig,
               cancel: threading.Event | None = None) -> Iterator[StepEvent]:
        """The reply to a conversation (ChatEngine): ApiError 400 for one that does not fit the served context."""
        return self.stream_ids(self.prompt_ids(messages, system), config, cancel)

    def stream_ids(self, prompt_ids: Sequence[int], config: GenerationConfig,
                   cancel: threading.Event | None = None) -> Iterator[StepEvent]:
        """The reply to a prompt of token ids, within the served context (the reply's length cut to the room the
        prompt leaves, so no request grows the KV cache past it); the run is recorded as it ends. The engine is
        built on first use, on the device thread, and kept: its caches and K policy warm up."""
        config = replace(config, max_new_tokens=min(config.max_new_tokens, self._room(len(prompt_ids))))
        result = None
        for event in self.engines.chat_engine(self.drafter).stream_ids(prompt_ids, config, cancel):
            result = event.result or result
            yield event
        if result is not None:  # after the client has the last event: a slow write does not hold it back
            self._record(result, config)

    def _record(self, result: GenerationResult, config: GenerationConfig) -> None:
        """The run in the statistics; a storage failure is reported on stderr and does not fail the reply."""
        if self.store is None:
            return
        record = replace(self.run, config=config).record(result.stats.to_dict(), "api", seed=result.seed,
                                                         finish_reason=result.finish_reason)
        try:
            self.store.record_run(record)
        except StorageError as error:  # the client has its reply either way
            print(f"specchat serve: the run could not be recorded: {error}", file=sys.stderr)


def answer_job(job: Job, events: Iterator[StepEvent]) -> GenerationResult:
    """Runs a reply's events into the job (the HTTP side reads them) to the stream's end, so that what the stream
    does after its last event (recording the run) is done, and returns the reply's result."""
    result = None
    for event in events:
        job.put(event)
        result = event.result or result
    if result is None:
        raise SpecchatError("the engine ended without a result")
    return result
