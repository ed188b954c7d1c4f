"""The draft head's broad data: prompts the target writes itself (Magpie), real documents, follow-up turns.

The templated rounds (prompts.py, varied.py) taught the first heads the project's own phrasings: on Spec-Bench the
head accepted 0.28 against 0.47 on the project's suite. These rounds stand for what people ask a local assistant
without anyone here writing the requests:

- **Self-written requests** (Magpie, Xu et al. 2024). The target's chat template is rendered up to where a user turn
  begins, and the target samples that turn: an instruction model writes the requests it was tuned on, in its own
  distribution, with no dataset and no licence. A system prompt steers the kind (open chat and advice, writing,
  code, math word problems, explanations); the reply is then asked with the ordinary default system prompt, as the
  app asks it.
- **Grounded work over real documents**: prose passages of public-domain Python Enhancement Proposals
  (documents.py) to summarize, answer from, extract from and explain; half with a templated task, half with a
  question the target itself writes after reading the passage (the user turn starts with the passage and the target
  samples the rest).
- **Translation into English** of French paragraphs (CC0) of Python's documentation.
- **Follow-ups** (round broad2): on replies of round broad1, the target samples the user's next turn the same way,
  so multi-turn conversations follow its own idea of a second question.

Sampling is seeded per batch, so one command with the same target, settings and machine asks the same prompts again;
the training manifest lists every prompt in full either way.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from .distill import left_padded_batches
from .documents import FRENCH, PEPS, load_documents
from .prompts import TrainingPrompt

MAGPIE_SOURCE, PEPS_SOURCE, FRENCH_SOURCE, BROAD_SOURCE = "target prompts", "python/peps", "python-docs-fr", "broad.py"

# category -> the system prompt that steers what kind of request the target writes (None: the template's default).
REQUEST_KINDS: dict[str, str | None] = {
    "chat": None,
    "advice": "You are a helpful assistant. Users ask you for advice and practical help with their everyday lives: "
              "work, health, money, travel, cooking, relationships and plans.",
    "writing": "You are a helpful writing assistant. Users ask you to write or improve texts: stories, poems, "
               "emails, letters, posts, speeches, descriptions and summaries.",
    "coding": "You are a helpful programming assistant. Users ask you to write, explain, review or fix code, mostly "
              "in Python, JavaScript and SQL.",
    "math": "You are a helpful math tutor. Users give you math word problems and arithmetic questions to solve "
            "step by step.",
    "knowledge": "You are a knowledgeable assistant. Users ask you factual questions about science, history, "
                 "geography, nature and technology, and ask you to explain how things work.",
}

SUMMARY_TASKS = (
    "Summarize this text in two or three sentences.",
    "Give me a short summary of the following.",
    "What is the main point of this passage?",
    "Summarize the following in one paragraph for someone who is not a programmer.",
    "List the key points of this text as bullet points.",
    "Write a TL;DR for this.",
    "Explain this passage in simple words.",
    "Write a short title for this text, then a one-sentence summary.",
    "What problem does this text describe, and what does it propose?",
    "Extract the names of every module, function or tool this text mentions, as a JSON list.",
    "Rewrite this passage to be shorter and clearer.",
    "Write three questions a reader could answer from this passage, with their answers.",
)
TRANSLATION_TASKS = (
    "Translate into English:", "Translate this French text into English.", "What does this say in English?",
    "Please translate the following paragraph from French to English.", "Translate to English, keeping the meaning:",
    "Can you translate this into plain English?",
)


@dataclass(frozen=True)
class BroadCounts:
    requests: int  # self-written requests sampled (some are dropped: cut off, too short or too long, repeated)
    documents: int  # grounded prompts over PEP passages (half templated, half with a question the target writes)
    translations: int
    request_tokens: int = 96  # the most a sampled user turn may take; a longer one is dropped as cut off
    passage_words: int = 220


Sampler = Callable[[list[list[int]], int], list[str | None]]  # (prefix ids, max new tokens) -> turn text or None


def turn_prefix(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of a conversation rendered by the chat template up to where the next user turn's text begins.
    The template renders a marker user turn and is cut at the marker, so this works for any template."""
    marker = "\u2063MARK\u2063"
    text = tokenizer.apply_chat_template(messages + [{"role": "user", "content": marker}], tokenize=False,
                                         add_generation_prompt=False)
    return tokenizer(text[: text.index(marker)], add_special_tokens=False)["input_ids"]


