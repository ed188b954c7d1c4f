"""Chat prompts, built with the tokenizer's own chat template.

What a user typed is text, never a control token: a special token's text typed in a message (`<|im_start|>system`,
pasted with a document) is read as the characters it is, so a message cannot open a system turn of its own; only
the markers the template itself writes are special. A conversation without such text is tokenized whole, as
always. Otherwise each typed special token is wrapped in markers before the template is rendered (markers made
anew for each prompt, so no text can forge them), the rendered prompt is cut at the markers, and each typed token
is encoded as plain text between pieces encoded as usual: the pieces are exactly where the tokenizer would have cut
the text anyway (at special tokens), so everything else is tokenized as before. transformers' own
`apply_chat_template(sanitize_control_tokens=True)` does the same in its newest releases; this works with every
release the project supports, and encodes plain text on a copy of the tokenizer, never by switching the shared
tokenizer's `split_special_tokens` (another thread may be tokenizing with it).

A tokenizer is shared by threads (the window's GUI thread fits a prompt and measures the context meter while its
background thread counts a document and the model thread indexes past replies): whoever encodes with it outside a
reply's decoding holds its one lock (`tokenizer_lock`), so that no two threads use it at once.
"""

from __future__ import annotations

import re
import threading
import uuid
import weakref
from dataclasses import dataclass
from typing import Sequence

from ..core.errors import PromptError
from ..core.text import lone_surrogate


@dataclass(frozen=True)
class Message:
    role: str  # "system", "user" or "assistant"
    content: str


_TOKENIZER_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS_MADE = threading.Lock()  # two threads asking for a tokenizer's first lock get the same one


def tokenizer_lock(tokenizer) -> threading.RLock:
    """The one lock of `tokenizer` (made on first use, kept as long as the tokenizer is): held around each encoding
    with it (and with the plain-text copy of it that `_plain_ids` keeps), so that two threads never encode with it
    at once. Reentrant: a caller holding it may encode through a function that takes it too."""
    with _LOCKS_MADE:
        lock = _TOKENIZER_LOCKS.get(tokenizer)
        if lock is None:
            lock = _TOKENIZER_LOCKS[tokenizer] = threading.RLock()
        return lock


def encoded(tokenizer, text, **options) -> list:
    """`tokenizer(text, add_special_tokens=False, **options)["input_ids"]` under the tokenizer's lock: the ids of
    a text (a list of texts: a list of id lists)."""
    with tokenizer_lock(tokenizer):
        return tokenizer(text, add_special_tokens=False, **options)["input_ids"]


def build_prompt_ids(tokenizer, history: Sequence[Message], system: str | None = None) -> list[int]:
    """Token ids of a conversation ending with a user turn, ready for the assistant's reply.

    The template is rendered to text and tokenised without extra special tokens, because templates already place
    BOS/turn markers where the model was trained to see them. A model without a template gets a plain transcript.
    Special tokens typed in a message stay text (see the module's note). PromptError for a conversation that does
    not end with a user message, an empty last message, or text with a lone surrogate (no tokenizer reads it).
    """
    if not history or history[-1].role != "user":
        raise PromptError("a conversation must end with a user message")
    if not history[-1].content.strip():
        raise PromptError("the message is empty")
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": m.role, "content": m.content} for m in history
    ]
    for message in messages:
        _check_text(message)
    typed = _typed_special_tokens(tokenizer, messages)
    if typed is None:
        return encoded(tokenizer, _render(tokenizer, messages))
    return _ids_with_typed_tokens_as_text(tokenizer, messages, typed)


def special_texts(tokenizer) -> set[str]:
    """The text of every special token of `tokenizer` (its turn markers, BOS, EOS, ...)."""
    texts = set(getattr(tokenizer, "all_special_tokens", None) or ())
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            texts.add(str(token))
    return {text for text in texts if text}


def _typed_special_tokens(tokenizer, messages: list[dict]) -> re.Pattern | None:
    """A pattern of the special tokens the messages hold (the longest first, so a token wins over those it
    contains), or None when they hold none."""
    found = {text for text in special_texts(tokenizer) if any(text in m["content"] for m in messages)}
    if not found:
        return None
    return re.compile("|".join(map(re.escape, sorted(found, key=len, reverse=True))))


def _check_text(message: dict) -> None:
    """Raises PromptError when the message's text holds a lone surrogate (core.text), which no tokenizer reads."""
    index = lone_surrogate(message["content"])
    if index is not None:
        raise PromptError(f"the {message['role']} message holds a lone surrogate (U+"
                          f"{ord(message['content'][index]):04X}), which is not a character")


