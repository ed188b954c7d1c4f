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
