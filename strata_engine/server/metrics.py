"""Prometheus metrics of one server, in its own CollectorRegistry (never the process-global one, so
two apps in one process, as in tests, never share or collide).

Counters are fed by the HTTP layer (requests, tokens, finish reasons, disconnects, token gaps) and by
the engine's event log (read pieces, give-ways, every event kind, the prompt cache's tokens asked and
served and its evictions); slot use, queue length, the host store's bytes and the KV cache's shape are read from
`engine.stats()` at scrape time, so they are never stale.
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from ..scheduler.prompt_cache import MIB

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Decode pauses span 1 ms (a fast decode step) to tens of seconds (a long prompt read in one run).
PAUSE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

# engine.stats() key -> (metric name, help); other numeric keys become strata_engine_<key>.
STAT_GAUGES = {
    "slots_total": ("strata_slots_total", "decode slots (--batch)"),
    "slots_busy": ("strata_slots_busy", "slots holding a request (reading, parked or decoding)"),
    "queue_len": ("strata_queue_length", "requests waiting for a slot"),
    "requests_running": ("strata_requests_running", "requests in a slot"),
}


def prompt_cache_gauges(info: dict[str, Any]) -> Iterator[GaugeMetricFamily]:
    """The host store from engine.stats()['prompt_cache'] (what /v1/engine reports): bytes held and its cap."""
    store = bool(info.get("store"))
    yield GaugeMetricFamily(
        "strata_prompt_cache_store_bytes",
        "host store bytes in use (prefixes pushed out of slots)",
        value=info.get("store_bytes", 0),
    )
    yield GaugeMetricFamily(
        "strata_prompt_cache_store_capacity_bytes",
        "host store cap (--prompt-cache MiB; 0: no store)",
        value=info.get("mib", 0) * MIB if store else 0,
    )
    yield GaugeMetricFamily(
        "strata_prompt_cache_store_entries", "prefixes held in the host store", value=info.get("store_entries", 0)
    )


def kv_gauges(info: dict[str, Any]) -> Iterator[GaugeMetricFamily]:
    """The KV cache from engine.stats()['kv'] (what /v1/engine reports as `kv`), labelled by its format."""
    fmt = str(info.get("format", ""))
    for key, name, doc in (
        ("bytes_per_position", "strata_kv_bytes_per_position", "KV bytes of one position of one slot, every layer, scales included"),
        ("positions_per_slot", "strata_kv_positions_per_slot", "positions a slot may reach (--ctx)"),
        ("positions_held_per_slot", "strata_kv_positions_held_per_slot", "the most positions a slot holds at once (a sliding window's bound, else --ctx)"),
        ("positions_held_at_rest", "strata_kv_positions_held_at_rest", "the most positions a slot holds between forwards (a read chunk fewer)"),
        ("held_bytes_max", "strata_kv_held_bytes_max", "the most KV bytes every slot together holds at once"),
    ):  # fmt: skip
        gauge = GaugeMetricFamily(name, doc, labels=["format"])
        gauge.add_metric([fmt], info.get(key, 0) or 0)
        yield gauge


class EngineStatsCollector(Collector):
    """Gauges read from engine.stats() at each scrape."""

    def __init__(self, stats: Callable[[], dict[str, Any]]):
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            stats = self._stats()
        except Exception:  # an engine that is loading or gone has no stats; the scrape still works
            return
        if isinstance(stats.get("prompt_cache"), dict):
            yield from prompt_cache_gauges(stats["prompt_cache"])
        if isinstance(stats.get("kv"), dict):
            yield from kv_gauges(stats["kv"])
        for key, value in stats.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            name, doc = STAT_GAUGES.get(key, (f"strata_engine_{key}", f"engine.stats()['{key}']"))
            yield GaugeMetricFamily(name, doc, value=value)

    def describe(self) -> list:
        return []  # values are only known at scrape time


class LoopHistogram(Collector):
    """A histogram observed from one thread only (the event loop), so it needs no lock: a bisect and
    two additions per observation. Used for the per-token decode pause, the hottest metric."""

    def __init__(self, name: str, doc: str, buckets: tuple[float, ...]):
        self.name, self.doc, self.bounds = name, doc, tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        counts, total = list(self.counts), self.sum  # a consistent enough snapshot for a scrape
        cumulative, buckets = 0, []
        for bound, n in zip((*map(str, self.bounds), "+Inf"), counts):
            cumulative += n
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(self.name, self.doc, buckets=buckets, sum_value=total)

    def describe(self) -> list:
        return []


class ServerMetrics:
    def __init__(self, stats: Callable[[], dict[str, Any]]):
        self.registry = CollectorRegistry()
        r = self.registry
        self.http_requests = Counter(
            "strata_http_requests", "HTTP requests answered, by endpoint and status", ["endpoint", "status"], registry=r
        )
        self.requests = Counter(
            "strata_requests", "engine requests finished, by finish reason", ["finish_reason"], registry=r
        )
        self.prompt_tokens = Counter("strata_prompt_tokens", "prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter("strata_generation_tokens", "tokens generated (finished requests)", registry=r)
        self.disconnects = Counter(
            "strata_client_disconnects",
            "requests whose client went away before the end (engine request cancelled)",
            registry=r,
        )
        self.decode_pause = LoopHistogram(
            "strata_decode_pause_seconds", "gap between consecutive tokens of one stream (engine clock)", PAUSE_BUCKETS
        )
        r.register(self.decode_pause)
        self.ttft = Histogram(
            "strata_time_to_first_token_seconds", "submit to first token, per request", buckets=TTFT_BUCKETS, registry=r
        )
        self.events = Counter("strata_engine_events", "engine events by kind", ["kind"], registry=r)
        self.read_pieces = Counter("strata_read_pieces", "prompt read pieces (PIECE events)", registry=r)
        self.give_ways = Counter(
            "strata_give_ways", "give-ways: a short request took over a read (YIELDED)", registry=r
        )
        # The prompt cache, in tokens as vLLM's prefix_cache_queries/hits: hit rate = hits / queries.
        self.cache_queries = Counter(
            "strata_prompt_cache_queries", "prompt tokens of admitted requests, cache on or off (ADMIT)", registry=r
        )
        self.cache_hits = Counter(
            "strata_prompt_cache_hits",
            "prompt tokens kept from the prompt cache instead of read, by source: slot or store (CACHE_HIT)",
            ["source"],
            registry=r,
        )
        self.cache_evictions = Counter(
            "strata_prompt_cache_evictions",
            "prefixes pushed out of a slot (outcome: store "
            "or dropped) or of the host store (outcome: the reason) (CACHE_EVICT)",
            ["source", "outcome"],
            registry=r,
        )
        self.cache_evicted_tokens = Counter(
            "strata_prompt_cache_evicted_tokens",
            "tokens of the evicted prefixes, by source (CACHE_EVICT)",
            ["source"],
            registry=r,
        )
        for source in ("slot", "store"):  # present at 0 before the first hit or eviction
            self.cache_hits.labels(source)
            self.cache_evicted_tokens.labels(source)
        r.register(EngineStatsCollector(stats))

    # HTTP layer (event loop)
    def finished(self, finish_reason: str, prompt_tokens: int, generated: int) -> None:
        self.requests.labels(finish_reason).inc()
        self.prompt_tokens.inc(prompt_tokens)
        self.generation_tokens.inc(generated)

    def first_token(self, seconds: float) -> None:
        self.ttft.observe(max(0.0, seconds))

    def token_gap(self, seconds: float) -> None:
        self.decode_pause.observe(max(0.0, seconds))

    # engine thread (EventLog subscriber): counter increments only
    def on_event(self, event: Any) -> None:
        self.events.labels(event.kind).inc()
        if event.kind == "PIECE":
            self.read_pieces.inc()
        elif event.kind == "YIELDED":
            self.give_ways.inc()
        elif event.kind == "ADMIT":
            self.cache_queries.inc(event.fields.get("prompt_tokens", 0))
        elif event.kind == "CACHE_HIT":
            self.cache_hits.labels(str(event.fields.get("source"))).inc(event.fields.get("tokens", 0))
        elif event.kind == "CACHE_EVICT":
            fields = event.fields
            source = str(fields.get("source"))
            self.cache_evictions.labels(source, str(fields.get("to") or fields.get("reason"))).inc()
            self.cache_evicted_tokens.labels(source).inc(fields.get("tokens", 0))

    def render(self) -> bytes:
        return generate_latest(self.registry)
