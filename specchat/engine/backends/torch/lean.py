"""A lean forward pass for plain Llama-architecture models: the target's steps on a CPU, and small draft models.

transformers' generic forward does bookkeeping around the arithmetic on every pass (mask building, cache objects,
output dataclasses, hooks, dtype casts): for a small draft model it costs more than the arithmetic itself, and for a
small target a noticeable share of each pass (docs/performance-torch.md, "What makes it fast"). This runs only the
arithmetic, reading the module's own weights (no copies), over a preallocated KV cache whose rollback is moving a
length counter. It does transformers' Llama operations in transformers' order (RMSNorm in float32, rotate-half
RoPE, grouped-query SDPA with the same mask), so the hidden states come out bit-identical to transformers' own on
the CPU (tests/engine/test_lean.py checks it) and the target's greedy replies do not change.
"""

from __future__ import annotations

import math
import threading
from typing import Sequence

import torch
import torch.nn.functional as F

from .packed import packed_weights_for


def lean_forward_supported(model) -> bool:
    """Plain Llama only: default RoPE, no biases, SiLU MLP; anything else uses transformers' forward."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) != "llama":
        return False
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    return (rope.get("rope_type", rope.get("type", "default")) == "default"
            and not getattr(config, "attention_bias", False) and not getattr(config, "mlp_bias", False)
            and getattr(config, "hidden_act", "silu") == "silu" and getattr(config, "pretraining_tp", 1) == 1)


def rope_theta(config) -> float:
    rope = getattr(config, "rope_parameters", None) or {}
    return float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


class LeanCache:
    """One sequence's keys and values for every layer, in buffers with spare room ([layers, kv heads, capacity,
    head dim]); rolling back rejected tokens only moves `length`. crop() and get_seq_length() follow transformers'
    cache semantics, so engine code rolls back either kind of cache the same way."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int, dtype, device):
        shape = (layers, kv_heads, max(capacity, 1), head_dim)
        self.keys = torch.empty(shape, dtype=dtype, device=device)
        self.values = torch.empty(shape, dtype=dtype, device=device)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        """Keep the first max_length positions; a negative argument removes that many (as transformers' crop)."""
        keep = self.length + max_length if max_length < 0 else max_length
        self.length = max(0, min(self.length, keep))

    def make_room(self, needed: int) -> None:
        """Room for `needed` positions; growth doubles, so copies are amortised O(1) per token."""
        if needed <= self.capacity:
            return
        capacity = max(needed, 2 * self.capacity)
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_empty((*old.shape[:2], capacity, old.shape[3]))
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)


