"""The piecewise read on the real torch pipeline: default model, CPU, two stages, two groups.

Streams A and B decode while C's long prompt is read; D's long read gives way to the short E.
The events must show the pieces and the give-way, and every request's greedy tokens must equal its
solo tokens, with pieces of 1 chunk, of 3 chunks, and unset (the release); and with the mixed read and the
pause target, whose runs end early at a chunk when the short E arrives.
"""

from __future__ import annotations

import time

import pytest

from strata_engine import SamplingParams
from strata_engine.engine import Engine
from tokens_equal import assert_tokens_equal

pytestmark = (
    pytest.mark.slow
)  # real engines end to end, one per read mode (the scheduler's own tests cover the modes in ms)

CHUNK = 32
LONG = 12 * CHUNK + 5  # not a whole number of chunks on purpose
GREEDY = SamplingParams(max_tokens=12, ignore_eos=True)


def long_prompt(tag: str) -> str:
    body = "".join(f"    x_{i} = compute({i}, '{tag}')\n" for i in range(200))
    return (f"# {tag}\ndef build():\n" + body)[:LONG]


PROMPTS = {
    "A": "def add(a, b):\n    return",
    "B": "import collections\n\n",
    "C": long_prompt("C"),
    "D": long_prompt("D"),
    "E": "x = [",
}


@pytest.fixture(scope="module")
def solo():
    with Engine.from_pretrained(batch=1, prefill_chunk=CHUNK, log_events=False) as engine:
        return {name: engine.generate([p], GREEDY)[0].token_ids for name, p in PROMPTS.items()}


def run_interleaved(piece_chunks: int | None):
    env = {} if piece_chunks is None else {"STRATA_PIPED_READ_PIECE": str(piece_chunks * CHUNK)}
    env["STRATA_PIPED_DECODE_MIN_MS"] = "1"
    long_params = SamplingParams(max_tokens=200, ignore_eos=True)
    with Engine.from_pretrained(
        batch=6, batch_groups=2, split=2, prefill_chunk=CHUNK, log_events=False, env=env
    ) as engine:
        # A and B decode for the whole test (they are cut to the solo length when compared)
        times: dict[str, list[float]] = {"A": [], "B": []}

        def record(name):
            return lambda item: times[name].append(item.t) if hasattr(item, "t") else None

        a = engine.submit(PROMPTS["A"], long_params, request_id="A", on_output=record("A"))
        b = engine.submit(PROMPTS["B"], long_params, request_id="B", on_output=record("B"))
        next(iter(a)), next(iter(b))
        c = engine.submit(PROMPTS["C"], GREEDY, request_id="C")
        wait_for(engine, "READ_DONE", "C")
        # E (short) arrives right behind D (long): D's read starts first and gives way to E at its first piece end
        d = engine.submit(PROMPTS["D"], GREEDY, request_id="D")
        e = engine.submit(PROMPTS["E"], GREEDY, request_id="E")
        outs = {name: h.result(timeout=120) for name, h in [("C", c), ("D", d), ("E", e)]}
        outs["A"], outs["B"] = a.result(timeout=120), b.result(timeout=120)
        events = list(engine.events.since(0)[0])
    return outs, events, times


def wait_for(engine, kind, request_id, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not any(e.request_id == request_id for e in engine.events.of_kind(kind)):
        assert time.monotonic() < deadline, f"no {kind} event for {request_id} within {timeout} s"
        time.sleep(0.002)


@pytest.mark.parametrize("piece_chunks", [1, 3, None], ids=["piece-1-chunk", "piece-3-chunks", "release"])
def test_interleaved_equals_solo(solo, piece_chunks):
    outs, events, times = run_interleaved(piece_chunks)
    pieces_c = [e for e in events if e.kind == "PIECE" and e.request_id == "C"]
    yielded = [e for e in events if e.kind == "YIELDED"]
    if piece_chunks is None:
        assert pieces_c == [] and yielded == []  # the release reads in one run and never gives way
    else:
        expected_pieces = -(-LONG // (piece_chunks * CHUNK))
        assert len(pieces_c) == expected_pieces
        assert all(p.fields["tokens"] % CHUNK == 0 for p in pieces_c[:-1])
        assert [y.request_id for y in yielded] == ["D"] and yielded[0].fields["to"] == "E"
        assert yielded[0].fields["tokens_read"] == piece_chunks * CHUNK  # at D's first piece end
        # A and B got tokens while C was read
        c_start = next(e.t for e in events if e.kind == "READ_START" and e.request_id == "C")
        c_done = next(e.t for e in events if e.kind == "READ_DONE" and e.request_id == "C")
        during = [t for name in "AB" for t in times[name] if c_start < t < c_done]
        assert len(during) >= 2, "A and B got no tokens while C's prompt was read in pieces"
    for name, expected in solo.items():
        assert_tokens_equal(
            expected=expected,
            actual=outs[name].token_ids[: len(expected)],
            label=f"piece {piece_chunks} {name}",
            expected_name="solo",
            actual_name="interleaved",
        )


# -- the mixed read and the pause target on the real torch pipeline ---------------------------------
@pytest.mark.parametrize(
    "env",
    [
        {"STRATA_PIPED_READ_MIX": "1"},
        {"STRATA_PIPED_PAUSE_TARGET_MS": "100"},
        {"STRATA_PIPED_READ_MIX": "1", "STRATA_PIPED_PAUSE_TARGET_MS": "30"},
        {"STRATA_PIPED_READ_MIX": "1", "STRATA_PIPED_DECODE_MERGE": "1"},
    ],
    ids=["mixed", "target", "mixed-target", "mixed-merged"],
)
def test_modes_interleaved_equal_solo(solo, env):
    """C is read while A and B decode; D's read, interrupted by the short E, gives way mid-run."""
    long_params = SamplingParams(max_tokens=200, ignore_eos=True)
    with Engine.from_pretrained(
        batch=6, batch_groups=2, split=2, prefill_chunk=CHUNK, log_events=False, env=env
    ) as engine:
        a = engine.submit(PROMPTS["A"], long_params, request_id="A")
        b = engine.submit(PROMPTS["B"], long_params, request_id="B")
        next(iter(a)), next(iter(b))
        handles = {name: engine.submit(PROMPTS[name], GREEDY, request_id=name) for name in "CDE"}
        outs = {name: h.result(timeout=120) for name, h in handles.items()}
        outs["A"], outs["B"] = a.result(timeout=120), b.result(timeout=120)
        events = list(engine.events.since(0)[0])
    yielded = [e for e in events if e.kind == "YIELDED"]
    assert yielded and yielded[0].fields["to"] == "E" and yielded[0].fields["tokens_read"] < LONG
    for name, expected in solo.items():
        assert_tokens_equal(
            expected=expected,
            actual=outs[name].token_ids[: len(expected)],
            label=f"{env} {name}",
            expected_name="solo",
            actual_name="interleaved",
        )
