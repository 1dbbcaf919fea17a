# Reference for the DRR parity test (tests/test_drr.cpp): the classes of DRR
# (/work/shared/seeds/001_52550f844ad617f6.txt, "3. PyTorch Implementation") copied verbatim (the seed text lost its
# indentation; it is restored here, nothing else is changed), then a driver that builds a small SmallDRRTransformer
# with every parameter randomised, runs it on fixed ids and writes weights, ids and per-layer outputs for the C++ test.
#
# Usage: /usr/bin/python3 drr_reference.py OUT_DIR
# Writes OUT_DIR/drr_reference.json (configuration, ids, and an index of tensors: name, shape, offset in floats) and
# OUT_DIR/drr_reference.bin (every tensor as little-endian float32, back to back).
# Exit status 3 when torch cannot be imported, so the C++ test can say so.
import sys

try:
    import torch
except Exception as error:  # the test reports this message
    sys.stderr.write("drr_reference.py: cannot import torch (python3-torch is needed): %s\n" % error)
    sys.exit(3)

# ---------------------------------------------------------------------------------------------------------------
# DRR, verbatim.
# ---------------------------------------------------------------------------------------------------------------
import math
from dataclasses import dataclass
from typing import List, Optional, Tuple
import torch
import torch.nn as nn
import torch.nn.functional as F
@dataclass
class DRRMemory:
    short_term: List[torch.Tensor] # list of [B, T, D]
    long_term: List[torch.Tensor] # list of [B, S, D]
class DepthMemoryAttention(nn.Module):
    """
    Lightweight multi-head attention over an external memory bank.
    Query comes from current hidden states x: [B, T, D]
    Memory comes from past states/summaries: [B, M, D]
    Output: [B, T, D]
    """
    def __init__(self, dim: int, num_heads: int = 8, dropout: float = 0.0):
        super().__init__()
        assert dim % num_heads == 0, "dim must be divisible by num_heads"
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.out_proj = nn.Linear(dim, dim, bias=False)
        self.dropout = dropout
    def _shape(self, x: torch.Tensor) -> torch.Tensor:
        # [B, N, D] -> [B, H, N, Hd]
        B, N, D = x.shape
        x = x.view(B, N, self.num_heads, self.head_dim)
        return x.transpose(1, 2)
    def forward(
        self,
        x: torch.Tensor, # [B, T, D]
        memory: torch.Tensor, # [B, M, D]
    ) -> torch.Tensor:
        if memory.numel() == 0:
            return torch.zeros_like(x)
        q = self._shape(self.q_proj(x))
        k = self._shape(self.k_proj(memory))
        v = self._shape(self.v_proj(memory))
        attn = F.scaled_dot_product_attention(
            q, k, v,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=False,
        ) # [B, H, T, Hd]
        attn = attn.transpose(1, 2).contiguous().view(x.size(0), x.size(1), self.dim)
        return self.out_proj(attn)
class SummaryPool(nn.Module):
    """
    Converts a block output [B, T, D] into S summary tokens [B, S, D].
    This compresses sequence length, not feature dimension.
    Much safer than ad-hoc feature compression for residual routing.
    """
    def __init__(self, dim: int, summary_tokens: int):
        super().__init__()
        self.summary_tokens = summary_tokens
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [B, T, D]
        x = self.proj(self.norm(x))
        # Adaptive average pool over sequence length: [B, T, D] -> [B, S, D]
        x_t = x.transpose(1, 2) # [B, D, T]
        pooled = F.adaptive_avg_pool1d(x_t, self.summary_tokens) # [B, D, S]
        return pooled.transpose(1, 2).contiguous()
