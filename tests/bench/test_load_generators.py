"""Load generators: seeded arrivals, a closed loop never above its concurrency, count and duration stops."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from strata_bench.load import LoadShape, arrival_offsets, run_load
from strata_bench.load.workload import LengthSpec, ServerTraits, Workload


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def test_poisson_arrivals_are_seeded_start_at_zero_and_have_mean_gap_one_over_rate():
    a = take(arrival_offsets(4.0, "poisson", seed=7), 20_000)
    assert a == take(arrival_offsets(4.0, "poisson", seed=7), 20_000)
    assert a != take(arrival_offsets(4.0, "poisson", seed=8), 20_000)
    assert a[0] == 0.0 and all(y > x for x, y in zip(a, a[1:]))
    gaps = np.diff(a)
    # exponential gaps: mean 1/rate with standard error (1/rate)/sqrt(n); 5 standard errors of room
    assert abs(gaps.mean() - 0.25) < 5 * 0.25 / np.sqrt(gaps.size)
    assert abs(gaps.std() - 0.25) < 0.25 * 0.05  # an exponential's std equals its mean


def test_constant_arrivals_are_exactly_one_over_rate_apart():
    assert take(arrival_offsets(10.0, "constant", seed=1), 4) == [0.0, 0.1, 0.2, 0.3]
    assert take(arrival_offsets(3.0, "constant", seed=1), 31)[-1] == 10.0  # i / rate: no running-sum drift


def test_shape_rejects_bad_input_by_name():
    with pytest.raises(ValueError, match="concurrency"):
        LoadShape("closed", requests=3)
    with pytest.raises(ValueError, match="rate"):
        LoadShape("open", rate=0, requests=3)
    with pytest.raises(ValueError, match="must stop"):
        LoadShape("closed", concurrency=2)
    with pytest.raises(ValueError, match="not both"):
        LoadShape("closed", concurrency=2, rate=1.0, requests=3)
    with pytest.raises(ValueError, match="arrivals"):
        LoadShape("open", rate=1.0, arrivals="bursty", requests=3)


class FakeServer:
    """Counts requests in flight; each takes `steps` ticks of a fake clock (closed loop) or real sleeps."""

    def __init__(self, hold_s: float = 0.0):
        self.now = 0.0
        self.in_flight = 0
        self.peak = 0
        self.offsets: list[float] = []
        self.hold_s = hold_s

    def clock(self) -> float:
        return self.now

    async def send(self, index: int, offset: float) -> int:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.offsets.append(offset)
        await asyncio.sleep(self.hold_s)
        self.now += 1.0  # each request's end moves the fake clock a second
        self.in_flight -= 1
        return index


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_closed_loop_keeps_exactly_concurrency_in_flight_and_stops_at_the_count(concurrency):
    server = FakeServer(hold_s=0.001)
    out = asyncio.run(run_load(LoadShape("closed", concurrency=concurrency, requests=20), server.send, server.clock))
    assert out["issued"] == 20 and out["results"] == list(range(20))
    assert server.peak == concurrency == out["max_in_flight"]


def test_closed_loop_stops_issuing_at_the_duration_and_waits_for_those_in_flight():
    server = FakeServer()
    out = asyncio.run(run_load(LoadShape("closed", concurrency=2, duration_s=10.0), server.send, server.clock))
    assert max(server.offsets) < 10.0
    assert out["issued"] == len(out["results"]) == len(server.offsets)
    assert server.now >= 10.0  # the clock reached the duration before the loop stopped


def test_closed_loop_count_and_duration_whichever_comes_first():
    server = FakeServer()
    out = asyncio.run(
        run_load(LoadShape("closed", concurrency=1, requests=3, duration_s=100.0), server.send, server.clock)
    )
    assert out["issued"] == 3


def test_open_loop_issues_on_schedule_by_duration():
    server = FakeServer(hold_s=0.0)
    shape = LoadShape("open", rate=1000.0, arrivals="constant", duration_s=0.05)
    out = asyncio.run(run_load(shape, server.send))
    assert out["issued"] == 50  # offsets i/1000 below 0.05
    assert server.offsets == [i / 1000 for i in range(50)]


def test_open_loop_cap_holds_requests_until_a_slot_frees():
    server = FakeServer(hold_s=0.01)
    out = asyncio.run(run_load(LoadShape("open", rate=2000.0, concurrency=2, requests=12), server.send))
    assert out["issued"] == 12 and server.peak == 2


def test_open_loop_without_cap_lets_requests_pile_up():
    server = FakeServer(hold_s=0.05)
    out = asyncio.run(run_load(LoadShape("open", rate=2000.0, arrivals="constant", requests=10), server.send))
    assert server.peak > 2 and out["max_in_flight"] == server.peak


def test_lengths_parse_draw_and_name_bad_input():
    rng = np.random.default_rng(0)
    assert LengthSpec.parse("256").draw(rng) == 256
    drawn = [LengthSpec.parse("uniform:10:12").draw(rng) for _ in range(200)]
    assert set(drawn) == {10, 11, 12}
    assert min(LengthSpec.parse("normal:5:50").draw(rng) for _ in range(200)) >= 1
    with pytest.raises(ValueError, match="--input-len 'abc'"):
        LengthSpec.parse("abc", "--input-len")
    with pytest.raises(ValueError, match="LOW <= HIGH"):
        LengthSpec.parse("uniform:9:3")


def test_workload_requests_depend_on_seed_and_index_only():
    server = ServerTraits(model="m", token_ids=True, vocab_size=300, eos_token_id=0)
    w = Workload(LengthSpec.parse("uniform:5:50"), LengthSpec.parse("normal:20:5"), seed=3)
    assert w.request(4, server) == w.request(4, server)
    assert w.request(4, server).body != w.request(5, server).body
    a = w.request(4, server)
    assert a.input_tokens == len(__import__("json").loads(a.body)["prompt"])
    chat = Workload(LengthSpec.parse("8"), LengthSpec.parse("4"), endpoint="chat").request(0, server)
    body = __import__("json").loads(chat.body)
    assert chat.path == "/v1/chat/completions" and isinstance(body["messages"][0]["content"], str)
    assert body["max_tokens"] == 4 and body["stream"] is True
    with pytest.raises(ValueError, match="endpoint"):
        Workload(LengthSpec.parse("8"), LengthSpec.parse("4"), endpoint="embeddings")
