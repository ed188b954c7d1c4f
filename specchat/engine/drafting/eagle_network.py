"""An EAGLE-style draft head: drafting from the target's own last hidden state (Li et al. 2024, "EAGLE").

A standalone draft model must rebuild from the tokens alone what the target already knows about the text. The
head instead reads the target's last hidden state f_t (computed anyway by the verification pass that produced
token x_{t+1}) and the embedding of x_{t+1}, and predicts the target's next hidden state f_{t+1}; the target's own
output head turns that into a guess for x_{t+2}. Further tokens chain the head on its own predicted states:

    f^_{t+1} = head(f_t, e(x_{t+1})),  x^_{t+2} = argmax f^_{t+1} W^T,  f^_{t+2} = head(f^_{t+1}, e(x^_{t+2})), ...

A stateless head (residual MLP blocks only) sees no context but what f_t holds. A head with an attention block
(EAGLE proper) also sees its own states at every earlier position, computed from the target's true hidden states:
the prompt's, from the prefill, and the reply's, from each verification. It keeps them in a small KV cache; drafted
positions are appended while drafting and cropped off before the next verified states are added, so the cache only
ever holds positions computed from the target's own states. Its output head is the target's own, cut to the V' most
frequent tokens of the target's replies (FR-Spec, Zhao et al. 2025): the full vocabulary x hidden matrix is among
the target's widest products, far too costly to run per drafted token, the cut one is a small fraction of it, and a
token outside it is only a missed draft, never a wrong output. The shipped file holds just the head's own weights
and the kept token ids; the embeddings and output rows come from the target.

This module defines the head network and its file format; the drafter that runs it is drafting/eagle.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from ...core.errors import IncompatibleDraftError, ModelLoadError
from ..backends.torch.lean import LeanCache, apply_rope, rope_frequencies, rope_tables

CONFIG_FILE = "eagle.json"
WEIGHTS_FILE = "eagle.safetensors"
FORMAT = "specchat-eagle-head"


@dataclass(frozen=True)
class HeadShape:
    hidden: int  # the target's hidden size
    inner: int = 1536  # width of each residual block
    blocks: int = 2
    vocab: int = 8192  # tokens the head can propose (the most frequent in the target's replies)
    # The attention block (0 heads: none, a stateless head). Grouped-query attention with RoPE, as the target's.
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 64
    rope_theta: float = 10000.0

    @property
    def attends(self) -> bool:
        return self.heads > 0


class EagleHead(nn.Module):
    """[f_t, e(x_{t+1})] -> f^_{t+1}: one linear map of the pair, an optional attention block over the earlier
    positions, then residual RMSNorm-SiLU-MLP blocks."""

    def __init__(self, shape: HeadShape):
        super().__init__()
        self.shape = shape
        self.fuse = nn.Linear(2 * shape.hidden, shape.hidden)
        if shape.attends:
            self.attention_norm = nn.RMSNorm(shape.hidden, eps=1e-5)
            self.q = nn.Linear(shape.hidden, shape.heads * shape.head_dim, bias=False)
            self.k = nn.Linear(shape.hidden, shape.kv_heads * shape.head_dim, bias=False)
            self.v = nn.Linear(shape.hidden, shape.kv_heads * shape.head_dim, bias=False)
            self.o = nn.Linear(shape.heads * shape.head_dim, shape.hidden, bias=False)
        self.norms = nn.ModuleList([nn.RMSNorm(shape.hidden, eps=1e-5) for _ in range(shape.blocks)])
        self.ups = nn.ModuleList([nn.Linear(shape.hidden, shape.inner) for _ in range(shape.blocks)])
        self.downs = nn.ModuleList([nn.Linear(shape.inner, shape.hidden) for _ in range(shape.blocks)])
        # The token ids the head proposes from (row i of its output head is the target's row vocab_ids[i]).
        self.register_buffer("vocab_ids", torch.zeros(shape.vocab, dtype=torch.long))
        self._rope_table: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin for positions 0..size-1

    def forward(self, feature: torch.Tensor, token_embedding: torch.Tensor) -> torch.Tensor:
        """The stateless head's step (an attending head needs its cache: extend)."""
        return self.mlp_blocks(self.fused(feature, token_embedding))

    def fused(self, feature: torch.Tensor, token_embedding: torch.Tensor) -> torch.Tensor:
        return self.fuse(torch.cat([feature, token_embedding], dim=-1))

    def mlp_blocks(self, u: torch.Tensor) -> torch.Tensor:
        for norm, up, down in zip(self.norms, self.ups, self.downs):
            u = u + down(nn.functional.silu(up(norm(u.float()).to(u.dtype))))  # the norm in float32
        return u

    def project(self, u: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries [..., heads, n, head_dim], keys and values [..., kv_heads, n, head_dim] of u [..., n, hidden],
        RoPE-rotated for their positions."""
        shape = self.shape
        x = self.attention_norm(u.float()).to(u.dtype)
        split = lambda t, heads: t.unflatten(-1, (heads, shape.head_dim)).transpose(-3, -2)
        q, k, v = split(self.q(x), shape.heads), split(self.k(x), shape.kv_heads), split(self.v(x), shape.kv_heads)
        cos, sin = self.rope(positions, u.dtype)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [n, head_dim] for the positions (rotate-half RoPE, as the target's), from a table kept and
        grown by doubling."""
        needed = int(positions.max()) + 1 if positions.numel() else 0
        table = self._rope_table
        if (table is None or table[0].shape[0] < needed or table[0].dtype != dtype
                or table[0].device != positions.device):
            size = max(needed, 2 * table[0].shape[0] if table is not None else 512)
            frequencies = rope_frequencies(self.shape.head_dim, self.shape.rope_theta, positions.device)
            table = self._rope_table = rope_tables(frequencies, size, dtype)
        return table[0][positions], table[1][positions]

    def after_attention(self, u: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """u plus the attention block's output (attended: [..., heads, n, head_dim]), then the MLP blocks."""
        return self.mlp_blocks(u + self.o(attended.transpose(-3, -2).flatten(-2)))

    def new_cache(self, capacity: int = 512) -> LeanCache:
        parameter = self.fuse.weight
        return LeanCache(1, self.shape.kv_heads, self.shape.head_dim, capacity, parameter.dtype, parameter.device)

    def extend(self, feature: torch.Tensor, token_embedding: torch.Tensor, cache: LeanCache,
               last_only: bool = False) -> torch.Tensor:
        """f^ for n new positions ([n, hidden] inputs) appended to the cached ones: each attends to the cache and
        to the new positions up to itself. last_only: f^ of the last one only ([1, hidden]); the others need only
        their keys and values, so their attention and MLP blocks are skipped (the verified positions a draft starts
        after)."""
        n, start = feature.shape[0], cache.length
        end = start + n
        cache.make_room(end)
        u = self.fused(feature, token_embedding)
        q, k, v = self.project(u, torch.arange(start, end, device=u.device))
        cache.keys[0, :, start:end], cache.values[0, :, start:end] = k, v
        keys, values = cache.keys[0, :, :end], cache.values[0, :, :end]
        cache.length = end
        if last_only and n > 1:
            u, q, n = u[-1:], q[:, -1:], 1  # the last position sees every key: no mask
        if n == 1:  # one query per head: the group's queries as rows of one small product per key/value head
            group = self.shape.heads // self.shape.kv_heads
            queries = q.reshape(self.shape.kv_heads, group, self.shape.head_dim)
            weights = torch.softmax((queries @ keys.transpose(1, 2)) * self.shape.head_dim ** -0.5, dim=-1)
            return self.after_attention(u, (weights @ values).reshape(self.shape.heads, 1, self.shape.head_dim))
        mask = torch.ones(n, end, dtype=torch.bool, device=u.device).tril(diagonal=start)
        attended = nn.functional.scaled_dot_product_attention(
            q.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0), attn_mask=mask,
            enable_gqa=self.shape.heads != self.shape.kv_heads)[0]
        return self.after_attention(u, attended)


def save_head(head: EagleHead, folder: Path, info: dict) -> None:
    """Weights in float16 (half the size; the drafter computes in the target's dtype) and a small JSON config."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: (t.to(torch.float16) if t.is_floating_point() else t.to(torch.int32)).contiguous()
               for name, t in head.state_dict().items()}
    save_file(tensors, str(folder / WEIGHTS_FILE))
    config = {"format": FORMAT, "shape": asdict(head.shape), **info}
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def is_eagle_folder(folder: Path) -> bool:
    return (Path(folder) / CONFIG_FILE).is_file()


def load_head(folder: Path, target: nn.Module) -> EagleHead:
    """The head in `folder`, checked against the target it will read hidden states from."""
    from safetensors.torch import load_file

    folder = Path(folder)
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        if config.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        shape = HeadShape(**config["shape"])
        tensors = load_file(str(folder / WEIGHTS_FILE))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ModelLoadError(f"cannot read the draft head in {folder}: {error}") from error
    embeddings = target.get_input_embeddings().weight
    if shape.hidden != embeddings.shape[1]:
        raise IncompatibleDraftError(f"the draft head in {folder} reads hidden states of size {shape.hidden}, "
                                     f"but the target's are {embeddings.shape[1]}")
    head = EagleHead(shape)
    head.load_state_dict({name: t.to(torch.long) if name == "vocab_ids" else t for name, t in tensors.items()})
    if int(head.vocab_ids.max()) >= embeddings.shape[0]:
        raise IncompatibleDraftError(f"the draft head in {folder} proposes token ids outside the target's vocabulary")
    return head.to(device=embeddings.device, dtype=embeddings.dtype).eval()
