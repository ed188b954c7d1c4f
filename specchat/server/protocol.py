"""The OpenAI wire format that `specchat serve` speaks: requests (validated by pydantic) and the JSON it answers.

Only what our engine does is accepted. A parameter we cannot honour exactly (n > 1, logprobs, penalties, tools,
logit_bias, response_format, ...: REFUSED_PARAMETERS) is refused with a 400 that names it, rather than silently
ignored: a client that relies on it learns at once. Other unknown fields are ignored, as OpenAI's own server does,
so clients that send new optional fields that do not change the reply (`user`, `metadata`, ...) still work.
Every number has a bound: seed and top_k fit the database's 64-bit integers; stop strings are at most 4, each at
most MAX_STOP_CHARS characters (each step checks the held-back text against every one); a temperature is 0 (greedy)
or at least MIN_TEMPERATURE, a top_p at least MIN_TOP_P (smaller ones would only be greedy decoding in disguise).
Numbers are JSON numbers, integers JSON integers ("3", true and 3.5 are refused, not read as 3 or 1). Every text
must be text: a lone surrogate (a JSON "\ud800" escape without its pair) is refused with a 400 naming the field, as
no tokenizer can read it and no JSON answer could repeat it. A user message's content may hold documents as file
parts (FilePart: OpenAI's {"type": "file", "file": {"filename", "file_data"}}), which file_parts.py bounds and reads.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator

from ..core.text import lone_surrogate
from ..core.vocabulary import (CANCELLED, CONTEXT, EOS, INT64_MAX, INT64_MIN, LENGTH, MAX_TEMPERATURE,
                               MIN_TEMPERATURE, STOP, origin_name)
from ..engine.decoding.events import GenerationResult, StepEvent

MAX_STOP_STRINGS = 4  # as OpenAI's API
MAX_STOP_CHARS = 256  # each; a stop string is checked against the reply's tail at every step
MIN_TOP_P = 1e-6  # a smaller nucleus keeps only the most likely token all the same

# Parameters that would change the reply, which we do not implement: refused with a 400 naming them, unless sent
# with the value that changes nothing (the second element: a test of the value that is harmless).
REFUSED_PARAMETERS: dict[str, tuple[str, object]] = {
    "logit_bias": ("logit_bias is not supported: it would change the distribution that speculative decoding "
                   "reproduces exactly", lambda v: not v),
    "response_format": ("response_format (JSON mode, structured output) is not supported; only text replies",
                        lambda v: v is None or (isinstance(v, dict) and v.get("type") == "text")),
    "top_logprobs": ("top_logprobs is not supported (no logprobs)", lambda v: not v),
    "functions": ("functions (function calls) are not supported", lambda v: not v),
    "function_call": ("function_call is not supported", lambda v: v in (None, "none")),
    "tool_choice": ("tool_choice is not supported (no tool calls)", lambda v: v in (None, "none", "auto")),
    "best_of": ("best_of is not supported: one reply per request", lambda v: v in (None, 1)),
    "suffix": ("suffix (fill in the middle) is not supported", lambda v: not v),
    "min_p": ("min_p is not supported; use top_p or top_k", lambda v: v in (None, 0, 0.0)),
    "repetition_penalty": ("repetition_penalty is not supported: penalties would change the distribution that "
                           "speculative decoding reproduces exactly", lambda v: v in (None, 1, 1.0)),
    "typical_p": ("typical_p is not supported", lambda v: v in (None, 1, 1.0)),
    "min_tokens": ("min_tokens is not supported", lambda v: not v),
    "guided_json": ("guided decoding is not supported", lambda v: v is None),
    "guided_regex": ("guided decoding is not supported", lambda v: v is None),
    "guided_choice": ("guided decoding is not supported", lambda v: v is None),
    "guided_grammar": ("guided decoding is not supported", lambda v: v is None),
    "grammar": ("grammars are not supported", lambda v: not v),
    "json_schema": ("JSON schemas are not supported", lambda v: not v),
    "prediction": ("predicted outputs are not supported", lambda v: v is None),
    "audio": ("audio output is not supported", lambda v: v is None),
    "modalities": ("only the text modality is supported", lambda v: v in (None, ["text"])),
}


class ApiError(Exception):
    """A request the server refuses, with the HTTP status and OpenAI's error object (type, param, code)."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def text_only(value):
    """`value` as sent (a string, a list of strings, or content parts {"type": "text", "text": ...}), checked
    before pydantic reads it, so that the 400 names the field itself: ValueError for a string with a lone
    surrogate, which JSON's \\u escapes can carry but no tokenizer reads (nor can a JSON answer repeat it)."""
    texts = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    for text in texts:
        text = text.get("text") if isinstance(text, dict) else text
        index = lone_surrogate(text) if isinstance(text, str) else None
        if index is not None:
            raise ValueError(f"the text holds a lone surrogate (U+{ord(text[index]):04X} at character "
                             f"{index}), which is not a character: send UTF-8 text")
    return value