class DRRLayer(nn.Module):
    """
    Improved Depth Routing Residuals layer:
    1) identity path
    2) short-term attention over recent full token states
    3) long-term attention over block summary tokens
    Routing is token-wise: [B, T, 3], not sequence-global.
    """
    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        short_window: int = 4,
        summary_tokens: int = 8,
        dropout: float = 0.0,
        router_hidden_mult: int = 1,
    ):
        super().__init__()
        self.dim = dim
        self.short_window = short_window
        self.summary_tokens = summary_tokens
        # Token-wise router
        hidden = dim * router_hidden_mult
        self.router = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, hidden),
            nn.GELU(),
            nn.Linear(hidden, 3),
        )
        # Bias toward identity at init for stability
        nn.init.zeros_(self.router[-1].weight)
        nn.init.zeros_(self.router[-1].bias)
        with torch.no_grad():
            self.router[-1].bias[0] = 2.0 # identity
            self.router[-1].bias[1] = 0.0 # short
            self.router[-1].bias[2] = -0.5 # long
        self.short_mem_attn = DepthMemoryAttention(dim, num_heads, dropout)
        self.long_mem_attn = DepthMemoryAttention(dim, num_heads, dropout)
        # Standard PreNorm transformer block
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = nn.MultiheadAttention(
            dim, num_heads, dropout=dropout, batch_first=True
        )
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, dim * 4),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(dim * 4, dim),
            nn.Dropout(dropout),
        )
    def _build_short_memory(self, short_term: List[torch.Tensor]) -> torch.Tensor:
        """
        Concatenate recent layer outputs along the memory axis.
        Input: list of [B, T, D]
        Output: [B, M, D] where M = len(short_term) * T
        """
        if not short_term:
            return torch.empty(0, device=self.router[-1].bias.device)
        recent = short_term[-self.short_window:]
        return torch.cat(recent, dim=1)
    def _build_long_memory(self, block_summaries: List[torch.Tensor]) -> torch.Tensor:
        """
        Concatenate block summary tokens.
        Input: list of [B, S, D]
        Output: [B, Nb*S, D]
        """
        if not block_summaries:
            return torch.empty(0, device=self.router[-1].bias.device)
        return torch.cat(block_summaries, dim=1)
    def forward(
        self,
        x: torch.Tensor,
        short_term: List[torch.Tensor],
        block_summaries: List[torch.Tensor],
    ) -> torch.Tensor:
        identity = x
        short_mem = self._build_short_memory(short_term)
        long_mem = self._build_long_memory(block_summaries)
        if short_mem.numel() == 0:
            short_ctx = torch.zeros_like(x)
        else:
            short_ctx = self.short_mem_attn(x, short_mem)
        if long_mem.numel() == 0:
            long_ctx = torch.zeros_like(x)
        else:
            long_ctx = self.long_mem_attn(x, long_mem)
        # Token-wise routing
        gates = F.softmax(self.router(x), dim=-1) # [B, T, 3]
        hybrid = (
            gates[..., 0:1] * identity +
            gates[..., 1:2] * short_ctx +
            gates[..., 2:3] * long_ctx
        )
        # Standard transformer update on top of routed residual input
        h = self.norm1(hybrid)
        attn_out, _ = self.self_attn(h, h, h, need_weights=False)
        x = hybrid + attn_out
        x = x + self.mlp(self.norm2(x))
        return x
class SmallDRRTransformer(nn.Module):
    def __init__(
        self,
        vocab_size: int = 32000,
        dim: int = 512,
        num_heads: int = 8,
        num_layers: int = 12,
        block_size: int = 4,
        short_window: int = 4,
        summary_tokens: int = 8,
        dropout: float = 0.0,
        max_seq_len: int = 2048,
    ):
        super().__init__()
        self.dim = dim
        self.block_size = block_size
        self.short_window = short_window
        self.embed = nn.Embedding(vocab_size, dim)
        self.pos_embed = nn.Embedding(max_seq_len, dim)
        self.layers = nn.ModuleList([
            DRRLayer(
                dim=dim,
                num_heads=num_heads,
                short_window=short_window,
                summary_tokens=summary_tokens,
                dropout=dropout,
            )
            for _ in range(num_layers)
        ])
        self.summary_pool = SummaryPool(dim, summary_tokens)
        self.final_norm = nn.LayerNorm(dim)
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # input_ids: [B, T]
        B, T = input_ids.shape
        pos = torch.arange(T, device=input_ids.device).unsqueeze(0).expand(B, T)
        x = self.embed(input_ids) + self.pos_embed(pos)
        memory = DRRMemory(short_term=[], long_term=[])
        for i, layer in enumerate(self.layers):
            x = layer(x, memory.short_term, memory.long_term)
            memory.short_term.append(x)
            if len(memory.short_term) > self.short_window:
                memory.short_term = memory.short_term[-self.short_window:]
            # Every block_size layers, add summary tokens to long-term memory
            if (i + 1) % self.block_size == 0:
                summary = self.summary_pool(x) # [B, S, D]
                memory.long_term.append(summary)
        return self.final_norm(x)