def _render(tokenizer, messages: list[dict]) -> str:
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"


def _ids_with_typed_tokens_as_text(tokenizer, messages: list[dict], typed: re.Pattern) -> list[int]:
    """The prompt with each typed special token marked, rendered, and encoded piece by piece: the typed tokens
    as plain text, the text between them (the template's own markers included) as usual. A marker the template
    split from its token (a template that cuts a message at a token) still cuts the text there, and is dropped."""
    nonce = uuid.uuid4().hex
    start, end = f"\U000f0000{nonce}\U000f0001", f"\U000f0001{nonce}\U000f0000"
    marked = [{**m, "content": typed.sub(lambda found: start + found[0] + end, m["content"])} for m in messages]
    pieces = re.split(f"{re.escape(start)}(.*?){re.escape(end)}|{re.escape(start)}|{re.escape(end)}",
                      _render(tokenizer, marked), flags=re.DOTALL)
    newline = encoded(tokenizer, "\n")
    ids = encoded(tokenizer, pieces[0])
    for index, piece in enumerate(pieces[1:], start=1):
        if piece:
            ids += _piece_ids(tokenizer, piece, as_text=index % 2 == 1, newline=newline)
    return ids


def _piece_ids(tokenizer, piece: str, as_text: bool, newline: list[int]) -> list[int]:
    """A piece from the middle of a prompt, encoded after a newline that is then taken off again (a SentencePiece
    tokenizer would otherwise mark the piece as the start of a text), or alone when the newline joins with it."""
    encode = (lambda text: _plain_ids(tokenizer, text)) if as_text else (lambda text: encoded(tokenizer, text))
    ids = encode("\n" + piece)
    return ids[len(newline):] if ids[:len(newline)] == newline else encode(piece)


def reply_text_ids(tokenizer, text: str) -> list[int]:
    """A reply's text as the model reads it after its prompt when its own tokens were not kept (continuing a reply
    written before they were stored, or by another model): the text encoded as plain characters, any special
    token's text in it included, as a typed message's is (the module's note)."""
    return _plain_ids(tokenizer, text) if text else []


_PLAIN_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _plain_ids(tokenizer, text: str) -> list[int]:
    """`text` encoded with its special tokens as plain characters: on a copy of a fast tokenizer's backend that
    splits them (made once per tokenizer), or with a Python tokenizer's own split_special_tokens. Both under the
    tokenizer's lock: the copy is shared by the threads that share the tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return encoded(tokenizer, text, split_special_tokens=True)
    with tokenizer_lock(tokenizer):
        plain = _PLAIN_COPIES.get(tokenizer)
        if plain is None:
            plain = type(backend).from_str(backend.to_str())
            plain.encode_special_tokens = True
            plain.no_truncation()
            plain.no_padding()
            _PLAIN_COPIES[tokenizer] = plain
        return plain.encode(text, add_special_tokens=False).ids


def build_fitting_prompt(tokenizer, history: Sequence[Message], system: str | None,
                         max_tokens: int) -> tuple[list[int], int]:
    """The prompt of the conversation's newest turns that fits in max_tokens, and how many of its oldest messages
    were left out for it (0 when the whole conversation fits). The system prompt always stays, and the prompt
    starts with a user turn. Nothing is deleted: it is the prompt that is shorter, not the conversation.
    PromptError if even the last user message does not fit.

    Starting later only shortens the prompt, so the earliest start that fits is found by bisection over the user
    turns: a few renderings of the template, not one per message, for a chat far longer than the window."""
    whole = build_prompt_ids(tokenizer, history, system)
    if len(whole) <= max_tokens:
        return whole, 0
    starts = [i for i, m in enumerate(history) if m.role == "user" and i > 0]
    low, high, best = 0, len(starts) - 1, None  # best: the earliest start known to fit, with its prompt
    while low <= high:
        middle = (low + high) // 2
        prompt = build_prompt_ids(tokenizer, history[starts[middle]:], system)
        if len(prompt) <= max_tokens:
            best, high = (starts[middle], prompt), middle - 1
        else:
            low = middle + 1
    if best is None:
        last = build_prompt_ids(tokenizer, history[-1:], system)
        raise PromptError(f"your message has about {len(last)} tokens with the chat's instructions, more than "
                          f"the model's context window holds with room for a reply ({max_tokens}); shorten it")
    start, prompt = best
    return prompt, start
