"""Training the EAGLE-style draft head (engine/drafting/eagle_network.py) on the target's own hidden states.

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

from ..engine.drafting.eagle_network import EagleHead, HeadShape
from .distill import Example, length_sorted_batches
from .train import optimizer_step

Progress = Callable[[int, dict], None]


@dataclass(frozen=True)
class HeadTrainOptions:
    epochs: int = 5
    batch: int = 512  # samples (start positions) per optimizer step (the stateless head)
    batch_tokens: int = 6144  # padded tokens of whole sequences per optimizer step (the attending head)
    peak_lr: float = 2e-3
    unroll: int = 3
    feature_weight: float = 1.0
    weight_decay: float = 0.01
    seed: int = 0
    bf16: bool = True  # autocast matmuls (much faster on AMX/AVX512-BF16 CPUs); master weights and losses fp32
    # The attending head: the rate of the parts copied from the stateless head, relative to the new attention
    # block's (at the full rate they drift away from their trained optimum: held-out acceptance fell 0.62 -> 0.59
    # in the first epoch).
    base_lr_scale: float = 1.0


@dataclass
class HeadReport:
    epochs: list[dict] = field(default_factory=list)


@torch.inference_mode()
def teacher_features(model: nn.Module, examples: Sequence[Example], batch_tokens: int = 8192,
                     progress: Callable[[int], None] | None = None, span: str = "reply") -> list[torch.Tensor]:
    """Per example, the target's last hidden states (float16). span="reply": [reply length + 1, hidden] at
    positions prompt_len-1 .. len-1, row t being the state that predicts reply token t (the last row predicts past
    the end). span="prompt": [prompt_len - 1, hidden] at positions 0 .. prompt_len-2, computed over those tokens
    alone (causal attention: the states of a prefix do not depend on what follows it), which the attention head
    reads as its context; the two spans together cover every position."""
    if span not in ("reply", "prompt"):
        raise ValueError(f"span must be 'reply' or 'prompt', not {span!r}")
    decoder = model.get_decoder()
    features: list[torch.Tensor | None] = [None] * len(examples)
    lengths = [len(e.ids) if span == "reply" else e.prompt_len - 1 for e in examples]
    starts = [e.prompt_len - 1 if span == "reply" else 0 for e in examples]
    hidden_size = model.get_input_embeddings().weight.shape[1]
    for index, length in enumerate(lengths):
        if length == 0:  # a one-token prompt has no prompt span
            features[index] = torch.zeros((0, hidden_size), dtype=torch.float16)
    for batch in length_sorted_batches([max(1, n) for n in lengths], 256, batch_tokens):
        batch = [index for index in batch if lengths[index] > 0]
        if not batch:
            continue
        width = max(lengths[i] for i in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, index in enumerate(batch):  # right padding: causal attention never looks at it
            ids[row, : lengths[index]] = torch.tensor(examples[index].ids[: lengths[index]])
            mask[row, : lengths[index]] = 1
        device = next(model.parameters()).device
        hidden = decoder(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).last_hidden_state
        for row, index in enumerate(batch):
            features[index] = hidden[row, starts[index] : lengths[index]].to(torch.float16).cpu().clone()
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


ATTENTION_PARTS = ("attention_norm", "q", "k", "v", "o")  # the attending head's modules the stateless one lacks


def build_attending_head(stateless: EagleHead, shape: HeadShape, seed: int) -> EagleHead:
    """An attending head that starts as the trained stateless one: its fuse and MLP blocks are copied and the
    attention block's output map is zero, so before training it drafts exactly as the stateless head does and
    training only has to learn what the context adds."""
    if (shape.hidden, shape.inner, shape.blocks, shape.vocab) != (stateless.shape.hidden, stateless.shape.inner,
                                                                  stateless.shape.blocks, stateless.shape.vocab):
        raise ValueError("the attending head must have the stateless head's sizes")
    torch.manual_seed(seed)
    head = EagleHead(shape)
    missing, unexpected = head.load_state_dict(stateless.state_dict(), strict=False)
    assert not unexpected and all(name.split(".")[0] in ATTENTION_PARTS for name in missing)
    with torch.no_grad():
        head.o.weight.zero_()
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
        loss, agreement = _scored(predicted, truth, frozen, options, measure_full)
        total = total + loss
        agreements.append(agreement)
        feature = predicted
    return total, agreements


def _scored(predicted: torch.Tensor, truth: torch.Tensor, frozen: _Frozen, options: HeadTrainOptions,
            measure_full: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One drafted position's loss (soft cross-entropy against the target's distribution over the kept rows, plus
    the feature regression) and whether the head's pick equals the target's argmax (over the kept vocabulary while
    training; over the full vocabulary with measure_full, as acceptance sees it)."""
    teacher = torch.softmax(truth @ frozen.rows.T, dim=-1).float()
    log_q = torch.log_softmax((predicted @ frozen.rows.T).float(), dim=-1)
    loss = (-(teacher * log_q).sum(-1).mean()
            + options.feature_weight * nn.functional.smooth_l1_loss(predicted.float(), truth))
    pick = frozen.vocab_ids[log_q.argmax(-1)]
    wanted = (truth @ frozen.full.T).argmax(-1) if measure_full else frozen.vocab_ids[teacher.argmax(-1)]
    return loss, pick == wanted


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

    def epoch_batches():
        order = train.starts[torch.randperm(len(train), generator=generator)]
        return [order[i * options.batch:(i + 1) * options.batch] for i in range(steps_per_epoch)]

    optimizer = _optimizer([{"params": list(head.parameters()), "scale": 1.0}], options)
    return _run_epochs(head, optimizer, options, steps_per_epoch, epoch_batches,
                       lambda starts: _unrolled_losses(head, frozen, train, starts, options)[0],
                       lambda: evaluate_head(head, target, heldout, options), progress)


