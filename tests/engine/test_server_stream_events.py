"""The SSE loop (server/routes._stream) on items that reach it in one drain, as the engine thread can post
them: the event boundaries must not depend on that timing. A fake relay hands a whole stream over at once."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from strata_engine.outputs import Completion, Finished, TokenOutput
from strata_engine.server.render import Render
from strata_engine.server.routes import _stream


class QueuedRelay:
    """A relay whose every item is already queued: `next_nowait` never comes back empty before the end."""

    def __init__(self, items):
        self.items = list(items)
        self.request_id, self.stopped_by = "r1", None
        self.handle = SimpleNamespace(cached_tokens=0)

    def next_nowait(self):
        return self.items.pop(0) if self.items else None

    async def next(self):
        return self.items.pop(0) if self.items else None


def events_of(items, prompt_ids=(101, 102)) -> list:
    render = Render(
        kind="completion", request_id="r1", model="m", prompt_ids=prompt_ids, token_str=chr, return_token_ids=True
    )

    async def collect():
        return b"".join([chunk async for chunk in _stream(QueuedRelay(items), render, True, len(prompt_ids))])

    raw = asyncio.run(collect()).decode()
    payloads = [line[len("data: ") :] for line in raw.split("\n") if line.startswith("data: ")]
    return [p if p == "[DONE]" else json.loads(p) for p in payloads]


def completion(token_ids, finish):
    return Finished(Completion("r1", [101, 102], token_ids, "".join(map(chr, token_ids)), None, finish))


def test_an_eos_after_the_last_token_comes_in_one_more_event_even_in_one_drain():
    tokens = [TokenOutput(i, t, chr(t)) for i, t in enumerate([104, 105, 106])]  # no finish: an EOS came next
    events = events_of([*tokens, completion([104, 105, 106], "stop")])
    choices = [e["choices"][0] for e in events[:-2]]
    assert [c["finish_reason"] for c in choices] == [None, None, None, "stop"]
    assert [c["token_ids"] for c in choices] == [[104], [105], [106], []]
    assert events[-2]["usage"]["completion_tokens"] == 3 and events[-1] == "[DONE]"


def test_a_length_finish_rides_on_the_last_tokens_event_even_in_one_drain():
    tokens = [TokenOutput(0, 104, "h"), TokenOutput(1, 105, "i", finish_reason="length")]
    events = events_of([*tokens, completion([104, 105], "length")])
    choices = [e["choices"][0] for e in events[:-2]]
    assert [c["finish_reason"] for c in choices] == [None, "length"]
    assert [c["token_ids"] for c in choices] == [[104], [105]]
