"""Whether a server runs A and B at the same time, from facts, never from how fast tokens arrive.

Evidence, in the order it is trusted:
- **the engine's own counters**, polled while A and B are both open: `GET /metrics` requests running and
  waiting (Strata's `strata_requests_running` / `strata_queue_length`, vLLM's `vllm:num_requests_running` /
  `vllm:num_requests_waiting`, SGLang's `sglang:num_running_reqs` / `sglang:num_queue_reqs`, llama-server's
  `llamacpp:requests_processing` / `llamacpp:requests_deferred` with `--metrics`), else llama-server's
  `GET /slots` (slots with `is_processing`: running only). Two running while both streams are open proves
  the server batches them, whatever the client saw;
- **the client's proof**: both streams received tokens while both were open (it batches them), or one
  stream ended (finished, not failed) before the other, sent before that end, had its first token.

"One at a time" is concluded only from the counters saying one request running and one waiting,
continuously for `serial_window` seconds while the running stream made progress
(`SERIAL_PROGRESS_TOKENS`: the engine kept stepping and kept the other waiting), and never after two were
seen running; or from the client's proof, when the ended stream's last token came before the other's first
and it had received `CLIENT_PROOF_TOKENS` after the other was sent (timing alone: the gate waits long). How many tokens one stream got before the other's first is never enough: a
starved HTTP front end delivers one stream in bursts. A failed request is the caller's GateError, with its
error; it is never evidence.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable

import httpx

from strata_verify.client import Completion

SERIAL_WINDOW_S = 10.0  # counters must say "one running, one waiting" this long before the gate believes it
SERIAL_PROGRESS_TOKENS = 64  # ... while the running stream received at least this many tokens
CLIENT_PROOF_TOKENS = 1024  # a stream that ended before the other began must have had this many after its send
POLL_S = 0.25

# family name -> (running metric names, waiting metric names) on GET /metrics
COUNTERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "strata": (("strata_requests_running",), ("strata_queue_length",)),
    "vllm": (("vllm:num_requests_running",), ("vllm:num_requests_waiting",)),
    "sglang": (("sglang:num_running_reqs",), ("sglang:num_queue_reqs",)),
    "llama.cpp": (("llamacpp:requests_processing",), ("llamacpp:requests_deferred",)),
}
ALL_RUNNING = tuple(n for names, _ in COUNTERS.values() for n in names)
ALL_WAITING = tuple(n for _, names in COUNTERS.values() for n in names)
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")

Getter = Callable[[str], "tuple[int, str]"]  # path -> (HTTP status, body); tests pass their own


def metric_sum(text: str, names: tuple[str, ...]) -> float | None:
    """The sum of every sample of the first of `names` present in a Prometheus text body (None: absent)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) in names:
            try:
                found[m.group(1)] = found.get(m.group(1), 0.0) + float(m.group(3))
            except ValueError:
                continue
    for name in names:
        if name in found:
            return found[name]
    return None


@dataclass(frozen=True)
class Counts:
    running: int
    waiting: int | None  # None: the source says nothing about waiting requests (llama-server's /slots)
    at: float


class CounterReader:
    """Reads a server's running / waiting counts; `source` says from where once one read succeeded."""

    def __init__(self, url: str, family_name: str, get: Getter | None = None, timeout: float = 2.0):
        self.url, self.family_name, self.timeout = url.rstrip("/"), family_name, timeout
        self._get = get or self._http_get
        self.source: str | None = None
        self.available = True  # False once the server showed it has no counter we know
        self._tried = False

    def _http_get(self, path: str) -> tuple[int, str]:
        resp = httpx.get(f"{self.url}{path}", timeout=self.timeout)
        return resp.status_code, resp.text

    def read(self) -> Counts | None:
        if not self.available:
            return None
        first, self._tried = not self._tried, True
        try:
            counts = self._metrics() or self._slots()
        except (httpx.HTTPError, OSError, ValueError):
            counts = None  # a timeout under load is no answer, not a "no"
            if first:
                self.available = False
        if counts is None and first:
            self.available = False
        return counts

    def _metrics(self) -> Counts | None:
        status, body = self._get("/metrics")
        if status != 200:
            return None
        running_names, waiting_names = COUNTERS.get(self.family_name, (ALL_RUNNING, ALL_WAITING))
        running = metric_sum(body, running_names)
        if running is None:
            return None
        waiting = metric_sum(body, waiting_names)
        self.source = f"GET /metrics {'/'.join(running_names)}" + (
            f", {'/'.join(waiting_names)}" if waiting is not None else ""
        )
        return Counts(int(running), None if waiting is None else int(waiting), time.perf_counter())

    def _slots(self) -> Counts | None:
        if self.family_name != "llama.cpp":
            return None
        import json

        status, body = self._get("/slots")
        if status != 200:
            return None
        slots = json.loads(body)
        if not isinstance(slots, list):
            return None
        self.source = "GET /slots is_processing"
        busy = sum(1 for s in slots if isinstance(s, dict) and (s.get("is_processing") or s.get("state") == 1))
        return Counts(busy, None, time.perf_counter())


