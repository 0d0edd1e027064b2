"""The simulated executor: the Executor protocol over a cost model instead of a model (no torch).

Contract: every call advances modelled time by what a `CostProfile` says the work costs on a
pipeline of `num_stages` stages, sleeps that time / `time_scale` on the injected clock and sleep
(a fake clock in tests: zero wall time), and delivers each token through `on_token` at its modelled
arrival; its read and mixed runs are `scheduler/run_loop.py`'s loops over `_ModelRun`. Tokens depend
only on (prompt ids, output index, seed, the request's sampling: draws.py), so a request gets the same
tokens solo or interleaved. It also checks the scheduler's use of the protocol (KV positions, slots) and
raises ValueError on a misuse, so scheduler bugs surface in tests.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
from array import array
from typing import Callable, Sequence

from ...scheduler.protocol import DecodeResult, MixedResult, OnToken, RunResult
from ...tokens import SampledToken
from ...scheduler.run_loop import DecodeSpec, RunSpec, mixed_run, read_run
from ...scheduler.request import Phase, Request
from .draws import sim_token
from .prefixes import SimPrefixCopies
from .profile import CostProfile, load_profile

__all__ = ["SimExecutor", "CostProfile", "load_profile"]


class SimExecutor(SimPrefixCopies):
    def __init__(
        self,
        profile: CostProfile,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        time_scale: float = 1.0,
        vocab_size: int = 32000,
        eos_token_id: int | None = None,
        seed: int = 0,
        num_stages: int | None = None,
        eos_probability: float = 0.0,
    ):
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
        if not 0.0 <= eos_probability <= 1.0:
            raise ValueError(f"eos_probability must be in [0, 1], got {eos_probability}")
        if eos_probability > 0 and eos_token_id is None:
            raise ValueError("eos_probability > 0 needs an eos_token_id")
        self.profile = profile
        self.num_stages = num_stages or profile.num_stages
        self.clock, self.sleep, self.time_scale = clock, sleep, time_scale
        self.vocab_size, self.eos_token_id, self.seed = vocab_size, eos_token_id, seed
        self.eos_probability = eos_probability
        self._kv: dict[int, int] = {}  # prepared slot -> tokens in its KV cache
        self._held: dict[int, int] = {}  # freed slot -> tokens its KV still holds (the prompt cache's to keep)
        self._stored: dict[int, int] = {}  # host store key -> tokens copied there
        self._digests: dict[str, bytes] = {}
        self._cursor = float("-inf")  # wall time the last call's modelled work ends
        self._t0 = 0.0
        self._seq = itertools.count()
        self._read_interval_ms: float | None = None  # between chunk completions in the last read run (pause target)

    # -- slots --------------------------------------------------------------------------------------
    def prepare_slot(self, slot: int, keep_tokens: int = 0) -> None:
        held = self._held.pop(slot, 0)
        if not 0 <= keep_tokens <= held:
            raise ValueError(f"prepare_slot({slot}, keep_tokens={keep_tokens}): the slot holds {held} tokens")
        self._kv[slot] = keep_tokens

    def free_slot(self, slot: int) -> None:
        self._held[slot] = self._kv.pop(slot, 0)

    # -- tokens -------------------------------------------------------------------------------------
    def token_for(self, request: Request, index: int) -> SampledToken:
        """The request's output token at `index`: a function of its prompt, the index, the engine's seed and
        the request's sampling (draws.py)."""
        digest = self._digests.get(request.request_id)
        if digest is None:
            digest = hashlib.blake2b(array("q", request.prompt_ids).tobytes(), digest_size=16).digest()
            self._digests[request.request_id] = digest
        p = request.params
        if p is None or p.greedy:
            return sim_token(
                digest, index, self.seed, self.vocab_size, self.eos_token_id, self.eos_probability, request.logprobs
            )
        return sim_token(
            digest,
            index,
            self.seed,
            self.vocab_size,
            self.eos_token_id,
            self.eos_probability,
            request.logprobs,
            p.temperature,
            p.top_p,
            p.top_k,
            request.seed,
        )

    # -- time ---------------------------------------------------------------------------------------
    def _begin(self) -> None:
        self._t0 = max(self._cursor, self.clock())

    def _wait_until(self, model_ms: float) -> None:
        delay = self._t0 + model_ms / 1000.0 / self.time_scale - self.clock()
        if delay > 0:
            self.sleep(delay)

    def _end(self, model_ms: float) -> None:
        self._cursor = self._t0 + model_ms / 1000.0 / self.time_scale

    # -- protocol checks ----------------------------------------------------------------------------
    def _check_read(self, request: Request, chunks: Sequence[tuple[int, int]]) -> None:
        rid = request.request_id
        if not chunks:
            raise ValueError(f"read of {rid}: no chunks")
        if request.slot not in self._kv:
            raise ValueError(f"read of {rid}: slot {request.slot} was not prepared")
        position = self._kv[request.slot]
        if chunks[0][0] != position or position != request.tokens_read:
            raise ValueError(
                f"read of {rid}: starts at {chunks[0][0]}, but the slot holds {position} tokens and tokens_read is {request.tokens_read}"
            )
        for (start, end), nxt in zip(chunks, list(chunks[1:]) + [None]):
            if not start < end or (nxt is not None and nxt[0] != end):
                raise ValueError(f"read of {rid}: chunks must be non-empty and contiguous, got {list(chunks)}")
        if chunks[-1][1] > request.prompt_tokens:
            raise ValueError(
                f"read of {rid}: chunk ends at {chunks[-1][1]} past the prompt's {request.prompt_tokens} tokens"
            )

    def _check_decode(self, request: Request) -> None:
        held = self._kv.get(request.slot)
        if held != request.context_tokens or not request.output_ids:
            raise ValueError(
                f"decode of {request.request_id}: slot {request.slot} holds {held} tokens, the request expects "
                f"{request.context_tokens} with {request.tokens_generated} generated"
            )

    # -- pipeline -----------------------------------------------------------------------------------
    def _through(self, stage_free: list[float], start: float, stage_ms: float) -> float:
        """Send one micro-batch through every stage; returns when it leaves the last one."""
        t = start
        for s in range(self.num_stages):
            t = max(t, stage_free[s]) + stage_ms
            stage_free[s] = t
        return t

    def _deliver_until(self, inflight: list, until: float, on_token: OnToken) -> int:
        """Tokens of micro-batches that left the pipeline by `until`, in time order, each at its time."""
        delivered = 0
        while inflight and inflight[0][0] <= until:
            done, _, requests = heapq.heappop(inflight)
            self._wait_until(done)
            for request in requests:
                self._kv[request.slot] += 1
                if request.phase is Phase.DECODING:
                    on_token(request, self.token_for(request, request.tokens_generated))
                    delivered += 1
        return delivered

    # -- the protocol -------------------------------------------------------------------------------
    def read(self, request: Request, run: RunSpec, on_token: OnToken) -> RunResult:
        """One run (`run_loop.read_run`): the chunks go in at stage 0's pace; a decision before a chunk sees
        only the completions modelled by then (what a real executor knows: it sees only finished chunks)."""
        self._check_read(request, run.chunks)
        self._begin()
        stages = _ModelRun(self, on_token)
        ran = read_run(stages, run, self._read_interval_ms)
        self._read_interval_ms = ran.interval_ms
        done = stages.done_ms
        self._wait_until(done)
        self._kv[request.slot] = ran.chunks[-1][1]
        first = self._first_token(request, ran.chunks, on_token)
        self._end(done)
        return RunResult(done, len(ran.chunks), ran.chunks[-1][1] - ran.chunks[0][0], first)

    def _first_token(self, request: Request, chunks, on_token: OnToken) -> SampledToken | None:
        if chunks[-1][1] != request.prompt_tokens:
            return None
        token = self.token_for(request, 0)
        on_token(request, token)
        return token

    def decode(self, groups, on_token: OnToken, limits: DecodeSpec) -> DecodeResult:
        """Rounds of one micro-batch per group, pipelined; `limits.goes_on` is asked at each round's start
        (a budget > 0 always gets one full round; no limit at all: until should_stop), then it drains."""
        budget_ms, max_rounds = limits.budget_ms, limits.max_rounds
        live_groups = [[list(g), 0.0] for g in groups if g]  # [requests, when its last token is out]
        if (
            not live_groups
            or (budget_ms is not None and budget_ms <= 0)
            or (max_rounds is not None and max_rounds <= 0)
        ):
            return DecodeResult(0.0, 0, 0)
        self._begin()
        call_ms = self.profile.decode_call_ms
        stage_free = [call_ms] * self.num_stages
        for g in live_groups:
            g[1] = call_ms
        inflight: list = []
        rounds = tokens = 0
        end = call_ms
        while max_rounds is None or rounds < max_rounds:
            round_start = max(stage_free[0], live_groups[0][1])
            tokens += self._deliver_until(inflight, round_start, on_token)
            self._wait_until(round_start)
            if not limits.goes_on(rounds, round_start if rounds else 0.0):  # a budget > 0 gets one full round
                break
            issued = False
            for group in live_groups:
                start = max(stage_free[0], group[1])
                tokens += self._deliver_until(inflight, start, on_token)  # a token may finish its request
                live = [r for r in group[0] if r.phase is Phase.DECODING]
                if not live:
                    continue
                for request in live:
                    self._check_decode(request)
                done = self._through(stage_free, start, self.profile.decode_stage_ms([r.context_tokens for r in live]))
                group[1] = done
                end = max(end, done)
                heapq.heappush(inflight, (done, next(self._seq), live))
                issued = True
            if not issued:
                break
            rounds += 1
        tokens += self._deliver_until(inflight, math.inf, on_token)
        self._wait_until(end)
        self._end(end)
        return DecodeResult(end if rounds else 0.0, rounds, tokens)

    def mixed(self, request: Request, run: RunSpec, groups, on_token: OnToken) -> MixedResult:
        """The mixed read (`run_loop.mixed_run`): micro-batch i carries chunk i plus the decode tokens of the
        group whose turn it is, so the streams advance while the prompt is read; should_stop as in read."""
        self._check_read(request, run.chunks)
        self._begin()
        stages = _ModelRun(self, on_token, mixed=True)
        ran = mixed_run(stages, run, [list(g) for g in groups if g], _decoding, self._read_interval_ms)
        done = stages.done_ms
        self._wait_until(done)
        self._kv[request.slot] = ran.chunks[-1][1]
        first = self._first_token(request, ran.chunks, on_token)
        decode_tokens = stages.decode_tokens + self._deliver_until(stages.riders, math.inf, on_token)
        self._end(done)
        read = ran.chunks[-1][1] - ran.chunks[0][0]
        return MixedResult(done, len(ran.chunks), read, decode_tokens, tuple(stages.chunk_ms), first)


