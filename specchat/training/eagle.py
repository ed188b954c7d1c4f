"""Training the EAGLE-style draft head (engine/eagle.py) on the target's own hidden states.

Data: the same self-distillation replies as the standalone draft, teacher-forced through the target once to record
its last hidden state f_t at every reply position (the target's own computation, so every label below is exact).

Each training sample starts at a reply position t and unrolls the head U steps the way it drafts at run time:
step j reads the previous state (the target's f_t for j = 0, the head's own prediction after that) and the true
token x_{t+j+1}, and is scored against the target's next state f_{t+j+1}:
  - soft cross-entropy between the target's distribution softmax(f W'^T) and the head's softmax(f^ W'^T) over the
    kept vocabulary W' (its minimiser proposes the target's own argmax, which greedy acceptance needs), and
  - a smooth-L1 regression of f^ onto f (EAGLE's feature loss: it keeps the chained states on the target's
    manifold, so step 2 and 3 still read sensible input).
Training on its own predictions (rather than only on the target's states) is what makes the later draft positions
accept: at run time they can only ever see predicted states.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import nn

from ..engine.eagle import EagleHead, HeadShape
from .distill import Example, length_sorted_batches
from .train import optimizer_step

Progress = Callable[[int, dict], None]


@dataclass(frozen=True)
class HeadTrainOptions:
    epochs: int = 5
    batch: int = 512  # samples (start positions) per optimizer step
    peak_lr: float = 2e-3
    unroll: int = 3
    feature_weight: float = 1.0
    weight_decay: float = 0.01
    seed: int = 0
    bf16: bool = True  # autocast matmuls (much faster on AMX/AVX512-BF16 CPUs); master weights and losses fp32


@dataclass
class HeadReport:
    epochs: list[dict] = field(default_factory=list)


@torch.inference_mode()
def teacher_features(model: nn.Module, examples: Sequence[Example], batch_tokens: int = 8192,
                     progress: Callable[[int], None] | None = None) -> list[torch.Tensor]:
    """Per example, the target's last hidden states [reply length + 1, hidden] (float16) at positions
    prompt_len-1 .. len-1: row t is the state that predicts reply token t (the last row predicts past the end)."""
    decoder = model.get_decoder()
    features: list[torch.Tensor | None] = [None] * len(examples)
    lengths = [len(e.ids) for e in examples]
    for batch in length_sorted_batches(lengths, 256, batch_tokens):
        width = max(lengths[i] for i in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, index in enumerate(batch):  # right padding: causal attention never looks at it
            ids[row, : lengths[index]] = torch.tensor(examples[index].ids)
            mask[row, : lengths[index]] = 1
        device = next(model.parameters()).device
        hidden = decoder(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).last_hidden_state
        for row, index in enumerate(batch):
            start = examples[index].prompt_len - 1
            features[index] = hidden[row, start : lengths[index]].to(torch.float16).cpu().clone()
        if progress:
            progress(len(batch))
    return features  # type: ignore[return-value]


def frequent_tokens(examples: Sequence[Example], size: int, always: Sequence[int] = ()) -> torch.Tensor:
    """The `size` most frequent reply tokens (plus `always`, e.g. end-of-turn ids), sorted: the head's vocabulary."""
    counts: dict[int, int] = {}
    for example in examples:
        for token in example.ids[example.prompt_len:]:
            counts[token] = counts.get(token, 0) + 1
    for token in always:
        counts[token] = 1 << 40
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:size]
    return torch.tensor(sorted(ranked), dtype=torch.long)


class Samples:
    """All reply positions as flat tensors: F[g] = f_t and Y[g] = x_{t+1} (the reply token f_t predicts) for the
    global index g of (example, t); `starts` are the g from which `unroll` steps stay inside one reply."""

    def __init__(self, examples: Sequence[Example], features: Sequence[torch.Tensor], unroll: int):
        feature_rows, token_rows, starts, offset = [], [], [], 0
        for example, feature in zip(examples, features):
            reply = example.ids[example.prompt_len:]
            feature_rows.append(feature)
            token_rows.append(torch.tensor(reply + [0], dtype=torch.long))  # padded to the feature rows
            starts.append(torch.arange(offset, offset + max(0, len(reply) - unroll + 1)))
            offset += len(reply) + 1
        self.F = torch.cat(feature_rows)
        self.Y = torch.cat(token_rows)
        self.starts = torch.cat(starts)
        self.unroll = unroll

    def __len__(self) -> int:
        return len(self.starts)


def build_head(target: nn.Module, vocab_ids: torch.Tensor, shape: HeadShape, seed: int) -> EagleHead:
    torch.manual_seed(seed)
    head = EagleHead(shape)
    head.vocab_ids.copy_(vocab_ids)
    with torch.no_grad():  # start as "keep the target's state": the identity on f_t, nothing from the token
        head.fuse.weight.zero_()
        head.fuse.weight[:, : shape.hidden].copy_(torch.eye(shape.hidden))
        head.fuse.bias.zero_()
        for down in head.downs:
            down.weight.mul_(0.1)
    return head