class TextPart(BaseModel):
    type: Literal["text"]
    text: str

    _text_only = field_validator("text", mode="before")(text_only)


class FileData(BaseModel):
    """A file part's file, as OpenAI's chat completions take it: its name (its extension says how it is read) and
    its bytes in base64 (plain, or a data: URL with ;base64). file_id (a file uploaded to OpenAI's Files API) is
    refused by file_parts.py: this server has no Files API."""

    model_config = ConfigDict(extra="ignore")

    filename: str | None = None
    file_data: str | None = None
    file_id: str | None = None


class FilePart(BaseModel):
    """A document attached to a user message: {"type": "file", "file": {"filename", "file_data"}}."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["file"]
    file: FileData


ContentPart = Annotated[Union[TextPart, FilePart], Field(discriminator="type")]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None

    _text_only = field_validator("content", mode="before")(text_only)

    def text(self) -> str:
        """The message's text: its string, or its text parts joined (file parts are documents, not text)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, TextPart))

    def files(self) -> list[tuple[int, FilePart]]:
        """The message's file parts, each with its index among the message's parts."""
        if not isinstance(self.content, list):
            return []
        return [(index, part) for index, part in enumerate(self.content) if isinstance(part, FilePart)]


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingRequest(BaseModel):
    """The parameters both endpoints share. None means "the server's default" (see ServedModel.config_for).
    Unknown fields are kept in model_extra, where refuse_what_we_cannot_do looks for REFUSED_PARAMETERS."""

    model_config = ConfigDict(extra="allow")

    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    temperature: StrictFloat | None = Field(default=None, ge=0, le=MAX_TEMPERATURE)
    top_p: StrictFloat | None = Field(default=None, gt=0, le=1)
    top_k: StrictInt | None = Field(default=None, ge=0, le=INT64_MAX)  # not OpenAI's; llama.cpp's, vLLM's take it
    seed: StrictInt | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    stop: str | list[str] | None = None
    n: StrictInt = 1
    logprobs: bool | int | None = None
    presence_penalty: StrictFloat = 0.0
    frequency_penalty: StrictFloat = 0.0
    tools: list | None = None

    @field_validator("stop")
    @classmethod
    def _at_most_four_stop_strings(cls, stop):
        stops = [stop] if isinstance(stop, str) else stop or []
        if len(stops) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop sequences are allowed")
        if any(not s for s in stops):
            raise ValueError("a stop sequence must not be empty")
        if any(len(s) > MAX_STOP_CHARS for s in stops):
            raise ValueError(f"a stop sequence may have at most {MAX_STOP_CHARS} characters")
        return stop

    _text_only = field_validator("stop", mode="before")(text_only)

    @field_validator("temperature")
    @classmethod
    def _greedy_or_a_real_temperature(cls, temperature):
        if temperature is not None and 0 < temperature < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}: a smaller one only "
                             "picks the most likely token, so send 0")
        return temperature

    @field_validator("top_p")
    @classmethod
    def _a_nucleus_that_means_something(cls, top_p):
        if top_p is not None and top_p < MIN_TOP_P:
            raise ValueError(f"top_p must be at least {MIN_TOP_P:g}: a smaller nucleus only keeps the most likely "
                             "token (top_k 1 does that)")
        return top_p

    def stop_strings(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def refuse_what_we_cannot_do(self) -> None:
        """400 for the parameters whose meaning we would otherwise change without saying so."""
        unsupported = [(self.n != 1, "n", "only n=1 is supported: one reply per request"),
                       (bool(self.logprobs), "logprobs", "logprobs are not supported"),
                       (self.presence_penalty != 0, "presence_penalty", "penalties would change the distribution "
                                                                        "that speculative decoding reproduces exactly; "
                                                                        "they are not supported"),
                       (self.frequency_penalty != 0, "frequency_penalty", "penalties are not supported"),
                       (bool(self.tools), "tools", "tool calls are not supported")]
        for refused, param, message in unsupported:
            if refused:
                raise ApiError(400, message, param=param, code="unsupported_parameter")
        for param, value in (self.model_extra or {}).items():
            message, harmless = REFUSED_PARAMETERS.get(param, (None, None))
            if message is not None and not harmless(value):
                raise ApiError(400, message, param=param, code="unsupported_parameter")


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)

    def has_files(self) -> bool:
        """Whether a message carries a file part (a document)."""
        return any(message.files() for message in self.messages)


