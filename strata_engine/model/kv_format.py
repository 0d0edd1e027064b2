"""The KV cache's storage formats (`--kv-dtype`): what a position's keys and values are kept as, and back.

Contract: `FORMATS[name]` is a `KVFormat`; `parts(num_slots, heads, ctx, head_dim, model_dtype)` names the
tensors one layer holds ({name: (shape, dtype)}, every one indexed [slot, head, position, ...] so the cache
can commit and let go of them by position); `encode(k, v) -> {part: tensor [Hkv, T, ...]}` quantizes one
row's keys and values [Hkv, T, head_dim]; `decode(parts) -> (k, v)` float32 (the model dtype for `model`).
Every scale covers one (slot, head, position)'s head_dim values, so a position's stored bits depend on
that position's values alone: a row's cache, and so its logits, do not depend on the rows beside it.
  - model: today's cache, the model's dtype (float32 on CPU, the default); read as a view, no copy.
  - f32:   float32 (the same as `model` on CPU).
  - bf16:  keys and values rounded to bfloat16.
  - q8:    int8 keys and values, symmetric: scale = absmax / 127 (float32), q = round(x / scale).
  - k8v4:  keys as q8; values 4-bit, asymmetric: scale = (max - min) / 15 and min (float32 each),
           q = round((x - min) / scale) in 0..15, packed two a byte (element 2i in the low nibble, 2i+1 high).
The runtime's native codec (runtime/native/kv_codec.py) stores and reads q8 and k8v4 bit for bit as these
do (tests/engine/test_kv_codec_kernel.py): a change to either's arithmetic is a change to both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

NAMES = ("f32", "bf16", "q8", "k8v4")  # --kv-dtype's choices; "model" (None on the command line) is the model's dtype


def _q8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., hd] -> int8 [..., hd], float32 scale [...]: symmetric absmax / 127 over the last dim."""
    x = x.float()
    scale = x.abs().amax(dim=-1) / 127.0
    q = (x / torch.where(scale > 0, scale, 1.0)[..., None]).round_().clamp_(-127, 127).to(torch.int8)
    return q, scale


def dequant_q8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale[..., None]


def _q4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [..., hd] -> packed uint8 [..., hd/2], float32 scale [...] and min [...]: asymmetric over the last dim."""
    x = x.float()
    low, high = x.amin(dim=-1), x.amax(dim=-1)
    scale = (high - low) / 15.0
    q = ((x - low[..., None]) / torch.where(scale > 0, scale, 1.0)[..., None]).round_().clamp_(0, 15).to(torch.uint8)
    return pack_nibbles(q), scale, low


def pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """uint8 [..., hd] of values 0..15 -> [..., hd/2]: element 2i in the low nibble, 2i+1 in the high one."""
    return q[..., 0::2] | (q[..., 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """`pack_nibbles` undone: [..., hd/2] -> uint8 [..., hd]."""
    return torch.stack((packed & 15, packed >> 4), dim=-1).flatten(-2)


def dequant_q4(packed: torch.Tensor, scale: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    return unpack_nibbles(packed).float() * scale[..., None] + low[..., None]


@dataclass(frozen=True)
class KVFormat:
    name: str

    @property
    def views(self) -> bool:
        """True where a read is a view of the cache in the model's dtype (no copy): today's path, bit for bit."""
        return self.name == "model"

    def parts(self, shape: tuple[int, int, int, int], model_dtype: torch.dtype) -> dict[str, tuple[tuple, torch.dtype]]:
        """{part: (shape, dtype)} of one layer whose keys are `shape` [slots, heads, ctx, head_dim]."""
        scalar = shape[:3]
        if self.name == "model":
            return {"k": (shape, model_dtype), "v": (shape, model_dtype)}
        if self.name in ("f32", "bf16"):
            dtype = torch.float32 if self.name == "f32" else torch.bfloat16
            return {"k": (shape, dtype), "v": (shape, dtype)}
        if self.name == "q8":
            return {
                "k": (shape, torch.int8),
                "k_scale": (scalar, torch.float32),
                "v": (shape, torch.int8),
                "v_scale": (scalar, torch.float32),
            }
        if shape[3] % 2:
            raise ValueError(f"kv k8v4 packs two values a byte: head_dim {shape[3]} is odd")
        return {
            "k": (shape, torch.int8),
            "k_scale": (scalar, torch.float32),
            "v": ((*scalar, shape[3] // 2), torch.uint8),
            "v_scale": (scalar, torch.float32),
            "v_min": (scalar, torch.float32),
        }

    def encode(self, k: torch.Tensor, v: torch.Tensor, dtypes: dict[str, torch.dtype]) -> dict[str, torch.Tensor]:
        """k, v [Hkv, T, hd] -> each part's values at those positions."""
        if self.name in ("model", "f32", "bf16"):
            return {"k": k.to(dtypes["k"]), "v": v.to(dtypes["v"])}
        kq, k_scale = _q8(k)
        if self.name == "q8":
            vq, v_scale = _q8(v)
            return {"k": kq, "k_scale": k_scale, "v": vq, "v_scale": v_scale}
        vq, v_scale, v_min = _q4(v)
        return {"k": kq, "k_scale": k_scale, "v": vq, "v_scale": v_scale, "v_min": v_min}

    def decode(self, parts: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The parts' slices at some positions -> (k, v) there: float32 (the stored dtype for `model`)."""
        if self.name == "model":
            return parts["k"], parts["v"]
        if self.name in ("f32", "bf16"):
            return parts["k"].float(), parts["v"].float()
        k = dequant_q8(parts["k"], parts["k_scale"])
        if self.name == "q8":
            return k, dequant_q8(parts["v"], parts["v_scale"])
        return k, dequant_q4(parts["v"], parts["v_scale"], parts["v_min"])


def kv_format(name: str | None) -> KVFormat:
    """The format `--kv-dtype` names (None: the model's dtype); a bad name raises naming the choices."""
    if name is None or name == "model":
        return KVFormat("model")
    if name not in NAMES:
        raise ValueError(f"kv_dtype must be one of {', '.join(NAMES)}, got {name!r}")
    return KVFormat(name)