def _optimizer(groups: list[dict], options: HeadTrainOptions) -> torch.optim.Optimizer:
    """AdamW over parameter groups, each with a "scale" on the scheduled rate."""
    return torch.optim.AdamW(groups, lr=options.peak_lr, weight_decay=options.weight_decay, betas=(0.9, 0.98))


def _run_epochs(head: EagleHead, optimizer: torch.optim.Optimizer, options: HeadTrainOptions, steps_per_epoch: int,
                epoch_batches: Callable[[], list], loss_of: Callable[[object], torch.Tensor],
                evaluate: Callable[[], dict], progress: Progress | None) -> HeadReport:
    """The training loop both heads share: warmup and cosine decay of the rate, bfloat16 autocast, a held-out
    evaluation after every epoch."""
    total = steps_per_epoch * options.epochs
    report, step = HeadReport(), 0
    for epoch in range(options.epochs):
        head.train()
        losses = []
        for batch in epoch_batches():
            for group in optimizer.param_groups:
                group["lr"] = _lr(step, total, options.peak_lr) * group["scale"]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=options.bf16):
                loss = loss_of(batch)
            losses.append(optimizer_step(loss, optimizer))
            step += 1
            if progress:
                progress(1, {"epoch": epoch + 1, "loss": losses[-1]})
        result = {"epoch": epoch + 1, "train_loss": sum(losses) / len(losses), **evaluate()}
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


