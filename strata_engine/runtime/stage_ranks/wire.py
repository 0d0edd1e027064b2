"""The frame: one micro-batch (or one control message) as one flat uint8 tensor, one point-to-point send.

Contract: `encode(kind, seq, parts, ...)` -> a uint8 tensor; `decode(buffer)` reads it back from a receive
buffer that may be larger than the frame (gloo lets a receive buffer exceed what was sent, so every
receive can be posted before its size is known, and one message per hop suffices). Layout, all int64
until the payload: a header of 8, 4 per part (rows, real tokens, want_logits, payload rows), the stage
times in µs, then per part its flat tokens and positions [N], and its rows' slots and lengths [R] (a part
is ragged: prompt chunks and decode rows back to back, runtime/pipeline.Part), then the payload: each
part's hidden states [padded tokens, D] (between stages) or its logits [R, V] float32 (last stage to
head); 0 payload rows = none. Control frames
(ready, failed, fault, shutdown, spec, copy) carry UTF-8 text or a pickled exception as their payload.
"""

from __future__ import annotations

import enum
import pickle
from dataclasses import dataclass, field

import torch

from ...model.rows import Rows

HEADER = 8
PART_FIELDS = 4
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.uint8]


class Kind(enum.IntEnum):
    WORK = 1  # a micro-batch: parts (+ hidden states or logits)
    ERROR = 2  # a micro-batch that failed in a stage: payload = the pickled exception
    SKIP = 3  # a micro-batch the head had already failed: stages pass it on untouched
    SHUTDOWN = 4  # stop after forwarding this
    SPEC = 5  # head -> stage rank: what to build (JSON text)
    READY = 6  # stage rank -> head: built (text: pid and device)
    FAILED = 7  # stage rank -> head: could not build (text: why)
    FAULT = 8  # a stage lost a neighbour: text names the rank, forwarded to the head, then the stage exits
    COPY = 9  # the prompt cache: each rank saves, restores or drops its layers' prefix (text: runtime/prefix_copies.py)


@dataclass
class WirePart:
    """One ragged part as it travels: tokens/positions [N] int64, the rows' slots and lengths [R] int64,
    payload hidden [padded N, D] or logits [R, V]."""

    tokens: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    lengths: torch.Tensor
    want_logits: bool
    payload: torch.Tensor | None = None

    @classmethod
    def of(cls, part, payload: torch.Tensor | None = None) -> WirePart:
        """The wire form of a runtime/pipeline.Part (its layout as slots and row lengths)."""
        rows = part.rows.rows
        return cls(
            part.tokens,
            part.positions,
            torch.tensor([r.slot for r in rows], dtype=torch.long),
            torch.tensor([r.length for r in rows], dtype=torch.long),
            part.want_logits,
            payload,
        )

    def layout(self) -> Rows:
        positions = self.positions.tolist()
        rows, start = [], 0
        for length in self.lengths.tolist():
            rows.append(positions[start : start + length])
            start += length
        return Rows.of(self.slots.tolist(), rows)


@dataclass
class Frame:
    kind: Kind
    seq: int
    parts: list[WirePart] = field(default_factory=list)
    stage_us: list[int] = field(default_factory=list)
    data: bytes = b""  # control text or a pickled exception
    nbytes: int = 0


def _ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64).view(torch.uint8)


def _flat_bytes(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A host copy of `t` with unit stride (any view, even a strided one-element one), as bytes."""
    flat = t.detach().reshape(-1)
    if flat.device.type != "cpu" or flat.dtype != dtype or flat.stride(0) != 1:
        flat = torch.empty(flat.numel(), dtype=dtype).copy_(flat)
    return flat.view(torch.uint8)


def encode(
    kind: Kind, seq: int, parts: list[WirePart] = (), stage_us: list[int] = (), data: bytes = b""
) -> torch.Tensor:
    """One frame, payload tensors moved to CPU (the wire is host memory; see docs/DISTRIBUTED.md)."""
    payloads = [p.payload for p in parts if p.payload is not None]
    dtype = payloads[0].dtype if payloads else torch.uint8
    if any(p.dtype != dtype for p in payloads):
        raise ValueError("every part's payload in a frame must have one dtype")
    meta: list[int] = []
    for p in parts:
        meta += [
            p.slots.numel(),
            p.positions.numel(),
            int(p.want_logits),
            0 if p.payload is None else p.payload.shape[0],
        ]
    meta += list(stage_us)
    ints = [_ints(meta)] if meta else []
    for p in parts:
        ints += [
            _flat_bytes(p.tokens, torch.int64),
            _flat_bytes(p.positions, torch.int64),
            _flat_bytes(p.slots, torch.int64),
            _flat_bytes(p.lengths, torch.int64),
        ]
    body = [_flat_bytes(t, t.dtype) for t in payloads]
    if data:
        body.append(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    width = payloads[0].shape[-1] if payloads else 0
    nbytes = HEADER * 8 + sum(t.numel() for t in ints) + sum(t.numel() for t in body)
    header = _ints([int(kind), seq, len(parts), nbytes, DTYPES.index(dtype), width, len(stage_us), len(data)])
    return torch.cat([header, *ints, *body])


def decode(buffer: torch.Tensor, clone: bool = False) -> Frame:
    """Read a frame from the front of `buffer`. Payloads are views of the buffer unless clone=True."""
    if buffer.numel() < HEADER * 8:
        raise ValueError(f"a receive buffer of {buffer.numel()} bytes cannot hold a frame header ({HEADER * 8} bytes)")
    kind, seq, nparts, nbytes, dtype_code, width, ntimes, ndata = buffer[: HEADER * 8].view(torch.int64).tolist()
    if not 0 < nbytes <= buffer.numel():
        raise ValueError(
            f"a frame of {nbytes} bytes in a receive buffer of {buffer.numel()}: sender and receiver disagree"
        )
    offset = HEADER * 8
    meta = buffer[offset : offset + (nparts * PART_FIELDS + ntimes) * 8].view(torch.int64).tolist()
    offset += len(meta) * 8
    shapes = [meta[i * PART_FIELDS : (i + 1) * PART_FIELDS] for i in range(nparts)]
    stage_us = meta[nparts * PART_FIELDS :]

    def take(count: int, dtype: torch.dtype) -> torch.Tensor:
        nonlocal offset
        size = count * dtype.itemsize
        t = buffer[offset : offset + size].view(dtype)
        offset += size
        return t.clone() if clone else t

    parts = []
    for rows, tokens, want, _ in shapes:
        parts.append(
            WirePart(
                take(tokens, torch.int64),
                take(tokens, torch.int64),
                take(rows, torch.int64),
                take(rows, torch.int64),
                bool(want),
            )
        )
    dtype = DTYPES[dtype_code]
    for part, (_, _, _, payload_rows) in zip(parts, shapes):
        if payload_rows:
            part.payload = take(payload_rows * width, dtype).view(payload_rows, width)
    data = bytes(buffer[offset : offset + ndata].tolist()) if ndata else b""
    return Frame(Kind(kind), seq, parts, stage_us, data, nbytes)


def error_bytes(exc: BaseException, stage: int) -> bytes:
    """The exception itself when it survives pickling with its type and message; else a StageError naming both."""
    try:
        clone = pickle.loads(pickle.dumps(exc))
        if type(clone) is type(exc) and str(clone) == str(exc):
            return pickle.dumps(exc)
    except Exception:
        pass
    return pickle.dumps(StageError(f"stage {stage}: {type(exc).__name__}: {exc}"))


class StageError(RuntimeError):
    """An exception from a stage rank that could not cross the wire as itself (its type and message)."""
