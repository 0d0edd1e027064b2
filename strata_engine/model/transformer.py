"""The decoder-only transformer (llama, mixtral, qwen2_moe, qwen3_moe), reading top to bottom.

Contract: `Transformer.forward(tokens [B,T], positions [B,T], kv, slots [B]) -> logits [B,T,V] float32`
equals `head(layers(embed(tokens)))`; row b is slot `slots[b]`, its tokens sit at `positions[b, :]`.
Inside, a call is ragged: tokens flattened to [N] and a host-side `Rows` layout, so one call can mix a
prompt chunk with decode rows (`Block(h [N, D], positions [N], layer_kv, rows)`). Each `Block` writes the
call's keys/values at (slot, position) and lets every query at position p attend to its slot's positions
0..p. Rows never see each other: attention runs per row over that row's own prefix, and MoE routing and
the expert sums are per token in a fixed expert order. Bitwise independence of the GEMMs from the row
count is not the model's business: the runtime pads the flat tokens and sets `MoE.row_tile` from outside;
nor are native ops: the runtime sets `Attention.chunk_attention`, `.decode_attention`, `.kv_codec`,
`MoE.routed_experts`.
No devices or layer split in here: the pipeline places `layers[i]` where it likes after construction.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .kv_cache import KVCache, LayerKV
from .attention import cached_row, decode_span
from .config import ModelConfig
from .rows import Rows


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # Low precision: normalise in float32, scale in the model dtype, as the HF reference does.
        return self.weight * F.rms_norm(x.float(), self.weight.shape, eps=self.eps).to(x.dtype)


class Rotary(nn.Module):
    """Rotary position embedding; angles computed from positions in float32 (no per-length tables)."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        self.register_buffer("inv_freq", self._inv_freq(torch.device("cpu")), persistent=False)

    def _inv_freq(self, device: torch.device) -> torch.Tensor:
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device="cpu").float() / self.head_dim
        return (1.0 / (self.theta**exponents)).to(device)

    def _apply(self, fn, recurse=True):
        # .to(bfloat16) would round the frequencies and shift every rotation; rebuild them in float32
        # on whatever device the module went to (this also covers to_empty from the meta device).
        super()._apply(fn, recurse)
        self.inv_freq = self._inv_freq(self.inv_freq.device)
        return self

    def angles(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [N] -> cos, sin [N, 1, hd/2] (angles in float32, then the model dtype)."""
        angles = positions[:, None, None].float() * self.inv_freq
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # x: [N, heads, hd]; rotate the pairs (i, i + hd/2) as HF's rotate_half does
        x1, x2 = x[..., : self.head_dim // 2], x[..., self.head_dim // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Attention(nn.Module):
    """Grouped-query attention with q/k/v fused into one projection."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        q_dim, kv_dim = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, q_dim + 2 * kv_dim, bias=config.attention_bias)
        self.o_proj = nn.Linear(q_dim, config.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.rotary = Rotary(self.head_dim, config.rope_theta)
        self.window = config.sliding_window  # None = full causal attention
        # A prompt chunk's attention in one call, `(q, keys, values, window) -> out or None` (attend_row's `chunk`):
        # None here; the runtime sets its native op from outside. None, or a call answering None: the flash paths.
        self.chunk_attention: Callable | None = None
        # A quantized cache's one-query rows written and attended in one call: `(q [R, H, hd], k, v [R, Hkv, hd], kv,
        # [(slot, low, high)]) -> [R, H, hd] or None` (nothing written); None here (the runtime sets it).
        self.decode_attention: Callable | None = None
        # A quantized cache's codec, passed to `LayerKV.write_row` and `.read` (model/kv_cache.py, `codec`): None
        # here (kv_format.py's Python encode and decode); the runtime sets its native one.
        self.kv_codec = None

    def project(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: [N, D] at positions [N] -> q [N, H, hd], k and v [N, Hkv, hd], rotary applied to q and k."""
        heads, qk_heads = self.num_heads, self.num_heads + self.num_kv_heads
        qkv = self.qkv_proj(x).view(x.shape[0], qk_heads + self.num_kv_heads, self.head_dim)
        qk, v = qkv[:, :qk_heads], qkv[:, qk_heads:]  # q and k heads side by side: norm and rotate them at once
        if self.q_norm is not None:  # qwen3: normalise each head before the rotation
            scale = torch.cat([self.q_norm.weight.expand(heads, -1), self.k_norm.weight.expand(self.num_kv_heads, -1)])
            qk = F.rms_norm(qk.float(), (self.head_dim,), eps=self.q_norm.eps).to(qk.dtype) * scale
        cos, sin = self.rotary.angles(positions, qk.dtype)  # [N, 1, hd/2]
        qk = self.rotary(qk, cos, sin)  # [N, H + Hkv, hd]
        return qk[:, :heads], qk[:, heads:], v

    def forward(self, x: torch.Tensor, positions: torch.Tensor, kv: LayerKV, rows: Rows) -> torch.Tensor:
        """x: [N, D] -> [N, D]; padding tokens (flat index >= rows.real) attend to nothing and give zeros."""
        q, k, v = self.project(x, positions)
        kv.check([[row.slot, row.first, row.last] for row in rows.rows])  # every row, before anything is written
        # a quantized cache's one-query rows: written and attended in one decode hook call (None back: as the rest)
        one = [r for r in rows.rows if r.length == 1] if self.decode_attention and "k_scale" in kv.parts else []
        at, spans = [r.start for r in one], [decode_span(r, self.window) for r in one]
        done = self.decode_attention(q[at], k[at], v[at], kv, spans) if one else None
        answered = dict(zip(one, done)) if done is not None else {}
        for row in rows.rows:  # the rest written before any is read (rows are distinct slots)
            if row not in answered:
                span = slice(row.start, row.end)
                at = None if row.consecutive else positions[span]
                kv.write_row(row.slot, row.first, k[span], v[span], at, self.kv_codec)
        out = [
            answered[r][None]
            if r in answered
            else cached_row(
                q[r.start : r.end], positions[r.start : r.end], kv, r, self.window, self.chunk_attention, self.kv_codec
            )
            for r in rows.rows
        ]
        if rows.padded > rows.real:
            out.append(q.new_zeros(rows.padded - rows.real, self.num_heads, self.head_dim))
        o = torch.cat(out) if len(out) > 1 else out[0]  # [N, H, hd]
        return self.o_proj(o.reshape(rows.padded, self.num_heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU feed-forward; gate and up fused into one [2I, D] projection (gate rows first). `real` is
    accepted as MoE's is and ignored: a dense layer's padding rows cost what they cost."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor, real: int | None = None) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class MoE(nn.Module):
    """Top-k routed SwiGLU experts (+ qwen2_moe's sigmoid-gated shared expert). x: [N, D] -> [N, D]."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        experts, hidden, inter = config.num_experts, config.hidden_size, config.moe_intermediate_size
        self.num_experts, self.top_k, self.norm_topk_prob = experts, config.num_experts_per_tok, config.norm_topk_prob
        self.gate = nn.Linear(hidden, experts, bias=False)  # the router
        self.gate_up_proj = nn.Parameter(torch.empty(experts, 2 * inter, hidden))  # per expert: gate rows, then up rows
        self.down_proj = nn.Parameter(torch.empty(experts, hidden, inter))
        self.shared_expert = self.shared_expert_gate = None
        if config.shared_expert_intermediate_size:
            self.shared_expert = MLP(hidden, config.shared_expert_intermediate_size)
            self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)
        # Each expert's GEMMs run on its tokens padded with zero rows to a multiple of row_tile, so that a
        # token's expert output does not depend on how many other tokens chose that expert (CPU GEMMs
        # round small row counts differently). 1 = no padding; the runtime sets it from outside.
        self.row_tile = 1
        # The routed loop in one call, `(x, weights, experts, gate_up_proj, down_proj, row_tile) -> out or None`,
        # bitwise the loop's: None here; the runtime sets its native op from outside. None, or None back: the loop.
        self.routed_experts: Callable | None = None

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: [N, D] -> router probabilities [N, E] (float32), top-k weights [N, k], top-k expert ids [N, k]."""
        probs = F.softmax(self.gate(x).float(), dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return probs, weights.to(x.dtype), experts

    def forward(self, x: torch.Tensor, real: int | None = None) -> torch.Tensor:
        """Rows from `real` on are padding (the runtime's row tile): they run through the router's GEMM
        like every row but choose no expert, and their output is 0 (never cached or attended to)."""
        _, weights, experts = self.route(x)
        if real is not None and real < x.shape[0]:
            weights, experts = weights[:real], experts[:real]
        every, counts = x.shape[0] <= self.EVERY_EXPERT_MAX_TOKENS and self.num_experts <= 4 * self.top_k, None
        if every and self.row_tile > 1:  # padded rows: all experts only where the real rows chose over half
            counts = torch.bincount(experts.flatten(), minlength=self.num_experts).tolist()
            every = 2 * sum(1 for count in counts if count) > self.num_experts
        out = self._every_expert(x, weights, experts) if every else self._routed(x, weights, experts, counts)
        if self.shared_expert is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out

    # A few tokens (decode steps, tiny chunks) touch most experts anyway when experts/top_k is small: running
    # every expert on every token is one GEMM and one batched GEMM instead of a Python loop of ~10 ops per
    # expert. Unchosen experts weigh exactly 0, so the sum over experts adds the same terms as _routed.
    # 32: a decode micro-batch padded to the runtime's row tile (32) still takes this path. But with rows
    # padded to the tile, every expert costs a full tile of rows: where the real rows chose few experts
    # (one decode row: top_k of them) the loop over those alone is cheaper; measured on strata-tiny-moe
    # (docs/measurements/batch-invariance.md), the loop wins up to half the experts. Unpadded (GPU), the every-expert path stays:
    # it needs no host round trip.
    EVERY_EXPERT_MAX_TOKENS = 32

    def _every_expert(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        hidden, dense_weights = self.every_expert_hidden(x, weights, experts)
        y = torch.bmm(hidden.transpose(0, 1), self.down_proj.transpose(1, 2))  # [E, N, I] @ [E, I, D] -> [E, N, D]
        return (y * dense_weights.t()[..., None]).sum(0)  # summed over experts in ascending order

    def every_expert_hidden(
        self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every expert's SwiGLU hidden state for every row, [N, E, I], and the router weights spread over all
        experts, [N, E] (unchosen experts and padding rows 0): what the down projections take."""
        tokens, (num_experts, inter2, hidden) = x.shape[0], self.gate_up_proj.shape
        dense_weights = torch.zeros(tokens, num_experts, dtype=x.dtype, device=x.device)  # [N, E]; padding rows weigh 0
        dense_weights[: experts.shape[0]].scatter_(1, experts, weights)
        gate, up = (
            F.linear(x, self.gate_up_proj.view(num_experts * inter2, hidden))
            .view(tokens, num_experts, inter2)
            .chunk(2, dim=-1)
        )
        return F.silu(gate) * up, dense_weights

    def _routed(
        self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, counts: list[int] | None = None
    ) -> torch.Tensor:
        if self.routed_experts is not None:  # the runtime's op: this loop in C++, bitwise the same
            out = self.routed_experts(x, weights, experts, self.gate_up_proj, self.down_proj, self.row_tile)
            if out is not None:
                return out
        out = torch.zeros_like(x)
        # Group the (token, choice) pairs by expert with a stable sort; each expert runs once on its tokens
        # and adds into `out` in ascending expert order, so a token's sum never depends on its neighbours.
        flat_experts = experts.flatten()
        order = flat_experts.argsort(stable=True)
        if counts is None:
            counts = torch.bincount(flat_experts, minlength=self.num_experts).tolist()
        tokens_of, weights_of = order // self.top_k, weights.flatten()[order]
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            tokens = tokens_of[start : start + count]
            rows = _pad_rows(x[tokens], self.row_tile)  # [count rounded up to row_tile, D]
            gate, up = F.linear(rows, self.gate_up_proj[expert]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down_proj[expert])[:count] * weights_of[start : start + count, None]
            out.index_add_(0, tokens, y)
            start += count
        return out


def _pad_rows(x: torch.Tensor, tile: int) -> torch.Tensor:
    """x: [M, D] -> [M rounded up to a multiple of tile, D], zero rows appended."""
    extra = -x.shape[0] % tile
    return x if extra == 0 else torch.cat([x, x.new_zeros(extra, x.shape[1])])


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MoE(config) if config.layer_is_moe(layer) else MLP(config.hidden_size, config.intermediate_size)

    def forward(self, h: torch.Tensor, positions: torch.Tensor, kv: LayerKV, rows: Rows) -> torch.Tensor:
        # h: [N, D] flat tokens of every row (then padding); positions: [N]
        h = h + self.self_attn(self.input_layernorm(h), positions, kv, rows)
        return h + self.mlp(self.post_attention_layernorm(h), rows.real)


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Share the embedding with the LM head when the config says so (again after to_empty, which unties)."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: [N] (or any shape) -> h [N, D]."""
        return self.embed_tokens(tokens)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """h: [N, D] -> logits [N, V] in float32."""
        return self.lm_head(self.norm(h)).float()

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, kv: KVCache, slots: torch.Tensor) -> torch.Tensor:
        if tokens.shape != positions.shape or tokens.dim() != 2 or slots.shape != tokens.shape[:1]:
            raise ValueError(
                f"tokens {tuple(tokens.shape)}, positions {tuple(positions.shape)} must be [B, T] and slots {tuple(slots.shape)} [B]"
            )
        batch, length = tokens.shape
        rows = Rows.of(slots.tolist(), positions.tolist())  # the call's one host round trip
        flat_positions = positions.reshape(-1)
        h = self.embed(tokens.reshape(-1))  # [B*T, D]
        for i, layer in enumerate(self.layers):
            h = layer(h, flat_positions, kv[i], rows)
        return self.head(h).view(batch, length, -1)