class CompletionRequest(SamplingRequest):
    prompt: str | list[str]
    echo: bool = False

    _prompt_only_text = field_validator("prompt", mode="before")(text_only)

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise ApiError(400, "send one prompt per request (a list of prompts is not supported)", param="prompt")
        return self.prompt[0]


# --- answers -----------------------------------------------------------------------------------------------------

# A "cancelled" reply was cut short by the server (a restart, a shutdown): "abort", as vLLM says, never "stop".
# (A client that went away cancels its reply too, but then nobody reads the answer.)
FINISH_REASONS = {EOS: "stop", STOP: "stop", LENGTH: "length", CONTEXT: "length", CANCELLED: "abort"}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def speculative_figures(event: StepEvent | None, result: GenerationResult | None = None) -> dict:
    """The extension field `specchat` of every chunk and reply: where each token of this piece came from and the
    acceptance so far. runs are the piece's text cut by origin, so a client can highlight accepted draft text
    exactly (origins are per token; a token inside a multi-byte character has no text of its own)."""
    stats = (result or event).stats
    figures = {"alpha": round(stats.alpha, 4), "tau": round(stats.tau, 4), "draft_proposed": stats.draft_proposed,
               "draft_accepted": stats.draft_accepted, "target_passes": stats.target_passes}
    if event is not None:
        figures["origins"] = [origin_name(o) for o in event.origins]
        figures["runs"] = [{"text": text, "origin": origin_name(origin)} for text, origin in event.runs()]
    if result is not None:
        figures["origins"] = [origin_name(o) for o in result.origins]
        figures["tokens_per_s"] = round(stats.tokens_per_s, 2)
    return figures


class Answer:
    """The ids and timestamps one request's answer shares across its chunks."""

    def __init__(self, chat: bool, model: str, documents: dict | None = None):
        """documents: what the reply was given of the request's documents (served.ChatPrompt.documents_field), added
        to the `specchat` field of the whole reply and of the stream's last chunk; None without documents."""
        self.chat, self.model, self.documents = chat, model, documents
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"

    def _head(self, object_name: str) -> dict:
        return {"id": self.id, "object": object_name, "created": self.created, "model": self.model}

    def chunk(self, text: str, event: StepEvent | None, first: bool = False, finish: str | None = None) -> dict:
        """One streamed piece: the text of one engine step (the tokens one target pass produced)."""
        if self.chat:
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            if finish is not None and not text:
                delta = {}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            body = self._head("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            body = self._head("text_completion")
        body["choices"] = [choice]
        if event is not None:
            body["specchat"] = speculative_figures(event)
        if finish is not None and self.documents is not None:  # the last chunk says what the reply was given
            body.setdefault("specchat", {}).update(self.documents)
        return body

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict:
        body = self._head("chat.completion.chunk" if self.chat else "text_completion")
        body.update(choices=[], usage=usage(prompt_tokens, completion_tokens))
        return body

    def whole(self, result: GenerationResult, prefix: str = "") -> dict:
        """The non-streamed answer."""
        finish = FINISH_REASONS.get(result.finish_reason, "stop")
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": result.text}, "logprobs": None,
                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": prefix + result.text, "logprobs": None, "finish_reason": finish}
        body = self._head(self.object)
        body.update(choices=[choice], usage=usage(result.stats.prompt_tokens, result.stats.new_tokens),
                    specchat={**speculative_figures(None, result), **(self.documents or {})})
        return body
