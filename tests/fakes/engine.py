"""The in-process fake engine: a stand-in for `strata_engine.engine.Engine` with exactly its public API.

Contract: it lets the real HTTP server (strata_engine.server) be tested without a model: a byte tokenizer
(fakes.byte_model), `batch` slots served by one
background thread, FIFO admission, a deterministic "model" (the next byte depends only on the
context, so greedy output is the same solo or interleaved), seeded sampling, stop strings, EOS,
logprobs, cancellation, and ADMIT/FINISH/BSTOP events. Prompts that contain `__crash__` make
`submit` raise; prompts that contain `__boom__` finish with finish_reason "error"; prompts that
contain `__eos__` sample EOS after three tokens.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from strata_engine.events import EngineEvent, EventLog
from strata_engine.finish import finish_reason
from strata_engine.outputs import Completion, Finished, TokenOutput
from strata_engine import RequestError, SamplingParams

from .byte_model import ALPHABET, EOS, ByteTokenizer
from .byte_model import scores as model_scores


@dataclass
class _Job:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    on_output: Callable | None
    out: list[TokenOutput] = field(default_factory=list)
    cancelled: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    completion: Completion | None = None
    rng: random.Random | None = None
    decoded: bytes = b""
    emitted: int = 0  # characters of the text already delivered


class FakeHandle:
    def __init__(self, engine: "FakeEngine", job: _Job):
        self._engine, self._job = engine, job
        self.request_id = job.request_id
        self.prompt_tokens = len(job.prompt_ids)

    def cancel(self) -> None:
        self._engine._cancel(self._job)

    def result(self, timeout: float | None = None) -> Completion:
        if not self._job.done.wait(timeout):
            raise TimeoutError(f"request {self.request_id} not finished after {timeout}s")
        return self._job.completion

    def __iter__(self):
        self.result()
        return iter(self._job.out)


class FakeEngine:
    def __init__(self, batch: int = 4, ctx: int = 512, step_s: float = 0.002, model_name: str = "fake-tiny"):
        self.model_name, self.ctx, self.batch, self.step_s = model_name, ctx, batch, step_s
        self.tokenizer = ByteTokenizer()
        self.events = EventLog()
        self._lock = threading.Condition()
        self._waiting: deque[_Job] = deque()
        self._slots: list[_Job | None] = [None] * batch
        self._stop = False
        self._thread: threading.Thread | None = None
        self._ids = itertools.count()

    # lifecycle -------------------------------------------------------------------------------
    def start(self) -> "FakeEngine":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="fake-engine", daemon=True)
            self._thread.start()
        return self

    def shutdown(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.shutdown()

    def info(self) -> dict:
        return {
            "model": self.model_name,
            "executor": "fake",
            "batch": self.batch,
            "batch_groups": 1,
            "num_stages": 1,
            "prefill_chunk": 64,
            "ctx": self.ctx,
            "piped_read_piece": 0,
            "vocab_size": self.tokenizer.vocab_size,
            "eos_token_id": EOS,
        }

    def stats(self) -> dict:
        with self._lock:
            busy = sum(j is not None for j in self._slots)
            return {
                "slots_total": self.batch,
                "slots_busy": busy,
                "queue_len": len(self._waiting),
                "requests_running": busy,
            }

    # requests --------------------------------------------------------------------------------
    def submit(self, prompt, params: SamplingParams, request_id: str | None = None, on_output=None) -> FakeHandle:
        if isinstance(prompt, str):
            if "__crash__" in prompt:
                raise RuntimeError("fake engine crashed on purpose")
            ids = self.tokenizer.encode(prompt)
        else:
            ids = list(prompt)
        if not ids:
            raise RequestError("prompt is empty", "prompt")
        if len(ids) >= self.ctx:
            raise RequestError(f"prompt has {len(ids)} tokens; the context holds {self.ctx}", "prompt")
        bad = next((t for t in ids if not 0 <= t < self.tokenizer.vocab_size), None)
        if bad is not None:
            raise RequestError(f"token id {bad} is outside the vocabulary [0, {self.tokenizer.vocab_size})", "prompt")
        job = _Job(request_id or uuid.uuid4().hex, ids, params, on_output)
        job.rng = random.Random(params.seed if params.seed is not None else next(self._ids))
        with self._lock:
            self._waiting.append(job)
            self._lock.notify_all()
        return FakeHandle(self, job)

    def generate(self, prompt, params: SamplingParams | None = None, **kw) -> Completion:
        return self.submit(prompt, params or SamplingParams(**kw)).result()

    def _cancel(self, job: _Job) -> None:
        with self._lock:
            job.cancelled = True
            if job in self._waiting:
                self._waiting.remove(job)
                self._finish(job, "cancelled")

    # engine thread ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._stop and not self._waiting and not any(self._slots):
                    self._lock.wait(0.1)
                if self._stop:
                    return
                for slot, job in enumerate(self._slots):
                    if job is None and self._waiting:
                        job = self._waiting.popleft()
                        self._slots[slot] = job
                        self.events.emit(
                            EngineEvent(
                                "ADMIT", time.monotonic(), slot, job.request_id, {"prompt_tokens": len(job.prompt_ids)}
                            )
                        )
                live = [(s, j) for s, j in enumerate(self._slots) if j is not None]
            time.sleep(self.step_s)
            for slot, job in live:
                reason = self._step(job)
                if reason is not None:
                    with self._lock:
                        self._slots[slot] = None
                        if reason == "cancelled":
                            self.events.emit(EngineEvent("BSTOP", time.monotonic(), slot, job.request_id, {}))
                        self._finish(job, reason, slot)

    def _step(self, job: _Job) -> str | None:
        if job.cancelled:
            return "cancelled"
        text = self.tokenizer.decode(job.prompt_ids)
        if "__boom__" in text:
            return "error"
        context = job.prompt_ids + [o.token_id for o in job.out]
        scores = model_scores(context)
        p = job.params
        if p.greedy:
            choice = max(range(len(scores)), key=lambda i: scores[i])
        else:
            weights = [math.exp(s / p.temperature) for s in scores]
            choice = job.rng.choices(range(len(scores)), weights)[0]
        token = EOS if choice == len(ALPHABET) else ALPHABET[choice]
        if "__eos__" in text and len(job.out) == 3:
            token = EOS  # a way for tests to end a generation by EOS
        if p.ignore_eos and token == EOS:
            token = ALPHABET[0]
        norm = math.log(sum(math.exp(s) for s in scores))
        logprob = top = None
        if p.logprobs is not None:
            ids = [*ALPHABET, EOS]
            logprob = scores[ids.index(token)] - norm
            best = sorted(range(len(scores)), key=lambda i: -scores[i])[: p.logprobs]
            top = [(ids[i], self.tokenizer.decode([ids[i]]), scores[i] - norm) for i in best]
        if token == EOS:
            return "stop"  # as in the real engine, EOS is not an output token
        job.decoded += bytes([token])
        text = job.decoded.decode()
        stop_at = min((i for s in p.stop if (i := text.find(s)) >= 0), default=None)
        if stop_at is not None:
            text = text[:stop_at]
        reason = (
            "stop"
            if stop_at is not None
            else finish_reason(
                token,
                tokens_generated=len(job.out) + 1,
                prompt_tokens=len(job.prompt_ids),
                max_tokens=p.max_tokens,
                ctx=self.ctx,
                eos_token_id=None,
            )
        )
        hold = 0 if reason else max((len(s) - 1 for s in p.stop), default=0)  # a stop string may be starting
        upto = max(job.emitted, len(text) - hold)
        delta = text[job.emitted : upto]
        job.emitted = upto
        out = TokenOutput(len(job.out), token, delta, logprob, top, time.monotonic(), reason)
        job.out.append(out)
        if job.on_output:
            job.on_output(out)
        return reason

    def _finish(self, job: _Job, reason: str, slot: int | None = None) -> None:
        ids = [o.token_id for o in job.out]
        text = self.tokenizer.decode(ids)
        for s in job.params.stop:
            if s in text:
                text = text[: text.index(s)]
        job.completion = Completion(
            job.request_id,
            job.prompt_ids,
            ids,
            text,
            list(job.out) if job.params.logprobs is not None else None,
            reason,
            "fake failure" if reason == "error" else None,
        )
        self.events.emit(
            EngineEvent("FINISH", time.monotonic(), slot, job.request_id, {"reason": reason, "tokens": len(ids)})
        )
        job.done.set()
        if job.on_output:
            job.on_output(Finished(job.completion, text[job.emitted :]))
