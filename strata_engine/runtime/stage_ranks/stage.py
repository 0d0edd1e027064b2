"""A stage rank: one pipeline stage as a rank of a torch.distributed group, fed by the rank before it.

Contract: `serve_stage(store, rank, world_size)` joins the group, receives its `StageSpec` from the head
(rank 0), loads only its layers (embed on the first stage, norm and head on the last), owns those
layers' KV cache, says READY (or FAILED with why), then serves frames until a SHUTDOWN: it receives
from rank-1 and sends to rank+1 (the last stage sends to the head). Each frame is one send; the next
frame's receive is posted before the current one is computed, so the link and the compute overlap. An
exception in a micro-batch becomes that frame's ERROR and the stage keeps serving; a lost neighbour
becomes a FAULT frame naming it, forwarded toward the head, and the stage exits.
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import threading
import time
from dataclasses import asdict, dataclass, replace

import torch
import torch.distributed as dist

from ...heap import hand_back
from ...runtime_config import RuntimeConfig
from ..built_stage import BuiltStage, drop_other_stages, place_stage
from ..invariance import apply_row_tile, invariance_holds
from ..pipeline import Part
from ..stage_plan import StagePlan
from ..prefix_copies import HostPrefixes, PrefixCopy
from ..stage_forward import stage_forward
from ..thread_probe import stage_threads_agree
from .wire import Kind, WirePart, decode, encode, error_bytes

DATA, CONTROL = 0, 1
SPEC_BYTES = 1 << 16
SENDS_IN_FLIGHT = 8
FOREVER = datetime.timedelta(days=365)  # a stage with nothing to do waits; a lost neighbour ends the wait


@dataclass(frozen=True)
class StageSpec:
    """What one stage rank builds: plain values, sent as JSON from the head."""

    index: int
    device: str
    layer_start: int
    layer_end: int
    num_stages: int
    model: str
    num_slots: int
    ctx: int
    dtype: str  # "float32", "bfloat16", "float16"
    runtime: RuntimeConfig  # threads, compiled step and GEMMs, row tile (resolved: an int) (runtime_config.py)
    capacity: int  # bytes of the largest frame this rank receives
    timeout_s: float
    kv_dtype: str | None = None  # the KV cache's format (model/kv_format.py); None: the model's dtype

    @property
    def plan(self) -> StagePlan:
        return StagePlan(self.index, self.device, self.layer_start, self.layer_end)

    @property
    def is_first(self) -> bool:
        return self.index == 0

    @property
    def is_last(self) -> bool:
        return self.index == self.num_stages - 1

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> StageSpec:
        fields = json.loads(data)
        return cls(**{**fields, "runtime": RuntimeConfig(**fields["runtime"])})


def make_group(store, rank: int, world_size: int, generation: int = 0):
    """The gloo group of the head and the stage ranks; a new generation is a new group on the same store."""
    return dist.ProcessGroupGloo(dist.PrefixStore(f"strata/{generation}", store), rank, world_size, FOREVER)


def build_stage(spec: StageSpec):
    """Load the model on CPU in float32 and keep this stage's parts only, placed as split_layers places them
    (built_stage.py); returns the model, this stage's KV cache and its compiled step (None without
    spec.runtime.compile)."""
    from ...model.weights import load_model
    from ..native.choice import choose as choose_kernels

    dtype = getattr(torch, spec.dtype)
    model, _ = load_model(spec.model, device="cpu", dtype=torch.float32)
    runtime = spec.runtime
    choose_kernels(model, spec.num_slots, runtime.threads, decode=runtime.compile, kv_dtype=spec.kv_dtype)
    drop_other_stages(model, spec.plan, spec.is_first, spec.is_last)
    place_stage(model, spec.plan, dtype, spec.is_first, spec.is_last)
    model.eval()
    apply_row_tile(model, runtime.row_tile)
    built = BuiltStage.build(
        model, spec.plan, spec.is_first, spec.is_last, spec.num_slots, spec.ctx, dtype, runtime, spec.kv_dtype
    )
    return model, built.cache, built.compiled


def run_part(spec: StageSpec, model, cache, wire: WirePart, compiled=None) -> WirePart:
    """One ragged part through this rank's layers, by the same stage_forward as the thread stages."""
    part = Part(wire.tokens, wire.positions, wire.layout(), wire.want_logits, hidden=wire.payload)
    stage_forward(
        model, spec.plan.layers, cache, part, spec.is_first, spec.is_last, spec.runtime.row_tile, spec.device, compiled
    )
    payload = part.logits if spec.is_last else part.hidden  # the head needs the logits only: [R, V] float32
    return WirePart(wire.tokens, wire.positions, wire.slots, wire.lengths, wire.want_logits, payload)


class _Sender:
    """Non-blocking sends to one peer, each frame kept alive until its send completes."""

    def __init__(self, group, peer: int, timeout_s: float):
        self.group, self.peer, self.timeout = group, peer, datetime.timedelta(seconds=timeout_s)
        self.pending: collections.deque = collections.deque()

    def send(self, frame: torch.Tensor) -> None:
        while self.pending and self.pending[0][0].is_completed():
            self.pending.popleft()[0].wait()
        if len(self.pending) >= SENDS_IN_FLIGHT:
            self.pending.popleft()[0].wait(self.timeout)
        self.pending.append((self.group.send([frame], self.peer, DATA), frame))

    def flush(self) -> None:
        while self.pending:
            self.pending.popleft()[0].wait(self.timeout)


