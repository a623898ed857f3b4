"""The course model: a small Llama-style decoder over bytes (RMSNorm, rotary embeddings, SwiGLU,
grouped-query attention), with an optional KV cache and a ``generate`` that can use it or not.

Shapes: B batch, T tokens, H query heads, K key-value heads, D head dimension, C model width.
A worked example: ``generate(model, encode("ROMEO:\\n")[None], 20)`` continues a speech.

Not handled: prompts of different lengths in one batch (pad or trim them to one length first),
sliding windows, dropout (the models are small and trained on enough text not to need it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 256  # bytes
    d_model: int = 256
    n_layers: int = 6
    n_heads: int = 8
    n_kv_heads: int = 2  # grouped-query attention: each key-value head serves n_heads // n_kv_heads queries
    d_ff: int = 704  # SwiGLU hidden width, about 8/3 of d_model
    max_seq_len: int = 512
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        problems = []
        if self.d_model % self.n_heads:
            problems.append(f"n_heads {self.n_heads} must divide d_model {self.d_model}")
        elif (self.d_model // self.n_heads) % 2:
            problems.append("the head dimension d_model // n_heads must be even for rotary embeddings")
        if self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads:
            problems.append(f"n_kv_heads {self.n_kv_heads} must divide n_heads {self.n_heads}")
        if min(self.vocab_size, self.d_model, self.n_layers, self.d_ff, self.max_seq_len) < 1:
            problems.append("sizes must be positive")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    """x / rms(x) * weight: LayerNorm without the mean and the bias."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def rotary_tables(config: ModelConfig, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's rotation angles: each (max_seq_len, D)."""
    half = config.head_dim // 2
    inverse = config.rope_base ** (-torch.arange(half, dtype=torch.float32, device=device) / half)  # (D/2,)
    angles = torch.outer(torch.arange(config.max_seq_len, dtype=torch.float32, device=device), inverse)  # (L, D/2)
    angles = torch.cat([angles, angles], dim=-1)  # (L, D): the two halves rotate together
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+D/2}) of ``x`` (B, heads, T, D) by the angles of its positions (T, D)."""
    first, second = x.chunk(2, dim=-1)  # each (B, heads, T, D/2)
    rotated = torch.cat([-second, first], dim=-1)  # (B, heads, T, D)
    return x * cos + rotated * sin


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, K, T, D) -> (B, K * n_rep, T, D): each key-value head repeated for its query heads."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


class KVCache:
    """Keys and values of every layer for the tokens seen so far, preallocated to ``max_len``.

    ``length`` counts the cached positions; a forward pass appends its tokens' keys and values.
    """

    def __init__(self, config: ModelConfig, batch: int, max_len: int | None = None, device=None, dtype=None):
        self.max_len = max_len or config.max_seq_len
        if self.max_len > config.max_seq_len:
            raise ValueError(f"a cache of {self.max_len} tokens exceeds the model's {config.max_seq_len} positions")
        shape = (config.n_layers, batch, config.n_kv_heads, self.max_len, config.head_dim)  # (L, B, K, T, D)
        self.k = torch.zeros(shape, device=device, dtype=dtype or torch.float32)
        self.v = torch.zeros(shape, device=device, dtype=dtype or torch.float32)
        self.length = 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new (B, K, T, D) keys and values of ``layer``; return all cached so far."""
        start, end = self.length, self.length + k.shape[2]
        self.k[layer, :, :, start:end] = k
        self.v[layer, :, :, start:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]  # (B, K, end, D)

    def nbytes(self) -> int:
        """Bytes of the cache's filled part."""
        per_position = self.k[:, :, :, :1].numel() * self.k.element_size() * 2
        return per_position * self.length


def causal_mask(n_q: int, n_k: int, device=None, start: int = 0, stop: int | None = None) -> torch.Tensor:
    """(n_q, stop - start) booleans, True where query i may see key j: j <= i + n_k - n_q.

    The last query sits at the last key, as in decoding with a cache: with 2 queries and 4 keys,
    query 0 sees keys 0..2 and query 1 all four. ``start`` and ``stop`` keep one block of keys.
    """
    rows = torch.arange(n_q, device=device)[:, None]  # (n_q, 1)
    columns = torch.arange(start, n_k if stop is None else stop, device=device)[None, :]  # (1, stop - start)
    return columns <= rows + n_k - n_q


def attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v with ``mask`` (True: may attend), written out: the readable twin
    of torch's fused kernel, with the whole (..., Tq, Tk) score matrix in memory."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v  # (..., Tq, D)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        c, d = config.d_model, config.head_dim
        self.q_proj = nn.Linear(c, config.n_heads * d, bias=False)
        self.k_proj = nn.Linear(c, config.n_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(c, config.n_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(config.n_heads * d, c, bias=False)
        self.use_sdpa = True  # False: the written-out softmax of attention_reference

    def forward(self, x, cos, sin, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        cfg = self.config
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, cfg.n_heads, cfg.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)  # (B, K, T, D)
        v = self.v_proj(x).view(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)  # (B, K, T, D)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        past = 0
        if cache is not None:
            past = cache.length
            k, v = cache.append(layer, k, v)  # (B, K, past + T, D)
        n_rep = cfg.n_heads // cfg.n_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H, past + T, D)
        # query i sits at position past + i and sees keys 0 .. past + i
        mask = causal_mask(T, past + T, x.device) if T > 1 else None  # (T, past + T)
        if self.use_sdpa:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            out = attention_reference(q, k, v, mask)
        out = out.transpose(1, 2).reshape(B, T, cfg.n_heads * cfg.head_dim)  # (B, T, H * D)
        return self.o_proj(out)


class SwiGLU(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.up_proj = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.down_proj = nn.Linear(config.d_ff, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attn = Attention(config)
        self.mlp_norm = RMSNorm(config.d_model, config.norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, x, cos, sin, cache=None, layer=0):
        x = x + self.attn(self.attn_norm(x), cos, sin, cache, layer)
        return x + self.mlp(self.mlp_norm(x))


class LanguageModel(nn.Module):
    """Embedding, ``n_layers`` blocks, a final norm and an output layer tied to the embedding."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        cos, sin = rotary_tables(config)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init)
        for block in self.blocks:  # scale the residual branches' outputs by depth, as GPT-2 does
            for linear in (block.attn.o_proj, block.mlp.down_proj):
                nn.init.normal_(linear.weight, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Logits (B, T, vocab) for ``tokens`` (B, T); with a cache, positions continue after it."""
        B, T = tokens.shape
        start = cache.length if cache is not None else 0
        if start + T > self.config.max_seq_len:
            raise ValueError(
                f"{start + T} positions exceed the model's {self.config.max_seq_len}; "
                "generate fewer tokens or crop the prompt"
            )
        if cache is not None and start + T > cache.max_len:
            raise ValueError(f"the KV cache holds {cache.max_len} positions, {start + T} needed")
        cos, sin = self.rope_cos[start : start + T], self.rope_sin[start : start + T]  # (T, D)
        x = self.embed(tokens)  # (B, T, C)
        for index, block in enumerate(self.blocks):
            x = block(x, cos, sin, cache, index)
        if cache is not None:
            cache.length += T
        return F.linear(self.norm(x), self.embed.weight)  # (B, T, vocab)

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        weight = self.embed.weight
        return KVCache(self.config, batch, max_len, device=weight.device, dtype=weight.dtype)

    def set_attention(self, use_sdpa: bool) -> None:
        """Switch every layer between torch's fused attention and the written-out reference."""
        for block in self.blocks:
            block.attn.use_sdpa = use_sdpa


def sample(
    logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Next tokens (B,) from last-position logits (B, vocab): greedy at temperature 0. A
    ``generator`` of another device than the logits' (a CPU one for a model on the GPU) draws
    there: the same seed gives the same tokens on every device."""
    if temperature < 0:
        raise ValueError(f"temperature must be 0 (greedy) or positive, got {temperature}")
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(dim=-1)
    if generator is not None and generator.device != probs.device:
        return torch.multinomial(probs.to(generator.device), 1, generator=generator).squeeze(-1).to(probs.device)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: LanguageModel,
    prompt: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    return_logits: bool = False,
):
    """Continue ``prompt`` (B, T) by ``max_new_tokens`` tokens; returns (B, T + new).

    With ``use_cache`` the prompt is run once (prefill) and each step feeds only its new token;
    without, every step runs the whole sequence again (the quadratic "before" of chapter 4).
    ``return_logits=True`` also returns the last-position logits of every step, (B, new, vocab).
    """
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be (batch, tokens) with at least one token, got {tuple(prompt.shape)}")
    total = prompt.shape[1] + max_new_tokens
    if total > model.config.max_seq_len:
        raise ValueError(f"prompt plus new tokens ({total}) exceed the model's {model.config.max_seq_len} positions")
    tokens, steps = prompt, []
    cache = model.new_cache(prompt.shape[0], total) if use_cache else None
    logits = model(prompt, cache)[:, -1]  # (B, vocab)
    for step in range(max_new_tokens):
        steps.append(logits)
        next_token = sample(logits, temperature, top_k, generator)  # (B,)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)  # (B, T + step + 1)
        if step == max_new_tokens - 1:
            break
        logits = model(next_token[:, None], cache)[:, -1] if use_cache else model(tokens)[:, -1]
    return (tokens, torch.stack(steps, dim=1)) if return_logits else tokens


TARGET = ModelConfig(d_model=256, n_layers=6, n_heads=8, n_kv_heads=2, d_ff=704)
DRAFT = ModelConfig(d_model=96, n_layers=3, n_heads=4, n_kv_heads=1, d_ff=256)
CONFIGS = {"target": TARGET, "draft": DRAFT}
# For timing only, with random weights (timing does not depend on their values): about 90M
# parameters, 360 MB in float32, far more than any CPU cache.
TIMING = ModelConfig(d_model=1024, n_layers=8, n_heads=16, n_kv_heads=4, d_ff=2816, max_seq_len=1024)
