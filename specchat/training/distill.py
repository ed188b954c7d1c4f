"""Self-distillation data: the target's own replies to training prompts, and its next-token distributions on them.

Replies are generated greedily in large left-padded batches (batched decoding is several times faster per token
than one sequence at a time on a CPU). At every reply position we also keep the target's top-k next-token
probabilities, recorded while it generates: soft labels that carry more than the single greedy token (how sure
the target is and what else it considered) at no extra cost; a separate teacher-forced float32 pass over the same
text would cost about as much compute again on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

Progress = Callable[[int], None]  # called with the number of items just finished


@dataclass
class Example:
    """One conversation: the prompt's token ids followed by the target's reply (ending with EOS if it ended)."""

    ids: list[int]
    prompt_len: int
    category: str = ""


@dataclass
class Labels:
    """The teacher's top-k next-token distribution at each position that predicts a reply token (positions
    prompt_len-1 .. len-2): [reply length, k] ids and probabilities."""

    top_ids: torch.Tensor  # int32
    top_probs: torch.Tensor  # float16


def length_sorted_batches(lengths: Sequence[int], max_batch: int, max_tokens: int) -> list[list[int]]:
    """Indices grouped by similar length (little padding), each group within a size and a padded-token budget."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, current = [], []
    for index in order:
        longest = max([lengths[i] for i in current] + [lengths[index]])
        if current and (len(current) >= max_batch or longest * (len(current) + 1) > max_tokens):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def left_padded_batches(prompts: Sequence[list[int]], batch_size: int, pad_id: int):
    """(indices, ids, attention mask) per batch of similar-length prompts, left-padded so that every prompt ends
    where generation starts (the generated tokens of row r begin at column ids.shape[1])."""
    lengths = [len(p) for p in prompts]
    for batch in length_sorted_batches(lengths, batch_size, batch_size * max(lengths, default=0)):
        width = max(lengths[i] for i in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, index in enumerate(batch):
            ids[row, width - lengths[index]:] = torch.tensor(prompts[index])
            mask[row, width - lengths[index]:] = 1
        yield batch, ids, mask


class _TopKRecorder:
    """A logits processor that records the top-k of each decoding step's distribution and changes nothing: the
    target computes these distributions while generating anyway, so soft labels come for free."""

    def __init__(self, k: int):
        self.k = k
        self.steps: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs, ids = torch.softmax(scores.float(), dim=-1).topk(self.k, dim=-1)
        self.steps.append((ids.to(torch.int32).cpu(), probs.to(torch.float16).cpu()))
        return scores

    def labels_for_row(self, row: int, length: int) -> Labels:
        return Labels(torch.stack([self.steps[t][0][row] for t in range(length)]),
                      torch.stack([self.steps[t][1][row] for t in range(length)]))


@torch.inference_mode()
def generate_replies(model, prompts: Sequence[list[int]], eos_ids: set[int], pad_id: int, max_new_tokens: int,
                     batch_size: int, top_k: int, progress: Progress | None = None) -> list[tuple[list[int], Labels]]:
    """Greedy replies (token ids, cut after the first EOS) for each prompt, in the prompts' order, with the
    target's top-k next-token distribution at each reply position."""
    from transformers import LogitsProcessorList

    results: list[tuple[list[int], Labels] | None] = [None] * len(prompts)
    device = next(model.parameters()).device
    for batch, ids, mask in left_padded_batches(prompts, batch_size, pad_id):
        width = ids.shape[1]
        recorder = _TopKRecorder(top_k)
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=pad_id, eos_token_id=sorted(eos_ids),
                             logits_processor=LogitsProcessorList([recorder]))
        for row, index in enumerate(batch):
            reply = _cut_after_eos(out[row, width:].tolist(), eos_ids)
            results[index] = (reply, recorder.labels_for_row(row, len(reply)))
        if progress:
            progress(len(batch))
    return results  # type: ignore[return-value]


def _cut_after_eos(tokens: list[int], eos_ids: set[int]) -> list[int]:
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: i + 1]
    return tokens
