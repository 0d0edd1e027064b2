"""Pipeline stages as processes: one OS process per stage, so stages overlap on CPU without sharing a GIL.

Contract: `ProcessPipeline` has `Pipeline`'s interface (`submit`, `get`, `drain`, `in_flight`,
`num_stages`, `close`) and returns the same `MicroBatch` objects, in submission order, with each
part's logits filled in (or `error` set). Each stage process loads the model itself, keeps only its
layers (embed on the first stage, norm and head on the last), owns those layers' KV cache and sends
its output straight to the next stage through a pipe; only the last stage answers the parent. An
exception in a stage comes back as that micro-batch's `error` and the stage keeps serving; a stage
that dies turns every micro-batch in flight, and every later one, into an error instead of a hang.
"""
from __future__ import annotations

import atexit
import collections
import multiprocessing
import os
import pickle
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Sequence

import torch

from .invariance import apply_row_tile, default_row_tile, invariance_holds
from .pipeline import MicroBatch, Part, StagePlan
from .stage_forward import stage_forward

_SHUTDOWN = b"shutdown"


class StageError(RuntimeError):
    """An exception from a stage process that could not cross the pipe as itself (its type and message)."""


class StageProcessError(RuntimeError):
    """A stage process is gone (crashed, killed, or the pipeline was closed)."""


@dataclass(frozen=True)
class StageSpec:
    """What a stage process needs to build itself: plain values, picklable for 'spawn'."""

    plan: StagePlan
    model: str
    num_slots: int
    ctx: int
    dtype: str  # "float32", "bfloat16", "float16"
    threads: int | None
    is_first: bool
    is_last: bool
    row_tile: int | None = None  # batch invariance: rows padded to a multiple of it (None: the model's default)


# -- the wire: numpy arrays in a plain pickle (torch's own reductions would go through shared memory) --
def _to_wire(t: torch.Tensor | None):
    if t is None:
        return None
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: ship the bits
        return ("bfloat16", t.view(torch.int16).numpy())
    return (None, t.numpy())


def _from_wire(w) -> torch.Tensor | None:
    if w is None:
        return None
    kind, array = w
    t = torch.from_numpy(array)
    return t.view(torch.bfloat16) if kind == "bfloat16" else t


def _part_to_wire(part: Part) -> tuple:
    return (_to_wire(part.tokens), _to_wire(part.positions), part.rows, part.want_logits, _to_wire(part.hidden))


def _portable(exc: BaseException, stage: int) -> BaseException:
    """The exception itself when it survives pickling with its type and message; else a StageError naming both."""
    try:
        clone = pickle.loads(pickle.dumps(exc))
        if type(clone) is type(exc) and str(clone) == str(exc):
            return exc
    except Exception:
        pass
    return StageError(f"stage {stage}: {type(exc).__name__}: {exc}")


# -- the stage process ----------------------------------------------------------------------------
def _build(spec: StageSpec):
    from .kv_cache import KVCache
    from ..model.weights import load_model

    dtype = getattr(torch, spec.dtype)
    device = spec.plan.device
    # Loaded in float32 then cast, exactly as build_torch + split_layers do, so the weights are bit-identical.
    model, config = load_model(spec.model, device="cpu", dtype=torch.float32)
    for i in range(config.num_layers):
        if i in spec.plan.layers:
            model.layers[i].to(device=device, dtype=dtype)
        else:
            model.layers[i] = torch.nn.Identity()  # another stage's layer: drop its weights
    if spec.is_first:
        model.embed_tokens.to(device=device, dtype=dtype)
    if spec.is_last:
        model.norm.to(device=device, dtype=dtype)
        model.lm_head.to(device=device, dtype=dtype)  # may share its weight with embed_tokens (tied)
    if not spec.is_first:
        model.embed_tokens = None
    if not spec.is_last:
        model.norm = model.lm_head = None
    row_tile = default_row_tile(config, device, dtype) if spec.row_tile is None else spec.row_tile
    apply_row_tile(model, row_tile)
    cache = KVCache(config, spec.num_slots, spec.ctx, dtype, device, layers=spec.plan.layers)
    return model, cache, row_tile


