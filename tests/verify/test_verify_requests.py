"""requests: the spec's sizes, scaling, the default piece, and prompts that are the same on every build."""

from __future__ import annotations

import pytest

from strata_verify.requests import (
    InterleavePlan,
    default_engine_command,
    default_piece,
    name_of,
    random_prompt,
    request_id,
)


def test_scale_one_is_the_spec():
    plan = InterleavePlan()
    assert plan.long_tokens == 40_000 and default_piece(1.0) == 16_384
    lengths = plan.prompt_lengths()
    assert lengths["C"] == lengths["D"] == 40_000
    assert 2 * lengths["E"] < lengths["D"]  # E may take over D's read
    for scale in (0.05, 1.0):  # the context C's prompt needs, asked for, never the engine's memory-sized default
        assert f"--ctx {(InterleavePlan(scale=scale).needed_ctx() + 1024) // 1024 * 1024}" in default_engine_command(
            scale
        )


@pytest.mark.parametrize("scale,piece,pieces_of_c", [(0.05, 512, 4), (0.1, 1536, 3), (1.0, 16_384, 3)])
def test_default_piece_gives_c_several_whole_chunk_pieces(scale, piece, pieces_of_c):
    plan = InterleavePlan(scale=scale)
    assert default_piece(scale) == piece and piece % 512 == 0
    assert -(-plan.long_tokens // piece) == pieces_of_c
    command = default_engine_command(scale)
    assert f"STRATA_PIPED_READ_PIECE={piece}" in command and "--batch 4 --batch-groups 2" in command


def test_prompts_are_stable_and_never_eos():
    plan = InterleavePlan(scale=0.01)
    first, again = plan.prompts(50, eos_token_id=7), plan.prompts(50, eos_token_id=7)
    assert first == again
    assert all(7 not in ids and all(1 <= t < 50 for t in ids) for ids in first.values())
    assert first["C"] != first["D"]  # two different long prompts
    assert random_prompt("k", 5, 50, None) == random_prompt("k", 5, 50, None) != random_prompt("j", 5, 50, None)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"scale": 0}, "scale"),
        ({"scale": -1}, "scale"),
        ({"answer_tokens": 0}, "tokens"),
        ({"scale": 1e-5}, "long prompt"),
    ],
)
def test_bad_plans_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        InterleavePlan(**kwargs)


def test_request_ids_carry_the_name():
    rid = request_id("interleave", "C", "ab12")
    assert rid == "verify-interleave-C-ab12" and name_of(rid) == "C"
    assert name_of("cmpl-123") is None
