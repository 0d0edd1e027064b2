"""The context length of a slot when the user gives none, and the check when they give one.

Default: the model's `max_position_embeddings`, where a quarter of the machine's memory (RAM on CPU, the
device's memory on CUDA) holds what `batch` slots commit at it. A slot commits every position it writes,
unless it lets go of the ones behind a sliding window (the CPU cache: `held` positions at most, whatever the
context); then the context is the model's and only the window's share counts. Where the whole context does
not fit (no window, or a device that commits what it reserves), the default shrinks to what does, rounded
down to a multiple of 256, as vLLM derives its own. An explicit `--ctx` past the model's positions is
refused with the flag that allows it: positions a model never saw are a quality risk its config declares.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

KV_MEMORY_SHARE = 0.25  # of the machine's (or the device's) memory, for the whole KV cache
ROUND_TO = 256
SIM_DEFAULT_CTX = 131072  # the simulator holds no KV; the spec's scenarios need 64K + their outputs
ALLOW_FLAG = "--allow-ctx-beyond-model"


@dataclass(frozen=True)
class ContextChoice:
    ctx: int
    why: str  # one line for /v1/engine and the server log
    held: int | None = None  # the most positions a slot commits at once (a window's bound); None: all of ctx
    at_rest: int | None = None  # the most it commits between forwards (held less a read chunk); None: as held


def kv_bytes_per_token(
    num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int, kv_dtype: str | None = None
) -> int:
    """Keys and values of one token of one slot, over every layer, in the KV format `kv_dtype` (None: the
    model's dtype, `dtype_bytes` a value; model/kv_format.py): a quantized format's scales included."""
    per_head = {
        None: 2 * head_dim * dtype_bytes,
        "f32": 2 * head_dim * 4,
        "bf16": 2 * head_dim * 2,
        "q8": 2 * (head_dim + 4),  # int8 keys and values, a float32 scale each
        "k8v4": (head_dim + 4) + (head_dim // 2 + 8),  # int8 keys and a scale; 4-bit values, a scale and a min
    }[kv_dtype]
    return num_layers * num_kv_heads * per_head


def memory_bytes(device: str) -> int:
    """Total memory of `device` ('cpu' = the machine's RAM)."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def choose_ctx(
    requested: int | None,
    max_positions: int,
    batch: int,
    per_token: int,
    memory: int,
    allow_beyond_model: bool = False,
    held: int | None = None,
) -> ContextChoice:
    """`requested` None -> the default above; else the requested length, checked against the model. `held`:
    the most positions a slot commits at any context (a window's bound), None where it commits all it writes."""
    if requested is not None:
        if requested > max_positions and not allow_beyond_model:
            raise ValueError(
                f"--ctx {requested} exceeds the model's max_position_embeddings ({max_positions}); "
                f"pass {ALLOW_FLAG} to run past the positions the model declares"
            )
        return ContextChoice(requested, "--ctx", held)
    fits = int(memory * KV_MEMORY_SHARE) // max(1, batch * per_token)
    if held is not None and held < max_positions:
        if fits < held:
            raise ValueError(
                f"{batch} slots of KV cache ({held} positions each at most, {per_token} bytes a position) do not "
                f"fit in a quarter of {memory / 2**30:.1f} GiB; lower --batch"
            )
        return ContextChoice(
            max_positions,
            f"{max_positions} (the model's max_position_embeddings; a slot commits at most {held} positions of "
            f"it, the sliding window's share)",
            held,
        )
    fits -= fits % ROUND_TO
    if fits < ROUND_TO:
        raise ValueError(
            f"{batch} slots of KV cache ({per_token} bytes a token) do not fit in a quarter of "
            f"{memory / 2**30:.1f} GiB; lower --batch or give --ctx"
        )
    if fits < max_positions:
        return ContextChoice(
            fits,
            f"{fits} (what {KV_MEMORY_SHARE:.0%} of {memory / 2**30:.0f} GiB holds for "
            f"{batch} slots; the model allows {max_positions})",
        )
    return ContextChoice(max_positions, f"{max_positions} (the model's max_position_embeddings)")
