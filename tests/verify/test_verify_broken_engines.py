"""The gate against the real engine with one realistic bug patched in (tests/fakes/broken_engine.py): each bug
fails the gate with a message naming the check and the request; the unmodified engine passes.

Slow: each test starts real engines on the bundled tiny model (CPU) at CI scale.
"""

from __future__ import annotations

import re

import pytest

from strata_verify.requests import default_engine_command

from .support import planted, verify

pytestmark = pytest.mark.slow

CI_SCALE = 0.05
# env STRATA_PIPED_READ_PIECE=512 strata-engine serve --split 2 ... --ctx: room for the answers check's
# longest prompt and answer too (2,083 positions), which `strata-verify answers` asks for itself
PIECES = default_engine_command(CI_SCALE, needed_ctx=4096)


def broken(bug: str) -> str:
    """The default CI engine command with `strata-engine` replaced by the broken engine, on thread stages:
    the bug is patched into this process, and the default's stage ranks would load an unpatched model."""
    command = PIECES.replace("strata-engine", planted(bug), 1)
    return command + " --stage-workers thread"


def failed_lines(out) -> list[str]:
    return [line for line in out.stdout.splitlines() if line.startswith("[    FAIL     ]")]


def test_the_unmodified_engine_matches_the_independent_answers():
    out = verify("answers", timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("== independent: 32 tokens equal") == 6
    assert "answers: resume offsets:" in out.stdout  # 1 resumed read, or none on a loaded machine (info)


def test_a_prefix_attention_bug_in_every_mode_fails_the_answers_check():
    out = verify("answers", "--engine", broken("prefix-attention"), timeout=900)
    assert out.returncode == 1, out.stdout + out.stderr
    fails = failed_lines(out)
    for phase in ("solo", "together"):  # every mode shares the bug, and every mode is caught, naming the request
        # (the model's 1024-token window keeps L1's answer, 2050 tokens in, out of the bug's reach: S and L2 show it)
        assert any(
            f"answers: {name} {phase}" in line and f"request {name}" in line
            for line in fails
            for name in ("L1", "L2", "S")
        ), out.stdout


def test_a_piece_path_bug_shared_by_solo_and_interleaved_fails_the_answers_check():
    out = verify("answers", "--engine", broken("piece-start"), timeout=900)
    assert out.returncode == 1, out.stdout + out.stderr
    assert any(
        line.startswith("[    FAIL     ] answers: L1 solo == independent: request L1 differs")
        for line in failed_lines(out)
    ), out.stdout
    assert (
        "answers: S solo == independent: 32 tokens equal" in out.stdout
    )  # one chunk and a tail: never mid-prompt early


def test_a_corrupted_token_keeping_its_logprob_is_a_wrong_token_not_a_near_tie():
    out = verify("interleave", "--scale", str(CI_SCALE), "--engine", broken("corrupt-token"), timeout=900)
    assert out.returncode == 1, out.stdout + out.stderr
    line = next(line for line in failed_lines(out) if "interleave: C interleaved == solo" in line)
    assert "differs at token 3 (wrong token: interleaved)" in line
    assert "near-tie:" not in out.stdout and "is not its own top-1" in out.stdout
    assert "place to look: the engine's last event before that token" in out.stdout


def test_a_resume_offset_error_fails_the_resume_offsets_step_naming_the_request():
    out = verify("interleave", "--scale", str(CI_SCALE), "--engine", broken("resume-offset"), timeout=900)
    assert out.returncode == 1, out.stdout + out.stderr
    assert any("interleave: resume offsets: request D:" in line for line in failed_lines(out)), out.stdout
    # D gives way at a piece boundary (512 unless a loaded machine sends E late); it resumes one chunk on
    yielded, resumed = map(
        int, re.search(r"YIELDED at (\d+) tokens, then RESUME tokens_read=(\d+)", out.stdout).groups()
    )
    assert resumed == yielded + 512, out.stdout


def test_a_prompt_cache_that_ignores_cache_salt_fails_isolation_and_only_isolation():
    """The salted sessions go to the one cache-on engine: a prefix matched across salts is named, request and
    tokens; every token-equality step still passes (the leaked prefix has the same tokens), as the check did
    before it sent salted requests to a cache-on engine."""
    engine = f"{planted('cache-salt')} serve"
    out = verify("cache", "--scale", "0.5", "--turns", "2", "--evict-sessions", "2", "--engine", engine, timeout=1500)
    assert out.returncode == 1, out.stdout + out.stderr
    failed = failed_lines(out)
    assert len(failed) == 1 and "no prefix crosses a cache_salt: request x.other-salt (salt b" in failed[0], out.stdout
    assert "x.holder's prefix (salt a)" in failed[0]


def test_a_compiled_step_window_bug_fails_answers_on_the_default_layout():
    """The default layout's compiled decode step, one position short of the window: only decode rows past the
    window move, by ~1e-3 nats, greedy tokens kept: the answers check's tolerance names them. (The suite's
    servers run plain, tests/conftest.py: the layout is asked for.)"""
    engine = f"{planted('compiled-window')} serve --layout fastest"
    out = verify("answers", "--engine", engine, timeout=1500)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "compiled" in out.stdout  # the default layout ran: its compiled step is what the bug is in
    fails = failed_lines(out)
    assert fails and all("logprobs" in line for line in fails), out.stdout  # tokens kept; logprobs moved
    assert all(
        re.search(r"request (L1|L2): the same tokens from other numbers: .* at token \d+", line) for line in fails
    )
    assert "S solo logprobs ~ independent: largest" in out.stdout  # S (514 tokens) never decodes past the window


def test_an_engine_wide_generator_fails_seeded_run_1_against_run_2():
    """The field's seeded-sampling check on the real engine: a generator shared by every request (seeded by the
    first) draws S differently the second time on one engine."""
    out = verify("interleave", "--scale", str(CI_SCALE), "--engine", broken("shared-generator"), timeout=900)
    assert out.returncode == 1, out.stdout + out.stderr
    assert any("interleave: S seeded: run 1 == run 2" in line for line in failed_lines(out)), out.stdout
    assert not any("interleave: E stream == non-stream" in line for line in failed_lines(out)), out.stdout


def test_a_non_streamed_text_one_short_fails_stream_against_non_stream():
    """llama.cpp's server tests' check on the real engine: the same tokens, the non-streamed text one short."""
    out = verify("interleave", "--scale", str(CI_SCALE), "--engine", broken("whole-text"), timeout=900)
    assert out.returncode == 1, out.stdout + out.stderr
    fails = failed_lines(out)
    assert any("interleave: E stream == non-stream" in line for line in fails), out.stdout
    assert all("stream == non-stream" in line for line in fails), out.stdout  # token ids equal everywhere else
