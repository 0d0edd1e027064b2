"""Many clients and departing clients: 32 streams on 4 slots all complete, unmixed, each equal to its
solo output; requests wait in arrival order; a client that leaves mid-stream, mid-wait or during a
non-streaming request has its request cancelled and its slot freed, and the others go on."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest

from fakes.engine import FakeEngine

from strata_engine.params import SamplingParams
from server_helpers import metric, serving, wait_for
from tokens_equal import assert_tokens_equal


async def stream_one(client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int) -> dict:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, "return_token_ids": True}
    out = {"ids": [], "text": "", "finish": None, "done": False, "cmpl": set()}
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                out["done"] = True
                continue
            event = json.loads(line[6:])
            out["cmpl"].add(event["id"])
            for choice in event["choices"]:
                out["ids"] += choice["token_ids"]
                out["text"] += choice["text"]
                out["finish"] = choice["finish_reason"] or out["finish"]
    return out


def test_32_streams_on_4_slots_all_complete_each_equal_to_its_solo_output():
    with FakeEngine(batch=4, ctx=512, step_s=0.002) as engine, serving(engine) as (url, _app):
        prompts = [f"client {i} asks about {'xyz'[i % 3] * (i % 5 + 1)}" for i in range(32)]
        solo = {p: engine.generate(p, SamplingParams(max_tokens=24, temperature=0)) for p in prompts}
        peak = [0]
        stop = threading.Event()

        def watch_slots():
            while not stop.is_set():
                peak[0] = max(peak[0], engine.stats()["slots_busy"])
                time.sleep(0.002)

        watcher = threading.Thread(target=watch_slots)
        watcher.start()

        async def run_all():
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as client:
                return await asyncio.gather(*(stream_one(client, url, p, 24) for p in prompts))

        results = asyncio.run(run_all())
        stop.set()
        watcher.join()
        for prompt, got in zip(prompts, results):
            expect = solo[prompt]
            assert got["done"] and got["finish"] == "length", prompt
            assert_tokens_equal(
                expected=expect.token_ids,
                actual=got["ids"],
                label=repr(prompt),
                expected_name="solo",
                actual_name="http",
            )
            assert got["text"] == expect.text
        assert len({next(iter(r["cmpl"])) for r in results}) == 32 and all(len(r["cmpl"]) == 1 for r in results)
        assert peak[0] <= 4
        assert engine.stats()["slots_busy"] == 0 and engine.stats()["queue_len"] == 0


def test_requests_beyond_the_slots_wait_and_are_admitted_in_arrival_order():
    with FakeEngine(batch=1, ctx=512, step_s=0.002) as engine, serving(engine) as (url, app):
        threads = []
        for i in range(5):
            body = {"prompt": f"queued {i}", "max_tokens": 15, "temperature": 0}
            t = threading.Thread(
                target=httpx.post,
                args=(url + "/v1/completions",),
                kwargs={"json": body, "headers": {"X-Request-Id": f"q{i}"}, "timeout": 30},
            )
            t.start()
            threads.append(t)
            wait_for(
                lambda: (
                    f"q{i}" in app.state.strata.relays
                    or any(e.request_id == f"q{i}" for e in engine.events.of_kind("FINISH"))
                ),
                what=f"q{i} submitted",
            )
        for t in threads:
            t.join(30)
        admitted = [e.request_id for e in engine.events.of_kind("ADMIT")]
        assert admitted == [f"q{i}" for i in range(5)]
        assert [e.fields["reason"] for e in engine.events.of_kind("FINISH")] == ["length"] * 5


def test_a_client_leaving_mid_stream_frees_its_slot_and_the_others_go_on():
    with FakeEngine(batch=2, ctx=4096, step_s=0.005) as engine, serving(engine) as (url, app):
        keep = {"prompt": "the one that stays", "max_tokens": 60, "temperature": 0}
        expect = engine.generate(keep["prompt"], SamplingParams(max_tokens=60, temperature=0))
        kept: list = []
        stayer = threading.Thread(target=lambda: kept.append(asyncio.run(_stream_solo(url, keep))))
        stayer.start()
        with httpx.stream(
            "POST",
            url + "/v1/completions",
            headers={"X-Request-Id": "leaver"},
            json={"prompt": "the one that leaves", "max_tokens": 3000, "stream": True, "ignore_eos": True},
        ) as r:
            for i, _line in enumerate(r.iter_lines()):
                if i >= 6:
                    break  # closing the response closes the connection: the client is gone
        wait_for(
            lambda: any(e.request_id == "leaver" for e in engine.events.of_kind("FINISH")), what="leaver cancelled"
        )
        finish = next(e for e in engine.events.of_kind("FINISH") if e.request_id == "leaver")
        assert finish.fields["reason"] == "cancelled" and finish.fields["tokens"] < 3000
        assert any(e.request_id == "leaver" for e in engine.events.of_kind("BSTOP"))
        stayer.join(30)
        assert kept[0]["ids"] == expect.token_ids and kept[0]["done"]
        wait_for(lambda: metric(url, "strata_slots_busy") == 0, what="slots free")
        assert metric(url, "strata_client_disconnects_total") == 1
        assert 'strata_requests_total{finish_reason="cancelled"} 1.0' in httpx.get(url + "/metrics").text
        assert "leaver" not in app.state.strata.relays
        again = httpx.post(url + "/v1/completions", json={**keep, "max_tokens": 5}).json()
        assert again["choices"][0]["text"] == expect.text[:5]


async def _stream_solo(url: str, body: dict) -> dict:
    async with httpx.AsyncClient(timeout=60) as client:
        return await stream_one(client, url, body["prompt"], body["max_tokens"])


def test_a_client_leaving_while_queued_or_non_streaming_is_cancelled():
    with FakeEngine(batch=1, ctx=8192, step_s=0.005) as engine, serving(engine) as (url, _app):
        with httpx.stream(
            "POST",
            url + "/v1/completions",
            headers={"X-Request-Id": "holder"},
            json={"prompt": "holds the slot", "max_tokens": 5000, "stream": True, "ignore_eos": True},
        ) as holder:
            lines = holder.iter_lines()  # keep the iterator: dropping it would close the connection
            next(lines)
            # Queued behind the holder; its client gives up before it ever gets a slot.
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(
                    url + "/v1/completions",
                    json={"prompt": "waits", "max_tokens": 5},
                    headers={"X-Request-Id": "waiter"},
                    timeout=0.5,
                )
            wait_for(lambda: any(e.request_id == "waiter" for e in engine.events.of_kind("FINISH")), what="waiter")
            assert engine.stats()["queue_len"] == 0
        wait_for(lambda: engine.stats()["slots_busy"] == 0, what="holder's slot freed")
        # Non-streaming, in a slot, client times out mid-generation.
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                url + "/v1/completions",
                json={"prompt": "slow", "max_tokens": 5000, "ignore_eos": True},
                headers={"X-Request-Id": "impatient"},
                timeout=0.5,
            )
        wait_for(lambda: any(e.request_id == "impatient" for e in engine.events.of_kind("FINISH")), what="impatient")
        wait_for(lambda: engine.stats()["slots_busy"] == 0, what="slot freed")
        reasons = {e.request_id: e.fields["reason"] for e in engine.events.of_kind("FINISH")}
        assert reasons == {"holder": "cancelled", "waiter": "cancelled", "impatient": "cancelled"}
        assert not any(e.request_id == "waiter" for e in engine.events.of_kind("ADMIT"))
        assert metric(url, "strata_client_disconnects_total") == 3
