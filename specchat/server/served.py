"""The model `specchat serve` answers with: prompts from requests, the generation config, and the run record.

Requests may leave sampling parameters out; they then take the server's defaults (greedy unless the server was
started with a temperature), not OpenAI's temperature 1, because greedy replies are the ones that are exactly
plain decoding's and comparable across runs. Every generation is stored with source "api" in the same statistics
as the app's chats, races and benchmarks, so the dashboard shows what the server did.

The served context is sized once, at start (`--ctx-size`, as `llama-server -c` and vLLM's `--max-model-len`): a
prompt and its reply together never exceed it, so no request can make the engine's KV cache grow toward the
model's training length (gigabytes on an 8B model). A `max_tokens` beyond it is a 400; a smaller one that does not
fit after the prompt is cut to the room left (the reply then ends with finish_reason "length").
"""

from __future__ import annotations

import sys
from dataclasses import replace

from ..engine import GenerationConfig, GenerationResult, Message, PromptError, SamplingParams, SpecchatError
from ..engine.chat import build_prompt_ids
from ..engine.pair import ModelPair
from ..engine.speculative import SpeculativeEngine
from ..storage import StorageError
from ..storage.records import RunContext, run_record
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


class ServedModel:
    def __init__(self, pair: ModelPair, drafter: str, defaults: GenerationConfig, store=None,
                 model_id: str | None = None, context_size: int | None = None):
        """defaults: what a request gets for each parameter it leaves out (the CLI's or the window's settings);
        context_size: the served context (served_context: --ctx-size, else the default, at most the model's)."""
        pair.check_drafter(drafter)
        self.pair, self.drafter, self.defaults, self.store = pair, drafter, defaults, store
        self.model_id = model_id or api_model_id(pair.target.name)
        self.context_size = served_context(pair, context_size)
        self._engine: SpeculativeEngine | None = None

    # --- requests to prompts -------------------------------------------------------------------------------------

    def chat_prompt(self, request: ChatCompletionRequest) -> list[int]:
        """The conversation through the tokenizer's chat template; system and developer messages are joined into
        the system prompt, which templates place first."""
        system = "\n\n".join(m.text() for m in request.messages if m.role in ("system", "developer")) or None
        history = [Message(m.role, m.text()) for m in request.messages if m.role in ("user", "assistant")]
        try:
            ids = build_prompt_ids(self.pair.target.tokenizer, history, system)
        except PromptError as error:
            raise ApiError(400, f"messages: {error}", param="messages") from None
        return self._fitting(ids, "messages")

    def completion_prompt(self, request: CompletionRequest) -> list[int]:
        text = request.prompt_text()
        if not text:
            raise ApiError(400, "the prompt is empty", param="prompt")
        ids = self.pair.target.tokenizer(text, add_special_tokens=True)["input_ids"]
        return self._fitting(ids, "prompt")

    def _fitting(self, ids: list[int], param: str) -> list[int]:
        window = self.context_size
        if len(ids) >= window:
            raise ApiError(400, f"the prompt has {len(ids)} tokens; this server reads at most {window}, reply "
                                "included (--ctx-size)", param=param, code="context_length_exceeded")
        return ids

    def check_request(self, request: SamplingRequest) -> None:
        """400 before any work for what no prompt can make valid: unsupported parameters, and a token limit
        beyond the served context."""
        request.refuse_what_we_cannot_do()
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
        room = max(1, self.context_size - prompt_tokens)
        return replace(d, max_new_tokens=min(request.token_limit() or d.max_new_tokens, room), sampling=sampling,
                       seed=d.seed if request.seed is None else request.seed,
                       stop_strings=request.stop_strings() or d.stop_strings)

    # --- on the device thread ------------------------------------------------------------------------------------

    def engine(self) -> SpeculativeEngine:
        """Built once, on the device thread, on first use (and kept: its caches and K policy warm up)."""
        if self._engine is None:
            engine = self.pair.engine(self.drafter)
            engine.context_window = min(engine.context_window, self.context_size)  # the served context, fixed
            self._engine = engine
        return self._engine

    def generate(self, job: Job, prompt_ids: list[int], config: GenerationConfig) -> GenerationResult:
        """Streams the reply's step events to the job and returns the result; the run is then recorded."""
        result = None
        for event in self.engine().stream(prompt_ids, config, job.cancel):
            job.put(event)
            if event.result is not None:
                result = event.result
        if result is None:
            raise SpecchatError("the engine ended without a result")
        self._record(result, config)
        return result

    def _record(self, result: GenerationResult, config: GenerationConfig) -> None:
        """The run in the statistics; a storage failure is reported on stderr and does not fail the reply."""
        if self.store is None:
            return
        pair, sampling = self.pair, config.sampling
        context = RunContext(
            target=pair.target.name, draft=pair.draft_name(self.drafter), drafter=self.drafter, k=config.k,
            adaptive=config.adaptive_k, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k, seed=result.seed, device=str(pair.target.device), exactness=pair.target.exactness)
        record = run_record(result.stats.to_dict(), context, "api", finish_reason=result.finish_reason)
        try:
            self.store.record_run(record)
        except StorageError as error:  # the client has its reply either way
            print(f"specchat serve: the run could not be recorded: {error}", file=sys.stderr)