class LeanLlama:
    """The forward arithmetic of a plain Llama model, over LeanCaches (one per sequence, so one model can serve
    several generations at once, e.g. the race view's two engines on one target).

    packed: passes of 4-17 tokens (verifications) multiply by MKL-packed copies of the layers' weights
    (engine/backends/torch/packed.py), made once per model; their hidden states then differ from transformers' in the last bits."""

    LINEARS_PER_LAYER = 7  # q, k, v, o, gate, up, down: the order of `weights` below

    def __init__(self, model, packed: bool = False):
        config = model.config
        self.model = model
        self.layers = model.model.layers
        self.weights = [weight for layer in self.layers for weight in _layer_weights(layer)]
        self.packed = packed_weights_for(model.model, self.weights) if packed else None
        self.embed = model.model.embed_tokens.weight
        self.final_norm = model.model.norm
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.scale = 1 / math.sqrt(self.head_dim)
        self.device, self.dtype = self.embed.device, self.embed.dtype
        self.inv_freq = rope_frequencies(self.head_dim, rope_theta(config), self.device)
        self._rope = self._rope_tables(64)  # (cos, sin) for positions 0..capacity-1, replaced whole when grown
        self._rope_lock = threading.Lock()

    def new_cache(self, capacity: int = 512) -> LeanCache:
        return LeanCache(len(self.layers), self.kv_heads, self.head_dim, capacity, self.dtype, self.device)

    @torch.inference_mode()
    def hidden_states(self, tokens: torch.Tensor | Sequence[int], cache: LeanCache, keep: int = 1) -> torch.Tensor:
        """Appends `tokens` to the cached sequence; the final-normed hidden states of the last `keep` of them."""
        ids = tokens if isinstance(tokens, torch.Tensor) else torch.tensor(list(tokens), device=self.device)
        n = ids.shape[-1]
        start, end = cache.length, cache.length + n
        cache.make_room(end)
        cos, sin = self._rope_for(end)
        cos, sin = cos[start:end], sin[start:end]
        x = self.embed[ids.reshape(n)]  # [n, hidden]
        mask = None
        if n > 1 and start > 0:  # query i (position start+i) sees keys 0..start+i
            mask = torch.ones(n, end, dtype=torch.bool, device=self.device).tril(diagonal=start)
        linear = self.packed.linear if self.packed is not None and self.packed.applies(n) else self._plain_linear
        for index, layer in enumerate(self.layers):
            x = x + self._attention(linear, self._norm(x, layer.input_layernorm), cache, index, start, end,
                                    cos, sin, mask)
            first = index * self.LINEARS_PER_LAYER
            h = self._norm(x, layer.post_attention_layernorm)
            x = x + linear(F.silu(linear(h, first + 4)) * linear(h, first + 5), first + 6)
        cache.length = end
        return self._norm(x[n - keep:], self.final_norm)

    def _norm(self, x: torch.Tensor, norm) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return norm.weight * x32.to(x.dtype)

    def _plain_linear(self, x: torch.Tensor, index: int) -> torch.Tensor:
        return F.linear(x, self.weights[index])

    def _attention(self, linear, h, cache: LeanCache, index, start, end, cos, sin, mask) -> torch.Tensor:
        n, first = h.shape[0], index * self.LINEARS_PER_LAYER
        q = linear(h, first).view(n, self.heads, self.head_dim).transpose(0, 1)
        k = linear(h, first + 1).view(n, self.kv_heads, self.head_dim).transpose(0, 1)
        v = linear(h, first + 2).view(n, self.kv_heads, self.head_dim).transpose(0, 1)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        cache.keys[index, :, start:end] = k
        cache.values[index, :, start:end] = v
        keys, values = cache.keys[index, :, :end], cache.values[index, :, :end]
        # A whole sequence from position 0 is plainly causal (SDPA's own causal kernel, no mask to build or read).
        out = F.scaled_dot_product_attention(q.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0),
                                             attn_mask=mask, scale=self.scale, is_causal=mask is None and n > 1,
                                             enable_gqa=self.heads != self.kv_heads)[0]
        return linear(out.transpose(0, 1).reshape(n, self.heads * self.head_dim), first + 3)

    def _rope_for(self, needed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE tables covering positions 0..needed-1 (read once: another thread may replace them, only larger)."""
        rope = self._rope
        if rope[0].shape[0] >= needed:
            return rope
        with self._rope_lock:
            if self._rope[0].shape[0] < needed:
                self._rope = self._rope_tables(max(needed, 2 * self._rope[0].shape[0]))
            return self._rope

    def _rope_tables(self, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
        return rope_tables(self.inv_freq, capacity, self.dtype)


class LeanDraftForward:
    """A draft model through the lean forward (drafting/backends.py's torch backend): forward(tokens) appends
    tokens to its one cached sequence and returns the logits after the last one."""

    def __init__(self, model, capacity: int = 1024):
        self.model = model
        self.lean = LeanLlama(model)
        self.lm_head = model.lm_head.weight
        self._cache = self.lean.new_cache(capacity)

    @property
    def length(self) -> int:
        return self._cache.length

    def reset(self) -> None:
        self._cache.length = 0

    def keep_output_rows(self, ids: torch.Tensor) -> None:
        """forward() returns logits for these token ids only, in this order (a contiguous copy of their rows)."""
        self.lm_head = self.model.lm_head.weight.detach()[ids].contiguous()

    def crop(self, keep: int) -> None:
        self._cache.crop(keep)

    @torch.inference_mode()
    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        return F.linear(self.lean.hidden_states(tokens, self._cache, keep=1), self.lm_head)[0]


def _layer_weights(layer) -> list[torch.Tensor]:
    attn, mlp = layer.self_attn, layer.mlp
    return [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, attn.o_proj.weight,
            mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight]


def rope_frequencies(head_dim: int, theta: float, device) -> torch.Tensor:
    """RoPE's inverse frequencies theta^(-2i/d), computed as transformers does (the tables must match bit for bit)."""
    half = torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim
    return 1.0 / (theta ** half)


def rope_tables(inv_freq: torch.Tensor, capacity: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [capacity, head_dim] for positions 0..capacity-1 (rotate-half layout: each frequency twice)."""
    freqs = torch.outer(torch.arange(capacity, dtype=torch.float32, device=inv_freq.device), inv_freq)
    angles = torch.cat([freqs, freqs], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE, rotate-half convention: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) per frequency."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
