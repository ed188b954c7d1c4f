"""The model `specchat serve` answers with: prompts from requests, the generation config, and the run record.

Requests may leave sampling parameters out; they then take the server's defaults (greedy unless the server was
started with a temperature), not OpenAI's temperature 1, because greedy replies are the ones that are exactly
plain decoding's and comparable across runs. Every generation is stored with source "api" in the same statistics
as the app's chats, races and benchmarks, so the dashboard shows what the server did.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from ..engine import GenerationConfig, GenerationResult, Message, PromptError, SamplingParams, SpecchatError
from ..engine.chat import build_prompt_ids
from ..engine.pair import ModelPair
from ..engine.speculative import SpeculativeEngine
from ..storage import StorageError
from ..storage.records import RunRecord
from .jobs import Job
from .protocol import ApiError, ChatCompletionRequest, CompletionRequest, SamplingRequest


def api_model_id(name: str) -> str:
    """A model's name as clients write it: "SmolLM2-135M-Instruct (embedded, GGUF Q4_1)" -> "SmolLM2-135M-Instruct"
    (the description in brackets dropped, spaces as dashes)."""
    return "-".join(name.split(" (")[0].split()) or "model"


class ServedModel:
    def __init__(self, pair: ModelPair, drafter: str, defaults: GenerationConfig, store=None,
                 model_id: str | None = None):
        """defaults: what a request gets for each parameter it leaves out (the CLI's or the window's settings)."""
        pair.check_drafter(drafter)
        self.pair, self.drafter, self.defaults, self.store = pair, drafter, defaults, store
        self.model_id = model_id or api_model_id(pair.target.name)
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
        window = self.pair.context_window()
        if len(ids) >= window:
            raise ApiError(400, f"the prompt has {len(ids)} tokens; the model reads at most {window}, reply "
                                "included", param=param, code="context_length_exceeded")
        return ids

    def config_for(self, request: SamplingRequest) -> GenerationConfig:
        request.refuse_what_we_cannot_do()
        d = self.defaults
        try:
            sampling = SamplingParams(
                temperature=d.sampling.temperature if request.temperature is None else request.temperature,
                top_p=d.sampling.top_p if request.top_p is None else request.top_p,
                top_k=d.sampling.top_k if request.top_k is None else request.top_k)
        except ValueError as error:
            raise ApiError(400, str(error)) from None
        return replace(d, max_new_tokens=request.token_limit() or d.max_new_tokens, sampling=sampling,
                       seed=d.seed if request.seed is None else request.seed,
                       stop_strings=request.stop_strings() or d.stop_strings)

    # --- on the device thread ------------------------------------------------------------------------------------

    def engine(self) -> SpeculativeEngine:
        """Built once, on the device thread, on first use (and kept: its caches and K policy warm up)."""
        if self._engine is None:
            self._engine = self.pair.engine(self.drafter)
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
        record = RunRecord(
            **RunRecord.figures(result.stats.to_dict()), source="api", target=pair.target.name,
            draft=pair.draft_name(self.drafter), drafter=self.drafter, k=config.k,
            adaptive=config.adaptive_k, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k, seed=result.seed, device=str(pair.target.device),
            finish_reason=result.finish_reason)
        try:
            self.store.record_run(record)
        except StorageError as error:  # the client has its reply either way
            print(f"specchat serve: the run could not be recorded: {error}", file=sys.stderr)