def _decoding(group: Sequence[Request]) -> list[Request]:
    return [r for r in group if r.phase is Phase.DECODING]


class _ModelRun:
    """`run_loop.Stages` on the cost model: a micro-batch goes in when stage 0 is free, its completion is
    modelled then; a mixed run's decode tokens are delivered, each at its time, before the next goes in."""

    fill = 1  # a mixed run asks should_stop before every chunk after the first

    def __init__(self, sim: SimExecutor, on_token: OnToken, mixed: bool = False):
        self.sim, self.on_token, self.mixed = sim, on_token, mixed
        self.num_stages = sim.num_stages
        self.stage_free = [sim.profile.read_run_ms] * sim.num_stages
        self.done_ms = sim.profile.read_run_ms  # the last micro-batch's completion
        self.completions: list[float] = []
        self.collected = 0
        self.riders: list = []  # heap of (done, seq, decode rows): a mixed run's tokens to deliver
        self.chunk_ms: list[float] = []
        self.decode_tokens = 0

    @property
    def in_flight(self) -> int:
        return len(self.completions) - self.collected

    def ready(self, depth: int) -> bool:
        """Stage 0's pace, not `depth`, bounds what is in flight here (as the simulator always modelled it)."""
        issue = self.stage_free[0]
        if self.in_flight and self.completions[self.collected] <= issue:
            return False  # done by then: collect it first
        if self.mixed:
            self.decode_tokens += self.sim._deliver_until(self.riders, issue, self.on_token)
        return True

    def now_ms(self, wait: bool = False) -> float:
        if wait:
            self.sim._wait_until(self.stage_free[0])
        return self.stage_free[0]

    def issue(self, chunk: tuple[int, int], rows: Sequence[Request] = ()) -> None:
        (start, end), p, issue = chunk, self.sim.profile, self.stage_free[0]
        for row in rows:
            self.sim._check_decode(row)
        stage_ms = p.read_chunk_stage_ms(end - start, start)
        if self.mixed:
            stage_ms += p.mixed_decode_extra_ms([r.context_tokens for r in rows])
        self.done_ms = self.sim._through(self.stage_free, issue, stage_ms)
        self.completions.append(self.done_ms)
        if self.mixed:
            self.chunk_ms.append(self.done_ms - issue)
        if rows:
            heapq.heappush(self.riders, (self.done_ms, next(self.sim._seq), list(rows)))

    def complete(self) -> tuple[float, bool]:
        self.collected += 1
        return self.completions[self.collected - 1], True
