"""Chat prompts, built with the tokenizer's own chat template."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .errors import PromptError


@dataclass(frozen=True)
class Message:
    role: str  # "system", "user" or "assistant"
    content: str


def build_prompt_ids(tokenizer, history: Sequence[Message], system: str | None = None) -> list[int]:
    """Token ids of a conversation ending with a user turn, ready for the assistant's reply.

    The template is rendered to text and tokenised without extra special tokens, because templates already place
    BOS/turn markers where the model was trained to see them. A model without a template gets a plain transcript.
    """
    if not history or history[-1].role != "user":
        raise PromptError("a conversation must end with a user message")
    if not history[-1].content.strip():
        raise PromptError("the message is empty")
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": m.role, "content": m.content} for m in history
    ]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def build_fitting_prompt(tokenizer, history: Sequence[Message], system: str | None,
                         max_tokens: int) -> tuple[list[int], int]:
    """The prompt of the conversation's newest turns that fits in max_tokens, and how many of its oldest messages
    were left out for it (0 when the whole conversation fits). The system prompt always stays; messages go in
    pairs from the oldest, so the prompt still starts with a user turn. Nothing is deleted: it is the prompt that
    is shorter, not the conversation. PromptError if even the last user message does not fit."""
    start = 0
    while True:
        prompt = build_prompt_ids(tokenizer, history[start:], system)
        if len(prompt) <= max_tokens:
            return prompt, start
        remaining = len(history) - start
        if remaining <= 1:
            raise PromptError(f"your message has about {len(prompt)} tokens with the chat's instructions, more than "
                              f"the model can read with room for a reply ({max_tokens}); shorten it")
        start += 2 if remaining > 2 and history[start].role == "user" else 1
        while start < len(history) - 1 and history[start].role != "user":
            start += 1