def _run_part(spec: StageSpec, model, cache, row_tile: int, wire: tuple) -> tuple:
    tokens_w, positions_w, rows, want_logits, hidden_w = wire
    part = Part(_from_wire(tokens_w), _from_wire(positions_w), rows, want_logits, _from_wire(hidden_w))
    stage_forward(model, spec.plan.layers, cache, part, spec.is_first, spec.is_last, row_tile, spec.plan.device)
    if spec.is_last:  # the parent needs the logits only
        return (_to_wire(part.logits),)
    return (tokens_w, positions_w, rows, want_logits, _to_wire(part.hidden))


def stage_main(spec: StageSpec, inbox, outbox, control) -> None:
    """A stage process's body: build, say ready (or why not), then serve micro-batches until shutdown/EOF."""
    try:
        if spec.threads:
            torch.set_num_threads(spec.threads)
        model, cache, row_tile = _build(spec)
        invariant = invariance_holds(model.config, spec.plan.device, getattr(torch, spec.dtype), row_tile, spec.threads)
    except BaseException as exc:
        control.send(("failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        return
    control.send(("ready", (os.getpid(), invariant)))
    with torch.inference_mode():
        while True:
            try:
                data = inbox.recv_bytes()
            except (EOFError, OSError):  # the previous stage or the parent is gone
                return
            if data == _SHUTDOWN:
                try:
                    outbox.send_bytes(_SHUTDOWN)
                except (BrokenPipeError, OSError):
                    pass
                return
            seq, parts, error, stage_ms = pickle.loads(data)
            t0 = time.perf_counter()
            if error is None:
                try:
                    parts = [_run_part(spec, model, cache, row_tile, part) for part in parts]
                except BaseException as exc:  # one micro-batch fails, the stage keeps serving
                    error = _portable(exc, spec.plan.index)
            stage_ms.append((time.perf_counter() - t0) * 1000.0)
            try:
                outbox.send_bytes(pickle.dumps((seq, parts, error, stage_ms), protocol=pickle.HIGHEST_PROTOCOL))
            except (BrokenPipeError, OSError):
                return


# -- the parent's side ----------------------------------------------------------------------------
class ProcessPipeline:
    """Stage processes joined by pipes; `submit` feeds stage 0, `get` returns finished micro-batches in order."""

    def __init__(self, model: str, stages: Sequence[StagePlan], num_slots: int, ctx: int, dtype: torch.dtype,
                 threads: int | None = None, start_method: str = "forkserver", startup_timeout_s: float = 300.0,
                 row_tile: int | None = None):
        self.stages = list(stages)
        if not self.stages:
            raise ValueError("a pipeline needs at least one stage")
        self.row_tile = row_tile  # None: each stage takes its model's default (runtime/invariance.py)
        self.threads = threads
        self.batch_invariant = True  # until a stage's own probe says otherwise (_await_ready)
        if start_method not in ("forkserver", "spawn"):  # fork after torch made its threads is unsafe
            raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {start_method!r}")
        mp = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            # The server imports torch once and forks each stage from there (fast starts); without
            # '__main__' in the list it never re-runs the caller's script, guarded or not.
            mp.set_forkserver_preload([__name__])
        dtype_name = str(dtype).replace("torch.", "")
        links = [mp.Pipe(duplex=False) for _ in range(len(self.stages) + 1)]  # (read end, write end)
        control_read, control_write = mp.Pipe(duplex=False)
        self._procs = []
        self._closed = False
        self._broken: str | None = None
        self._pending: collections.deque[tuple[int, MicroBatch]] = collections.deque()
        self._seq = 0
        self.in_flight = 0
        self._to_first, self._from_last = links[0][1], links[-1][0]
        atexit.register(self.close)
        try:
            for i, plan in enumerate(self.stages):
                spec = StageSpec(plan, str(model), num_slots, ctx, dtype_name, threads, i == 0, i == len(self.stages) - 1,
                                 self.row_tile)
                proc = mp.Process(target=stage_main, args=(spec, links[i][0], links[i + 1][1], control_write),
                                  name=f"strata-stage-{i}", daemon=True)
                proc.start()
                self._procs.append(proc)
            # Only the stages hold the inner ends now: a dead stage shows up as EOF downstream, not a hang.
            for i in range(len(self.stages)):
                links[i][0].close()
                links[i + 1][1].close()
            control_write.close()
            self._await_ready(control_read, startup_timeout_s)
        except BaseException:
            self.close()
            raise
        finally:
            control_read.close()
        # Sends go through a thread so a long run of submits never blocks on a full pipe while the
        # results the parent has not read yet fill the pipe back (a deadlock across the ring).
        self._outgoing: queue.SimpleQueue = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_loop, name="strata-stage-sender", daemon=True)
        self._sender.start()

    def _await_ready(self, control, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        ready = 0
        while ready < len(self._procs):
            if control.poll(0.1):
                try:
                    status, detail = control.recv()
                except EOFError:
                    raise StageProcessError("a stage process exited while starting") from None
                if status != "ready":
                    raise StageProcessError(f"a stage process failed to start: {detail}")
                self.batch_invariant = self.batch_invariant and detail[1]
                ready += 1
                continue
            dead = [p for p in self._procs if p.exitcode is not None]
            if dead:
                raise StageProcessError(f"stage process {dead[0].name} exited with code {dead[0].exitcode} while starting")
            if time.monotonic() > deadline:
                raise StageProcessError(f"stage processes not ready after {timeout_s:.0f} s")

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def _send_loop(self) -> None:
        while True:
            data = self._outgoing.get()
            if data is None:
                return
            try:
                self._to_first.send_bytes(data)
            except (BrokenPipeError, OSError):
                return  # get() sees the EOF from the last stage and fails what is in flight

    def submit(self, mb: MicroBatch) -> None:
        self.in_flight += 1
        seq, self._seq = self._seq, self._seq + 1
        self._pending.append((seq, mb))
        if self._broken is None:
            wire = [_part_to_wire(part) for part in mb.parts]
            # an error set before submit stays on the parent's object; the stages only learn to skip it
            failed = True if mb.error is not None else None
            self._outgoing.put(pickle.dumps((seq, wire, failed, []), protocol=pickle.HIGHEST_PROTOCOL))

    def get(self) -> MicroBatch:
        if not self._pending:
            raise RuntimeError("get() with no micro-batch in flight")
        seq, mb = self._pending.popleft()
        self.in_flight -= 1
        if self._broken is None:
            try:
                data = self._from_last.recv_bytes()
                if data == _SHUTDOWN:
                    raise EOFError
                got, parts, error, stage_ms = pickle.loads(data)
            except (EOFError, OSError):
                self._broken = self._death_note()
            else:
                if got != seq:  # cannot happen with FIFO stages; say so loudly if it ever does
                    raise RuntimeError(f"stage results out of order: expected micro-batch {seq}, got {got}")
                mb.stage_ms = stage_ms
                if error is not None:
                    mb.error = mb.error if error is True else error
                else:
                    for part, (logits,) in zip(mb.parts, parts):
                        part.hidden, part.logits = None, _from_wire(logits)
                return mb
        mb.error = mb.error or StageProcessError(self._broken)
        return mb

    def _death_note(self) -> str:
        deadline = time.monotonic() + 2.0  # the pipe closes a moment before the dead stage can be reaped
        while not any(p.exitcode is not None for p in self._procs) and time.monotonic() < deadline:
            time.sleep(0.02)
        codes = ", ".join(f"{p.name} exit code {p.exitcode}" for p in self._procs if p.exitcode is not None)
        return f"a stage process is gone ({codes or 'closed its pipe'})"

    def drain(self) -> list[MicroBatch]:
        return [self.get() for _ in range(self.in_flight)]

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop every stage (a shutdown message walks the chain), then terminate stragglers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        sender = getattr(self, "_sender", None)
        if sender is not None:
            self._outgoing.put(_SHUTDOWN)
            self._outgoing.put(None)
            sender.join(timeout_s)
        deadline = time.monotonic() + timeout_s
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(1.0)
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
        for conn in (self._to_first, self._from_last):
            conn.close()
        self._broken = self._broken or "the pipeline is closed"