def serve_stage(
    store,
    rank: int,
    world_size: int,
    model_override: str | None = None,
    device_override: str | None = None,
    generation: int = 0,
) -> int:
    """The stage rank's body; returns the process exit status (0 after a SHUTDOWN)."""
    group = make_group(store, rank, world_size, generation)
    spec_buffer = torch.empty(SPEC_BYTES, dtype=torch.uint8)
    group.recv([spec_buffer], 0, CONTROL).wait()
    spec = StageSpec.from_json(decode(spec_buffer).data)
    overrides = {k: v for k, v in (("model", model_override), ("device", device_override)) if v}
    spec = replace(spec, **overrides)
    runtime = spec.runtime
    try:
        if runtime.threads:
            torch.set_num_threads(runtime.threads)
        model, cache, compiled = build_stage(spec)
        invariant = invariance_holds(
            model.config, spec.device, getattr(torch, spec.dtype), runtime.row_tile, runtime.threads
        )
        layout = (
            invariant
            and not runtime.compile
            and stage_threads_agree(
                model,
                range(spec.layer_start, spec.layer_end),
                runtime.row_tile,
                runtime.threads,
                spec.device,
                spec.is_first,
                spec.is_last,
                Part.ragged,
            )
        )
    except Exception as exc:
        group.send([encode(Kind.FAILED, rank, data=f"{type(exc).__name__}: {exc}".encode())], 0, CONTROL).wait()
        return 2
    hand_back()  # what the build and the probes freed goes back to the OS before the first part
    built = "" if compiled is None else f" graphs {compiled.graphs} compile_s {compiled.compile_s:.2f}"
    ready = f"pid {os.getpid()} device {spec.device}{built} layout {int(layout)} invariant {int(invariant)}"
    group.send([encode(Kind.READY, rank, data=ready.encode())], 0, CONTROL).wait()
    with torch.inference_mode():
        return _serve(group, rank, world_size, spec, model, cache, compiled)


def _serve(group, rank: int, world_size: int, spec: StageSpec, model, cache, compiled) -> int:
    prev, nxt = rank - 1, (rank + 1) % world_size
    sender = _Sender(group, nxt, spec.timeout_s)
    buffers = [torch.empty(spec.capacity, dtype=torch.uint8) for _ in range(2)]
    current = 0
    receive = group.recv([buffers[current]], prev, DATA)
    prefixes = HostPrefixes(cache)  # this rank's layers of the prompt cache's host store
    while True:
        try:
            receive.wait()
            frame = decode(buffers[current])
        except RuntimeError as err:
            return _fault(sender, f"stage rank {rank} lost its link to rank {prev}: {err}", prev)
        if frame.kind in (Kind.SHUTDOWN, Kind.FAULT):
            try:
                sender.send(buffers[current][: frame.nbytes].clone())
                sender.flush()
            except RuntimeError:
                pass
            return 0 if frame.kind == Kind.SHUTDOWN else 3
        raw = buffers[current][: frame.nbytes]
        current ^= 1
        receive = group.recv([buffers[current]], prev, DATA)  # the next frame arrives while this one computes
        out = _compute(spec, model, cache, compiled, frame, raw, prefixes)
        try:
            sender.send(out)
        except RuntimeError:
            return 3  # the next rank is gone: the ranks after it, or the head, will name it


def _compute(spec: StageSpec, model, cache, compiled, frame, raw: torch.Tensor, prefixes: HostPrefixes) -> torch.Tensor:
    if frame.kind == Kind.COPY:  # this rank's layers, then on to the next rank (the last one tells the head)
        try:
            prefixes.apply(PrefixCopy.from_text(frame.data))
        except Exception as exc:  # out of memory, or a key lost with a restart: the head's store gives way
            return encode(Kind.ERROR, frame.seq, data=error_bytes(exc, spec.index))
        return raw.clone()
    if frame.kind != Kind.WORK:  # ERROR / SKIP pass through untouched
        return raw.clone()
    t0 = time.perf_counter()
    try:
        parts = [run_part(spec, model, cache, part, compiled) for part in frame.parts]
    except Exception as exc:  # one micro-batch fails, the stage keeps serving
        return encode(Kind.ERROR, frame.seq, data=error_bytes(exc, spec.index))
    stage_us = frame.stage_us + [int((time.perf_counter() - t0) * 1e6)]
    return encode(Kind.WORK, frame.seq, parts, stage_us)


def _fault(sender: _Sender, message: str, lost_rank: int) -> int:
    try:
        sender.send(encode(Kind.FAULT, lost_rank, data=message.encode()))
        sender.flush()
    except RuntimeError:
        pass
    return 3


def watch_parent(parent_pid: int, interval_s: float = 0.5) -> None:
    """A stage rank started by a head exits when that head is gone, whatever killed it."""

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(4)
            time.sleep(interval_s)

    threading.Thread(target=watch, name="strata-parent-watch", daemon=True).start()


def run_stage_rank(
    model: str | None, device: str | None, local_rank: int | None, parent_pid: int | None, timeout_s: float = 300.0
) -> int:
    """`strata-engine stage`: join the head's group through env:// and serve until the head says stop."""
    import signal

    if parent_pid is not None:  # started by a head: it stops us (Ctrl-C reaches the head, not us)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        watch_parent(parent_pid)
    try:
        store, rank, world_size = next(dist.rendezvous("env://", timeout=datetime.timedelta(seconds=timeout_s)))
    except ValueError as err:
        raise SystemExit(f"strata-engine stage: {err} (a stage rank needs MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)")
    if rank == 0:
        raise SystemExit(
            "strata-engine stage: RANK 0 is the head (strata-engine serve); stage ranks are 1..WORLD_SIZE-1"
        )
    if device is None and local_rank is not None and torch.cuda.is_available():
        device = f"cuda:{local_rank}"  # torchrun: one GPU per local rank
    return serve_stage(store, rank, world_size, model_override=model, device_override=device)