@torch.inference_mode()
def sample_turns(model, tokenizer, prefixes: Sequence[list[int]], eos_ids: set[int], pad_id: int,
                 max_new_tokens: int, batch_size: int, seed: int, progress=None) -> list[str | None]:
    """The target's sampled continuation of each prefix up to its end of turn (temperature 1, top-p 0.98), or
    None where it did not end within max_new_tokens. Each batch is seeded from `seed` and its first index."""
    results: list[str | None] = [None] * len(prefixes)
    for batch, ids, mask in left_padded_batches(prefixes, batch_size, pad_id):
        width = ids.shape[1]
        torch.manual_seed(seed * 1_000_003 + min(batch))
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=0.98,
                             top_k=0, max_new_tokens=max_new_tokens, pad_token_id=pad_id,
                             eos_token_id=sorted(eos_ids))
        for row, index in enumerate(batch):
            tokens = out[row, width:].tolist()
            ends = [i for i, t in enumerate(tokens) if t in eos_ids]
            if ends:
                results[index] = tokenizer.decode(tokens[: ends[0]], skip_special_tokens=True).strip()
        if progress:
            progress(len(batch))
    return results


def usable_request(text: str | None, low_words: int = 4, high_words: int = 160) -> bool:
    """A sampled user turn worth asking: it ended on its own, has a sensible length, and does not run on into a
    made-up reply or another turn."""
    if not text:
        return False
    words = len(text.split())
    leaks = re.search(r"<\||\b(assistant|SmolLM|User|AI)\s*:|^(assistant|user)\b", text, re.IGNORECASE)
    return low_words <= words <= high_words and not leaks


def _distinct(prompts: list[TrainingPrompt]) -> list[TrainingPrompt]:
    seen, kept = set(), []
    for prompt in prompts:
        key = (" ".join(prompt.text.lower().split()), prompt.history)
        if key not in seen:
            seen.add(key)
            kept.append(prompt)
    return kept


def first_broad_prompts(sample: Sampler, tokenizer, counts: BroadCounts, seed: int) -> list[TrainingPrompt]:
    """Round broad1: self-written requests of every kind, grounded work over PEP passages, translations."""
    rng = random.Random(seed)
    kinds = list(REQUEST_KINDS)
    asked = [kinds[i % len(kinds)] for i in range(counts.requests)]
    prefixes = [turn_prefix(tokenizer, [{"role": "system", "content": REQUEST_KINDS[k]}] if REQUEST_KINDS[k] else [])
                for k in asked]
    requests = [TrainingPrompt(kind, text, sources=(MAGPIE_SOURCE,))
                for kind, text in zip(asked, sample(prefixes, counts.request_tokens)) if usable_request(text)]
    return _distinct(requests + grounded_prompts(sample, tokenizer, counts, rng) + translation_prompts(counts, rng))


def grounded_prompts(sample: Sampler, tokenizer, counts: BroadCounts, rng: random.Random) -> list[TrainingPrompt]:
    documents = load_documents(PEPS)
    passages = rng.sample(documents, min(counts.documents, len(documents)))
    templated, open_ended = passages[: len(passages) // 2], passages[len(passages) // 2:]
    prompts = []
    for doc in templated:
        task = rng.choice(SUMMARY_TASKS)
        text = f"{task}\n\n{doc['text']}" if rng.random() < 0.6 else f"{doc['text']}\n\n{task}"
        prompts.append(TrainingPrompt("documents", text, sources=(PEPS_SOURCE, BROAD_SOURCE)))
    # The user turn starts with the passage; the target writes what the user asks about it.
    heads = [f"{doc['text']}\n\n" for doc in open_ended]
    prefixes = [turn_prefix(tokenizer, []) + tokenizer(head, add_special_tokens=False)["input_ids"]
                for head in heads]
    for head, question in zip(heads, sample(prefixes, 64)):
        if usable_request(question, low_words=3, high_words=60):
            prompts.append(TrainingPrompt("documents", head + question, sources=(PEPS_SOURCE, MAGPIE_SOURCE)))
    return prompts


def translation_prompts(counts: BroadCounts, rng: random.Random) -> list[TrainingPrompt]:
    paragraphs = load_documents(FRENCH)
    prompts = []
    for doc in rng.sample(paragraphs, min(counts.translations, len(paragraphs))):
        task = rng.choice(TRANSLATION_TASKS)
        prompts.append(TrainingPrompt("translation", f"{task}\n\n{doc['text']}",
                                      sources=(FRENCH_SOURCE, BROAD_SOURCE)))
    return prompts


def follow_up_prompts(sample: Sampler, tokenizer, conversations: Sequence[tuple[TrainingPrompt, str]], count: int,
                      seed: int) -> list[TrainingPrompt]:
    """Round broad2: the user's next turn after a broad1 conversation, sampled by the target under the same
    steering system prompt as the first request."""
    rng = random.Random(seed + 1)
    picked = rng.sample(list(conversations), min(count, len(conversations)))
    prefixes = []
    for prompt, reply in picked:
        system = REQUEST_KINDS.get(prompt.category)
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt.text}, {"role": "assistant", "content": reply}]
        prefixes.append(turn_prefix(tokenizer, messages))
    prompts = [TrainingPrompt(prompt.category, text, history=(prompt.text, reply),
                              sources=(*prompt.sources, MAGPIE_SOURCE))
               for (prompt, reply), text in zip(picked, sample(prefixes, 64)) if usable_request(text, 2, 80)]
    return _distinct(prompts)