def _open(c: Completion) -> bool:
    return c.sent_at is not None and c.ended_by is None and c.error is None


def _tokens_after(c: Completion, t: float) -> int:
    return sum(1 for x in list(c.times) if x >= t)


@dataclass
class ConcurrencyWatch:
    """Fed A's and B's results while the gate waits for both first tokens; `observe` returns a reason once one
    request at a time is proved, else None. `evidence` says which evidence the verdict used."""

    reader: CounterReader | None
    rel: Callable[[float | None], str]
    serial_window: float = SERIAL_WINDOW_S
    concurrent: str | None = None  # how two at once was shown, once it was
    samples: int = 0
    unanswered: int = 0
    _serial_since: float | None = None
    _serial_samples: int = 0
    _progress_from: int = 0
    _next_poll: float = 0.0
    notes: list[str] = field(default_factory=list)

    def observe(self, a: Completion, b: Completion, now: float | None = None) -> str | None:
        now = time.perf_counter() if now is None else now
        both_open = _open(a) and _open(b)
        if both_open and a.times and b.times and self.concurrent is None:
            self.concurrent = (
                f"the client's clock: A and B both received tokens while both were open "
                f"(A first {self.rel(a.first_token_at)}, B first {self.rel(b.first_token_at)})"
            )
        proof = self._client_proof(a, b) or self._client_proof(b, a)
        if proof and self.concurrent is None:
            return proof
        if self.reader is not None and now >= self._next_poll:
            self._next_poll = now + POLL_S
            counts = self.reader.read()
            if counts is None:
                self.unanswered += self.reader.available
            elif both_open:  # A and B have both left the client and neither ended: they are the requests counted
                return self._counted(Counts(counts.running, counts.waiting, now), a, b)
        return None

    def _counted(self, counts: Counts, a: Completion, b: Completion) -> str | None:
        self.samples += 1
        src = self.reader.source
        if counts.running >= 2:
            if self.concurrent is None or self.concurrent.startswith("the client's"):
                self.concurrent = f"the engine's counters ({src}): {counts.running} running at {self.rel(counts.at)} while A and B were both open"
            self._serial_since = None
            return None
        if counts.running >= 1 and counts.waiting is not None and counts.waiting >= 1:
            streaming = a if len(a.times) >= len(b.times) else b
            if self._serial_since is None:
                self._serial_since, self._serial_samples, self._progress_from = counts.at, 0, len(streaming.times)
            self._serial_samples += 1
            span, progress = counts.at - self._serial_since, len(streaming.times) - self._progress_from
            if (
                self.concurrent is None
                and span >= self.serial_window
                and self._serial_samples >= 4
                and progress >= SERIAL_PROGRESS_TOKENS
            ):
                other = b if streaming is a else a
                return (
                    f"the engine's counters ({src}) said {counts.running} running and {counts.waiting} waiting in "
                    f"every one of {self._serial_samples} reads over {span:.1f} s while {streaming.name} received "
                    f"{progress} tokens and {other.name} waited: the server runs one request at a time"
                )
            return None
        self._serial_since = None  # nothing waits inside the engine: the other request has not reached it yet
        return None

    @staticmethod
    def _client_proof(first: Completion, second: Completion) -> str | None:
        """`first` finished (not failed, not cancelled) and its last token came before `second`, sent before it,
        had any token."""
        if first.finish_reason is None or first.error or first.cancelled or not first.times or second.sent_at is None:
            return None
        last = first.times[-1]
        if second.sent_at >= last or (second.times and second.times[0] <= last):
            return None
        if first.ended_by is None and not second.times:
            return None  # its end is not in yet; judged once it is, or once the other's first token came
        after = _tokens_after(first, second.sent_at)
        if after < CLIENT_PROOF_TOKENS:
            return None
        return (
            f"the client's clock: {first.name} ended ({first.finish_reason}, {len(first.times)} tokens, {after} of "
            f"them after {second.name} was sent) before {second.name} had a token: the server runs one request "
            "at a time"
        )

    def describe(self) -> list[str]:
        """The evidence lines for the report."""
        lines = [f"concurrency shown by {self.concurrent}" if self.concurrent else "concurrency: not shown"]
        if self.reader is None:
            lines.append("engine counters: not read")
        elif self.reader.source:
            lines.append(
                f"engine counters: {self.reader.source}, {self.samples} reads while A and B were both open"
                + (f", {self.unanswered} unanswered" if self.unanswered else "")
            )
        else:
            lines.append(
                "engine counters: none (no GET /metrics running count, no /slots): judged on the client's clock"
            )
        return lines + self.notes