def split_indices(count: int, heldout_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Example indices for training and held out: a seeded shuffle, so both heads hold out the same replies."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    n_heldout = max(1, int(count * heldout_fraction))
    return order[n_heldout:], order[:n_heldout]


def split(examples: Sequence[Example], features: Sequence[torch.Tensor], heldout_fraction: float, seed: int,
          unroll: int) -> tuple[Samples, Samples]:
    pick = lambda indices: Samples([examples[i] for i in indices], [features[i] for i in indices], unroll)
    train, heldout = split_indices(len(examples), heldout_fraction, seed)
    return pick(train), pick(heldout)


# ---- The attending head: trained on whole sequences, unrolled the way it drafts -------------------------------------


class Sequences:
    """Whole examples for the attending head: per example the target's states at every position (prompt and reply
    spans joined: row p is f_p, the state that predicts token p+1), its token ids and where its reply starts."""

    def __init__(self, examples: Sequence[Example], prompt_features: Sequence[torch.Tensor],
                 reply_features: Sequence[torch.Tensor]):
        self.features = [torch.cat([p, r]) for p, r in zip(prompt_features, reply_features)]
        self.ids = [torch.tensor(e.ids, dtype=torch.long) for e in examples]
        self.prompt_lens = [e.prompt_len for e in examples]
        for example, feature in zip(examples, self.features):
            if len(feature) != len(example.ids):
                raise ValueError(f"{len(feature)} hidden states for an example of {len(example.ids)} tokens")

    def __len__(self) -> int:
        return len(self.ids)

    def batches(self, batch_tokens: int) -> list[list[int]]:
        """Examples grouped by similar length within a padded-token budget."""
        return length_sorted_batches([len(i) for i in self.ids], 1 << 20, batch_tokens)

    def padded(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Features [B, T, hidden] (float32), ids [B, T], lengths [B] and reply starts [B], right-padded."""
        width = max(len(self.ids[i]) for i in indices)
        hidden = self.features[indices[0]].shape[1]
        features = torch.zeros((len(indices), width, hidden))
        ids = torch.zeros((len(indices), width), dtype=torch.long)
        for row, index in enumerate(indices):
            features[row, : len(self.ids[index])] = self.features[index].float()
            ids[row, : len(self.ids[index])] = self.ids[index]
        lengths = torch.tensor([len(self.ids[i]) for i in indices])
        return features, ids, lengths, torch.tensor([self.prompt_lens[i] for i in indices])


def _shifted(x: torch.Tensor, steps: int, dim: int) -> torch.Tensor:
    """x moved `steps` positions later along dim (position p holds what was at p - steps), zeros in front."""
    if steps == 0:
        return x
    pad = torch.zeros_like(x.narrow(dim, 0, steps))
    return torch.cat([pad, x.narrow(dim, 0, x.shape[dim] - steps)], dim=dim)


def staged_states(head: EagleHead, features: torch.Tensor, next_embeddings: torch.Tensor,
                  stages: int) -> list[torch.Tensor]:
    """The attending head's predicted states, unrolled as it drafts ("training-time test", EAGLE-3).

    Stage 0 reads the target's states everywhere: g_0[p] = head(f_p, e(x_{p+1})) attending causally to stage-0
    positions <= p. Stage j continues the chain that started at s = p - j from the head's own previous prediction:
    g_j[p] = head(g_{j-1}[p-1], e(x_{p+1})), attending to the stage-0 positions <= s (the verified context at run
    time) and to the drafted positions s+1..p, i.e. stage i's keys at position s + i, one per earlier stage. Every
    g_j[p] is scored against the target's f_{p+1}. features, next_embeddings: [B, T, hidden]."""
    T = features.shape[1]
    positions = torch.arange(T, device=features.device)
    scale = head.shape.head_dim ** -0.5
    group = head.shape.heads // head.shape.kv_heads
    u = head.fused(features, next_embeddings)
    q, k, v = head.project(u, positions)
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # [B, heads, T, d]
    states = [head.after_attention(u, nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))]
    keys, values = [k], [v]
    for j in range(1, stages):
        u = head.fused(_shifted(states[-1], 1, dim=1), next_embeddings)
        q, k, v = head.project(u, positions)
        keys.append(k.repeat_interleave(group, dim=1))
        values.append(v.repeat_interleave(group, dim=1))
        context = (q @ keys[0].transpose(-1, -2)) * scale  # [B, heads, T, T]: keys at positions <= p - j
        visible = torch.ones(T, T, dtype=torch.bool, device=features.device).tril(diagonal=-j)
        context = context.masked_fill(~visible, float("-inf"))
        # stage i's key at position s + i = p - (j - i): stage i's keys moved j - i positions later
        drafted = torch.stack([(q * _shifted(keys[i], j - i, dim=2)).sum(-1) * scale for i in range(1, j + 1)], -1)
        weights = torch.softmax(torch.cat([context, drafted], dim=-1).float(), dim=-1).to(q.dtype)
        attended = weights[..., :T] @ values[0] + sum(
            weights[..., T + i - 1 : T + i] * _shifted(values[i], j - i, dim=2) for i in range(1, j + 1))
        states.append(head.after_attention(u, attended))
    return states


def _sequence_losses(head: EagleHead, frozen: _Frozen, batch, options: HeadTrainOptions,
                     measure_full: bool = False) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """The loss summed over stages, and per stage whether the head's pick equals the target's argmax at each scored
    position (with the chain start of each, to follow chains across stages)."""
    features, ids, lengths, reply_starts = batch
    B, T, _ = features.shape
    next_embeddings = frozen.embeddings[_shifted_left(ids)]
    states = staged_states(head, features, next_embeddings, options.unroll)
    truth = _shifted_left(features)  # truth[p] = f_{p+1}
    positions = torch.arange(T).unsqueeze(0)
    total = torch.zeros(())
    agreements, starts = [], []
    for j, predicted in enumerate(states):
        # chains start on the reply's side (s >= prompt_len - 1, where drafting happens) and f_{p+1} must exist
        scored = (positions - j >= (reply_starts - 1).unsqueeze(1)) & (positions <= (lengths - 2).unsqueeze(1))
        loss, agreement = _scored(predicted[scored], truth[scored], frozen, options, measure_full)
        total = total + loss
        agreements.append(agreement)
        rows = torch.arange(B).unsqueeze(1).expand(B, T)[scored]
        starts.append(rows * T + (positions.expand(B, T)[scored] - j))
    return total, agreements, starts


def _shifted_left(x: torch.Tensor) -> torch.Tensor:
    """Position p holds what was at p + 1 (the last position repeats itself: it is never scored)."""
    return torch.cat([x[:, 1:], x[:, -1:]], dim=1)


def train_attending_head(head: EagleHead, target: nn.Module, train: Sequences, heldout: Sequences,
                         options: HeadTrainOptions, progress: Progress | None = None) -> HeadReport:
    frozen = _Frozen(target, head.vocab_ids)
    generator = torch.Generator().manual_seed(options.seed)
    groups = train.batches(options.batch_tokens)
    attention = [p for name, p in head.named_parameters() if name.split(".")[0] in ATTENTION_PARTS]
    base = [p for name, p in head.named_parameters() if name.split(".")[0] not in ATTENTION_PARTS]
    optimizer = _optimizer([{"params": attention, "scale": 1.0}, {"params": base, "scale": options.base_lr_scale}],
                           options)
    return _run_epochs(head, optimizer, options, len(groups),
                       lambda: [groups[i] for i in torch.randperm(len(groups), generator=generator).tolist()],
                       lambda indices: _sequence_losses(head, frozen, train.padded(indices), options)[0],
                       lambda: evaluate_attending_head(head, target, heldout, options), progress)


@torch.inference_mode()
def evaluate_attending_head(head: EagleHead, target: nn.Module, heldout: Sequences, options: HeadTrainOptions) -> dict:
    """As evaluate_head: the held-out loss and, per draft position j, how often the head's token is the target's
    greedy token when the chain's positions before it were."""
    if len(heldout) == 0:
        return {}
    head.eval()
    frozen = _Frozen(target, head.vocab_ids)
    loss_sum, batches = 0.0, 0
    right, reached = [0] * options.unroll, [0] * options.unroll
    for indices in heldout.batches(options.batch_tokens):
        loss, agreements, starts = _sequence_losses(head, frozen, heldout.padded(indices), options, measure_full=True)
        loss_sum += loss.item()
        batches += 1
        alive: dict[int, bool] = {}
        for j, (agree, start) in enumerate(zip(agreements, starts)):
            for s, ok in zip(start.tolist(), agree.tolist()):
                if alive.get(s, True) and (j == 0 or s in alive):
                    reached[j] += 1
                    right[j] += ok
                    alive[s] = ok
                elif s in alive:
                    alive[s] = False
    rates = [r / max(1, n) for r, n in zip(right, reached)]
    return {"heldout_loss": loss_sum / max(1, batches), "heldout_top1": rates[0],
            "heldout_acceptance_by_position": [round(r, 4) for r in rates]}
