"""Training a small draft LM on the target's soft labels.

The draft is a standard Llama causal LM with the target's vocabulary, special tokens and rotary settings, so any
transformers code (including `generate(assistant_model=...)`) can use it. Its input and output embeddings are tied
and initialised from a PCA of the target's embedding matrix: the vocabulary is most of a small draft's parameters,
and starting from the target's own geometry of tokens saves much of what the data would otherwise have to teach.

Loss: cross-entropy against the teacher's top-k probabilities, -sum_i p_i log q_i over the k ids, i.e. the KL
divergence KL(p_topk || q) up to a constant. Its minimiser ranks tokens as the teacher does, which is what greedy
acceptance needs (the draft's argmax equal to the target's).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from .distill import Example, Labels, length_sorted_batches


@dataclass(frozen=True)
class DraftShape:
    hidden: int = 192
    layers: int = 2
    intermediate: int = 768
    heads: int = 3


@dataclass
class TrainReport:
    epochs: list[dict] = field(default_factory=list)  # per epoch: train_loss, heldout_loss, heldout_top1


def draft_config(target_config, shape: DraftShape) -> LlamaConfig:
    """The target's vocabulary, special ids and positions; the draft's own (small) sizes."""
    keep = ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id", "max_position_embeddings", "rms_norm_eps",
            "rope_parameters", "rope_theta", "rope_scaling")
    inherited = {name: getattr(target_config, name) for name in keep if getattr(target_config, name, None) is not None}
    return LlamaConfig(**inherited, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                       num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                       num_key_value_heads=shape.heads, head_dim=shape.hidden // shape.heads,
                       tie_word_embeddings=True, architectures=["LlamaForCausalLM"])


def pca_embeddings(target_embeddings: torch.Tensor, dim: int) -> torch.Tensor:
    """The target's token embeddings projected on their top `dim` principal directions, rescaled to the target's
    per-coordinate spread (so the draft's norms and residual stream start at the usual scale)."""
    e = target_embeddings.float()
    centred = e - e.mean(dim=0, keepdim=True)
    _, _, v = torch.linalg.svd(centred[:: max(1, len(centred) // 16384)], full_matrices=False)
    projected = centred @ v[:dim].T
    return projected * (e.std() / projected.std())


def build_draft(target, shape: DraftShape, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    draft = LlamaForCausalLM(draft_config(target.config, shape))
    target_embeddings = target.get_input_embeddings().weight.detach()
    if shape.hidden <= target_embeddings.shape[1]:
        with torch.no_grad():
            draft.get_input_embeddings().weight.copy_(pca_embeddings(target_embeddings, shape.hidden))
    return draft


@dataclass
class Batch:
    ids: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T] attention
    loss_rows: torch.Tensor  # flat indices into B*T of positions that have a label
    top_ids: torch.Tensor  # [N, k]
    top_probs: torch.Tensor  # [N, k]


def make_batch(examples: Sequence[Example], labels: Sequence[Labels]) -> Batch:
    """Position t is trained to predict token t+1 with the teacher's distribution at t, for the positions that
    predict reply tokens: those are the positions where the draft will propose. The prompt is still read (it is
    the context the reply copies from), it just is not a training target."""
    width = max(len(e.ids) for e in examples)
    ids = torch.zeros((len(examples), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    rows, tops, probs = [], [], []
    for b, (example, label) in enumerate(zip(examples, labels)):
        n = len(example.ids)
        ids[b, :n] = torch.tensor(example.ids)
        mask[b, :n] = 1
        rows.append(b * width + torch.arange(example.prompt_len - 1, n - 1))
        tops.append(label.top_ids.long())
        probs.append(label.top_probs.float())
    return Batch(ids, mask, torch.cat(rows), torch.cat(tops), torch.cat(probs))


def soft_cross_entropy(hidden: torch.Tensor, lm_head: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean -sum_i p_i log q_i over labelled positions, and whether the draft's argmax equals the teacher's."""
    h = hidden.reshape(-1, hidden.shape[-1])[batch.loss_rows]
    log_q = torch.log_softmax(lm_head(h).float(), dim=-1)
    loss = -(batch.top_probs * log_q.gather(1, batch.top_ids)).sum(dim=1).mean()
    agree = log_q.argmax(dim=-1) == batch.top_ids[:, 0]
    return loss, agree


def cosine_lr(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def optimizer_step(loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> float:
    """Backpropagates, clips the gradient norm at 1, steps and clears; the loss as a float."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for group in optimizer.param_groups for p in group["params"]], 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


@dataclass(frozen=True)
class TrainOptions:
    epochs: int = 5
    peak_lr: float = 3e-3
    # Padded tokens per batch. Small batches: an 8192-token batch gave only 67 optimizer steps per epoch and 0.10
    # held-out agreement after the first; the cost per token barely depends on the batch size on a CPU.
    batch_tokens: int = 2048
    weight_decay: float = 0.01
    seed: int = 0
    bf16: bool = True  # autocast matmuls (AMX/AVX512-BF16 CPUs run them much faster); master weights stay fp32


def training_batches(train: Sequence[tuple[Example, Labels]], options: TrainOptions) -> list[list[int]]:
    """Indices of each epoch's batches (their order is shuffled per epoch)."""
    return length_sorted_batches([len(e.ids) for e, _ in train], 256, options.batch_tokens)


def train_draft(draft: LlamaForCausalLM, train: Sequence[tuple[Example, Labels]],
                heldout: Sequence[tuple[Example, Labels]], options: TrainOptions,
                progress: Callable[[int, dict], None] | None = None) -> TrainReport:
    rng = random.Random(options.seed)
    torch.manual_seed(options.seed)
    batches = training_batches(train, options)
    total = options.epochs * len(batches)
    optimizer = torch.optim.AdamW(draft.parameters(), lr=options.peak_lr, weight_decay=options.weight_decay,
                                  betas=(0.9, 0.98))
    report, step = TrainReport(), 0
    device_type = next(draft.parameters()).device.type
    for epoch in range(options.epochs):
        draft.train()
        rng.shuffle(batches)
        losses = []
        for indices in batches:
            for group in optimizer.param_groups:
                group["lr"] = cosine_lr(step, total, options.peak_lr, warmup=max(1, total // 30))
            batch = make_batch([train[i][0] for i in indices], [train[i][1] for i in indices])
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=options.bf16):
                hidden = draft.model(input_ids=batch.ids, attention_mask=batch.mask).last_hidden_state
                loss, _ = soft_cross_entropy(hidden, draft.lm_head, batch)
            losses.append(optimizer_step(loss, optimizer))
            step += 1
            if progress:
                progress(1, {"epoch": epoch + 1, "loss": losses[-1]})
        result = {"epoch": epoch + 1, "train_loss": sum(losses) / len(losses), **evaluate(draft, heldout)}
        report.epochs.append(result)
        if progress:
            progress(0, result)
    return report


@torch.inference_mode()
def evaluate(draft: LlamaForCausalLM, heldout: Sequence[tuple[Example, Labels]]) -> dict:
    """Held-out loss, and top-1 agreement with the target (the draft's argmax is what greedy speculative decoding
    proposes, so this is roughly the per-token acceptance to expect)."""
    if not heldout:
        return {}
    draft.eval()
    loss_sum, positions, agree = 0.0, 0, 0
    lengths = [len(e.ids) for e, _ in heldout]
    for indices in length_sorted_batches(lengths, 64, 8192):
        batch = make_batch([heldout[i][0] for i in indices], [heldout[i][1] for i in indices])
        hidden = draft.model(input_ids=batch.ids, attention_mask=batch.mask).last_hidden_state
        loss, agreed = soft_cross_entropy(hidden, draft.lm_head, batch)
        loss_sum += loss.item() * len(agreed)
        positions += len(agreed)
        agree += int(agreed.sum())
    return {"heldout_loss": loss_sum / max(1, positions), "heldout_top1": agree / max(1, positions)}
