"""The checks the field's own tests make, in `interleave` (strata_verify/interleave/sampled.py): seeded sampling at
temperature > 0 (interleaved == solo, run 1 == run 2) and stream == non-stream, each with a negative control that
must fail: the synthetic engine with a fault flag (`--sample-fault`, `--stream-fault`). The unmodified fake passes
all four steps (test_verify_cli's pass scenario counts them); the real engine's are in test_verify_broken_engines."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from strata_verify.client import Completion
from strata_verify.interleave.sampled import _off_argmax, difference

from .support import SCALE, fake, verify

SCENARIOS = {
    "pass": (),
    # a seeded draw that depends on what runs beside it, and a whole response whose last token is wrong
    "batch+stream": ("--sample-fault", "batch", "--stream-fault", "last-token"),
    "advance": ("--sample-fault", "advance"),  # one engine-wide generator: the same seed draws differently
    "greedy": ("--sample-fault", "greedy"),  # temperature ignored: nothing sampled, nothing shown
    # a starved front end delivers S in one burst: the client's clock cannot show it beside A and B
    "burst-once": ("--burst-sampled", "1"),
    "burst-always": ("--burst-sampled", "9"),
}


@pytest.fixture(scope="module")
def outcome():
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(verify, "interleave", "--engine", fake(*flags), "--scale", SCALE)
            for name, flags in SCENARIOS.items()
        }
        return {name: future.result() for name, future in futures.items()}


def line(out, step: str) -> str:
    return next(row for row in out.stdout.splitlines() if f"interleave: {step}:" in row)


def test_the_unmodified_fake_passes_the_field_steps(outcome):
    out = outcome["pass"]
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[    PASS     ] interleave: S seeded: interleaved == solo: 32 sampled tokens equal" in out.stdout
    assert "[    PASS     ] interleave: S seeded: run 1 == run 2: 32 sampled tokens equal" in out.stdout
    assert (
        "[    PASS     ] interleave: S stream == non-stream: 32 token ids, text and finish reason equal" in out.stdout
    )
    assert "[    PASS     ] interleave: E stream == non-stream: 16 token ids" in out.stdout
    assert "temperature 1, top_p 0.95, seed 7" in out.stdout and "tokens A and B received meanwhile" in out.stdout


def test_a_draw_not_shown_beside_a_and_b_is_sent_again_before_the_step_concludes(outcome):
    out = outcome["burst-once"]
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[    PASS     ] interleave: S seeded: interleaved == solo: 32 sampled tokens equal" in out.stdout
    assert "attempt 2: the earlier S draw(s) were not shown beside A and B" in out.stdout
    out = outcome["burst-always"]
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[NOT EXERCISED] interleave: S seeded: interleaved == solo: S was not shown" in out.stdout
    assert "attempt 3:" in out.stdout and "[    FAIL     ]" not in out.stdout


def test_a_draw_that_depends_on_the_batch_fails_interleaved_vs_solo_only(outcome):
    out = outcome["batch+stream"]
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[    FAIL     ] interleave: S seeded: interleaved == solo: token ids differ at token 0" in out.stdout
    assert "[    PASS     ] interleave: S seeded: run 1 == run 2" in out.stdout  # alone, the draw is the seed's
    assert "request S (interleaved verify-interleave-S-" in out.stdout  # the evidence names the request


def test_a_whole_response_that_differs_from_its_stream_fails_stream_vs_non_stream(outcome):
    out = outcome["batch+stream"]
    assert "[    FAIL     ] interleave: S stream == non-stream: token ids differ at token 31" in out.stdout
    assert "[    FAIL     ] interleave: E stream == non-stream: token ids differ at token 15" in out.stdout
    assert "E interleaved == solo: 16 tokens equal" in out.stdout  # the streamed answers were right


def test_a_generator_shared_across_requests_fails_run_1_vs_run_2(outcome):
    out = outcome["advance"]
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[    FAIL     ] interleave: S seeded: run 1 == run 2: token ids differ at token 0" in out.stdout
    # each engine's first sampled request is S interleaved / S solo: equal, so only the repeat shows it
    assert "[    PASS     ] interleave: S seeded: interleaved == solo" in out.stdout


def test_a_server_that_ignores_temperature_leaves_the_seeded_steps_not_exercised(outcome):
    out = outcome["greedy"]
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[NOT EXERCISED] interleave: S seeded: interleaved == solo: every sampled token was the argmax" in out.stdout
    assert "[NOT EXERCISED] interleave: S seeded: run 1 == run 2: every sampled token was the argmax" in out.stdout
    assert "0 of 96 sampled positions drew a token other than the top-1" in out.stdout
    assert "[    PASS     ] interleave: S stream == non-stream" in out.stdout


def answer(ids, text, lps=None, tops=None):
    c = Completion(name="S", request_id="rid", token_ids=list(ids), text=text)
    c.logprobs, c.top_logprobs = list(lps or []), list(tops or [])
    return c


def test_difference_names_ids_then_text():
    assert difference("a", answer([1, 2], "xy"), "b", answer([1, 2], "xy")) is None
    reason, evidence = difference("a", answer([1, 2], "xy"), "b", answer([1, 3], "xz"))
    assert reason == "token ids differ at token 1" and "at token 1: a 2, b 3" in evidence
    reason, _ = difference("a", answer([1, 2], "xy"), "b", answer([1, 2], "x?"))
    assert reason == "text differs at character 1 (the token ids are equal)"
    reason, _ = difference("a", answer([1, 2], "xy"), "b", answer([1], "x"))
    assert reason == "token ids differ at token 1"  # one answer ended early


def test_off_argmax_needs_top_logprobs():
    drawn, why = _off_argmax(answer([1, 2], "", [-1.0, -0.1], [{"a": -0.5}, {"b": -0.1}]))
    assert drawn is True and why.startswith("1 of 2 sampled positions")
    assert _off_argmax(answer([1], "", [-0.1], [{"b": -0.1}]))[0] is False
    assert _off_argmax(answer([1], ""))[0] is None  # no logprobs: not shown either way