class _Frozen:
    """The target's token embeddings and kept output rows, in float32, never trained."""

    def __init__(self, target: nn.Module, vocab_ids: torch.Tensor):
        self.embeddings = target.get_input_embeddings().weight.detach().float()
        self.rows = target.get_output_embeddings().weight.detach().float()[vocab_ids].contiguous()
        self.full = target.get_output_embeddings().weight.detach().float()
        self.vocab_ids = vocab_ids


def _unrolled_losses(head: EagleHead, frozen: _Frozen, samples: Samples, starts: torch.Tensor,
                     options: HeadTrainOptions, measure_full: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The loss summed over the unrolled steps, and per step whether the head's pick equals the target's argmax
    (over the kept vocabulary while training; over the full vocabulary with measure_full, as acceptance sees it)."""
    feature = samples.F[starts].float()
    total = torch.zeros(())
    agreements = []
    for j in range(samples.unroll):
        token = samples.Y[starts + j]
        truth = samples.F[starts + j + 1].float()
        predicted = head(feature, frozen.embeddings[token])
        teacher = torch.softmax(truth @ frozen.rows.T, dim=-1).float()
        log_q = torch.log_softmax((predicted @ frozen.rows.T).float(), dim=-1)
        total = total + (-(teacher * log_q).sum(-1).mean()
                         + options.feature_weight * nn.functional.smooth_l1_loss(predicted.float(), truth))
        pick = frozen.vocab_ids[log_q.argmax(-1)]
        wanted = (truth @ frozen.full.T).argmax(-1) if measure_full else frozen.vocab_ids[teacher.argmax(-1)]
        agreements.append(pick == wanted)
        feature = predicted
    return total, agreements


def _lr(step: int, total: int, peak: float) -> float:
    warmup = max(1, total // 30)
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))


def train_head(head: EagleHead, target: nn.Module, train: Samples, heldout: Samples, options: HeadTrainOptions,
               progress: Progress | None = None) -> HeadReport:
    frozen = _Frozen(target, head.vocab_ids)
    generator = torch.Generator().manual_seed(options.seed)
    steps_per_epoch = math.ceil(len(train) / options.batch)
    total = steps_per_epoch * options.epochs
    optimizer = torch.optim.AdamW(head.parameters(), lr=options.peak_lr, weight_decay=options.weight_decay,
                                  betas=(0.9, 0.98))
    report, step = HeadReport(), 0
    for epoch in range(options.epochs):
        head.train()
        order = train.starts[torch.randperm(len(train), generator=generator)]
        losses = []
        for i in range(steps_per_epoch):
            for group in optimizer.param_groups:
                group["lr"] = _lr(step, total, options.peak_lr)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=options.bf16):
                loss, _ = _unrolled_losses(head, frozen, train, order[i * options.batch:(i + 1) * options.batch],
                                           options)
            losses.append(optimizer_step(loss, optimizer))
            step += 1
            if progress:
                progress(1, {"epoch": epoch + 1, "loss": losses[-1]})
        result = {"epoch": epoch + 1, "train_loss": sum(losses) / len(losses), **evaluate_head(head, target, heldout,
                                                                                             options)}
        report.epochs.append(result)
        if progress:
            progress(0, result)
    head.eval()
    return report


@torch.inference_mode()
def evaluate_head(head: EagleHead, target: nn.Module, heldout: Samples, options: HeadTrainOptions) -> dict:
    """Held-out loss and, per draft position j, how often the head's token equals the target's greedy token when
    positions before it were right: the chance that position j is accepted given j-1 was (the first one is the
    closest analogue of the standalone draft's top-1 agreement)."""
    if len(heldout) == 0:
        return {}
    head.eval()
    frozen = _Frozen(target, head.vocab_ids)
    loss_sum, count = 0.0, 0
    right = [0] * heldout.unroll
    reached = [0] * heldout.unroll
    for begin in range(0, len(heldout), 1024):
        starts = heldout.starts[begin:begin + 1024]
        loss, agreements = _unrolled_losses(head, frozen, heldout, starts, options, measure_full=True)
        loss_sum += loss.item() * len(starts)
        count += len(starts)
        alive = torch.ones(len(starts), dtype=torch.bool)
        for j, agree in enumerate(agreements):
            reached[j] += int(alive.sum())
            right[j] += int((agree & alive).sum())
            alive &= agree
    rates = [r / max(1, n) for r, n in zip(right, reached)]
    return {"heldout_loss": loss_sum / max(1, count), "heldout_top1": rates[0],
            "heldout_acceptance_by_position": [round(r, 4) for r in rates]}


def split(examples: Sequence[Example], features: Sequence[torch.Tensor], heldout_fraction: float, seed: int,
          unroll: int) -> tuple[Samples, Samples]:
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    n_heldout = max(1, int(len(order) * heldout_fraction))
    pick = lambda indices: Samples([examples[i] for i in indices], [features[i] for i in indices], unroll)
    return pick(order[n_heldout:]), pick(order[:n_heldout])