# ---------------------------------------------------------------------------------------------------------------
# Driver (not part of the seed).
# ---------------------------------------------------------------------------------------------------------------
import array
import json
import os


def _sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False):
    """F.scaled_dot_product_attention of PyTorch 2.x for the arguments the seed passes (no mask, not causal):
    softmax(q k^T / sqrt(head_dim)) v. python3-torch 1.13 (Debian) has no public scaled_dot_product_attention."""
    assert attn_mask is None and not is_causal, "the seed calls scaled_dot_product_attention without mask, non-causal"
    weights = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.size(-1)), dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ value


if not hasattr(F, "scaled_dot_product_attention"):
    F.scaled_dot_product_attention = _sdpa_math

CONFIG = {
    "vocab_size": 19,
    "dim": 32,
    "num_heads": 4,
    "num_layers": 6,
    "block_size": 2,
    "short_window": 2,
    "summary_tokens": 4,
    "dropout": 0.0,
    "max_seq_len": 12,
}
BATCH, SEQ = 2, 12


def randomise(model):
    """Every parameter drawn at a scale that keeps activations of order one and makes the three gates differ per
    token (the paper's router starts at zero weights, which would give the same gates everywhere)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or name.endswith("router.0.weight")):
                if name.endswith("weight"):
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))  # LayerNorm gains
                else:
                    p.normal_(0.0, 0.2)                       # LayerNorm shifts
            elif p.dim() == 1:
                p.normal_(0.0, 0.2)                           # linear biases (router output bias included)
            elif "embed" in name:
                p.normal_(0.0, 1.0)
            elif name.endswith("router.3.weight"):
                p.normal_(0.0, 0.25)                          # gates vary per token, none saturated
            else:
                p.normal_(0.0, 1.0 / math.sqrt(p.size(1)))    # fan-in scaling


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: drr_reference.py OUT_DIR\n")
        return 2
    out_dir = sys.argv[1]
    torch.manual_seed(1234)
    model = SmallDRRTransformer(**CONFIG)
    randomise(model)
    model.eval()
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ))

    # Per-layer outputs and gates through forward hooks on the paper's own modules (the forward runs unchanged).
    layer_outputs, layer_gates = [], []
    hooks = [layer.register_forward_hook(lambda module, inputs, output: layer_outputs.append(output.detach().clone()))
             for layer in model.layers]
    hooks += [layer.router.register_forward_hook(
        lambda module, inputs, output: layer_gates.append(F.softmax(output, dim=-1).detach().clone()))
        for layer in model.layers]
    with torch.no_grad():
        final = model(ids)
    for h in hooks:
        h.remove()

    tensors = [(name, p.detach()) for name, p in model.named_parameters()]
    tensors += [("output.layer.%d" % i, t) for i, t in enumerate(layer_outputs)]
    tensors += [("output.gates.%d" % i, t) for i, t in enumerate(layer_gates)]
    tensors.append(("output.final", final))

    index, blob, offset = [], array.array("f"), 0
    for name, t in tensors:
        values = t.contiguous().view(-1).tolist()
        blob.extend(values)
        index.append({"name": name, "shape": list(t.shape), "offset": offset})
        offset += len(values)
    if sys.byteorder != "little":
        blob.byteswap()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "drr_reference.bin"), "wb") as f:
        f.write(blob.tobytes())
    with open(os.path.join(out_dir, "drr_reference.json"), "w") as f:
        json.dump({"torch_version": torch.__version__, "config": CONFIG, "input_ids": ids.tolist(),
                   "tensors": index}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
