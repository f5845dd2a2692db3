"""TinyGPT: the course model (token + position embedding, pre-LN blocks, final LN, LM head).

Attention is written out (matmul + causal mask + softmax + dropout + matmul) so its T×T scores are
real activations. The grader has a libtorch twin of this file in `src/reference/tinygpt.rs`: the op
order here and there must stay the same (on CPU the two are then bit-identical).
"""
import math
import numbers
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab: int = 256
    seq_len: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_blocks: int = 4
    dropout: float = 0.0

    def __post_init__(self):
        # plain numbers only: a tensor here would be read by the model's own code (as a size, or
        # by dropout's range check) at every forward
        for name in ("vocab", "seq_len", "d_model", "n_heads", "n_blocks"):
            v = getattr(self, name)
            if not isinstance(v, numbers.Integral) or isinstance(v, bool):
                raise TypeError(f"Config.{name} must be an int, not {type(v).__name__}")
        if not isinstance(self.dropout, numbers.Real) or isinstance(self.dropout, bool):
            raise TypeError(f"Config.dropout must be a float, not {type(self.dropout).__name__}")


def _config(cfg):
    if not isinstance(cfg, Config):
        raise TypeError(f"expected a course Config, not {type(cfg).__name__}")
    return cfg


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        cfg = _config(cfg)
        self.n_heads = cfg.n_heads
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        mask = torch.tril(torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.n_heads
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_heads, hd).transpose(1, 2)
        k = k.view(B, T, self.n_heads, hd).transpose(1, 2)
        v = v.view(B, T, self.n_heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        att = F.dropout(att, p=self.dropout, training=self.training)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        cfg = _config(cfg)
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """One pre-LN transformer block: x + attn(ln1(x)), then + mlp(ln2(·))."""

    def __init__(self, cfg: Config):
        super().__init__()
        cfg = _config(cfg)
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


def _plain_blocks(blocks, x):
    for block in blocks:
        x = block(x)
    return x


class TinyGPT(nn.Module):
    """`model(idx, targets, blocks_fn=None) -> (logits, loss)`.

    `blocks_fn(blocks, x)` replaces the plain loop over `self.blocks` (a ModuleList), which is how
    exercises plug in their own way of running the blocks (checkpointing, for example).
    """

    def __init__(self, cfg: Config):
        super().__init__()
        cfg = _config(cfg)
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_blocks)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def embed(self, idx):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        return self.tok_emb(idx) + self.pos_emb(pos)

    def head_loss(self, h, targets=None):
        logits = self.head(self.ln_f(h))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        return logits, loss

    def forward(self, idx, targets=None, blocks_fn=None):
        x = self.embed(idx)
        h = (blocks_fn or _plain_blocks)(self.blocks, x)
        return self.head_loss(h, targets)
