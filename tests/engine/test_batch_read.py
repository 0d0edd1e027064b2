"""The piecewise read's pure functions (spec: rounding, the 32-chunk cap, chunk 0, cap and floor, lead-in)
and the env variables behind them (bad values give the default and one warning)."""

from __future__ import annotations

import warnings

import pytest

from strata_engine.config import ENV_VARS, SchedulerConfig
from strata_engine.knobs import KNOBS
from strata_engine.scheduler.batch_read import (
    MAX_PIECE_CHUNKS,
    batch_read_piece,
    next_read_chunks,
    piped_decode_budget_ms,
    piped_read_lead_in,
    piped_read_piece,
)


# -- piped_read_piece ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "piece, chunk, expected",
    [
        (16384, 512, 16384),  # already whole chunks
        (32768, 512, 16384),  # 64 chunks, capped at 32
        (1000, 512, 1024),  # 1.95 chunks -> 2
        (767, 512, 512),  # 1.498 chunks -> 1
        (768, 512, 1024),  # exactly 1.5 chunks: halves round up
        (100, 512, 512),  # under half a chunk: floor of one chunk
        (1, 512, 512),
        (3, 2, 4),  # 1.5 -> 2 with an even chunk
        (5, 3, 6),  # 1.67 -> 2 with an odd chunk
        (4, 3, 3),  # 1.33 -> 1
        (10, 1, 10),
        (40, 1, 32),  # the cap in 1-token chunks
    ],
)
def test_piece_rounds_to_whole_chunks_within_1_and_32(piece, chunk, expected):
    got = piped_read_piece(piece, chunk)
    assert got == expected
    assert got % chunk == 0 and 1 <= got // chunk <= MAX_PIECE_CHUNKS


def test_piece_zero_means_one_run():
    assert piped_read_piece(0, 512) == 0


@pytest.mark.parametrize("chunk", [0, -512])
def test_chunk_zero_or_negative_is_an_error_naming_the_chunk(chunk):
    with pytest.raises(ValueError, match="prefill chunk"):
        piped_read_piece(16384, chunk)
    with pytest.raises(ValueError, match="prefill chunk"):
        batch_read_piece(chunk, 2, 16384)


def test_negative_piece_is_an_error():
    with pytest.raises(ValueError, match="piece size"):
        piped_read_piece(-1, 512)


# -- piped_decode_budget_ms -------------------------------------------------------------------------
def test_budget_is_share_of_piece_time_between_floor_and_cap():
    assert piped_decode_budget_ms(400.0, 0.5, 20.0, 400.0) == 200.0
    assert piped_decode_budget_ms(4000.0, 0.5, 20.0, 400.0) == 400.0  # cap
    assert piped_decode_budget_ms(10.0, 0.5, 20.0, 400.0) == 20.0  # floor
    assert piped_decode_budget_ms(0.0, 0.5, 0.0, 400.0) == 0.0
    assert piped_decode_budget_ms(1000.0, 0.0, 20.0, 400.0) == 20.0  # share 0 still gets the floor


def test_budget_rejects_inverted_bounds_and_negative_inputs():
    with pytest.raises(ValueError, match="min_ms"):
        piped_decode_budget_ms(100.0, 0.5, 500.0, 400.0)
    with pytest.raises(ValueError, match="share"):
        piped_decode_budget_ms(100.0, -0.1, 20.0, 400.0)
    with pytest.raises(ValueError, match="piece_ms"):
        piped_decode_budget_ms(-1.0, 0.5, 20.0, 400.0)


# -- piped_read_lead_in -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "previous_was_read, decoding, pieces, expected",
    [
        (True, True, True, True),
        (False, True, True, False),  # the slots were just decoding: no lead-in needed
        (True, False, True, False),  # nobody decodes: a budget would be wasted
        (True, True, False, False),  # the default one-run read never leads in
    ],
)
def test_lead_in(previous_was_read, decoding, pieces, expected):
    assert piped_read_lead_in(previous_was_read, decoding, pieces) is expected


# -- batch_read_piece -------------------------------------------------------------------------------
def test_single_group_reads_one_chunk_whatever_the_piece():
    assert batch_read_piece(512, 1) == 512
    assert batch_read_piece(512, 1, 16384) == 512


def test_pipelined_groups_read_one_run_unless_pieces_are_set():
    assert batch_read_piece(512, 2) == 0  # pipelined, no pieces: the whole prompt in one run
    assert batch_read_piece(512, 2, 16384) == 16384
    assert batch_read_piece(512, 3, 100000) == 32 * 512


# -- next_read_chunks -------------------------------------------------------------------------------
def test_next_read_chunks():
    assert next_read_chunks(0, 1000, 512, 0) == [(0, 512), (512, 1000)]
    assert next_read_chunks(0, 1000, 512, 512) == [(0, 512)]
    assert next_read_chunks(512, 1000, 512, 1024) == [(512, 1000)]
    assert next_read_chunks(3, 7, 1, 2) == [(3, 4), (4, 5)]
    with pytest.raises(ValueError, match="nothing left"):
        next_read_chunks(1000, 1000, 512, 0)


# -- the env variables (read in config.py only) ---------------------------------------------------
def test_env_values_are_read():
    cfg = SchedulerConfig(batch=6, batch_groups=2).with_env(
        {"STRATA_PIPED_READ_PIECE": "16384", "STRATA_BATCH_DECODE_SHARE": "0.25", "STRATA_PIPED_DECODE_MAX_MS": "300"}
    )
    assert (cfg.piped_read_piece, cfg.decode_share, cfg.decode_max_ms, cfg.decode_min_ms) == (16384, 0.25, 300.0, 20.0)


def test_unset_or_empty_env_gives_defaults_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        unset, empty = SchedulerConfig().with_env({}), SchedulerConfig().with_env({name: " " for name in ENV_VARS})
    for name, field in ENV_VARS.items():
        assert getattr(unset, field) == getattr(empty, field) == KNOBS[name].default, name


@pytest.mark.parametrize("name", sorted(ENV_VARS))
@pytest.mark.parametrize("raw, why", [("abc", "is not"), ("-5", "is "), ("nan", "is not")])
def test_bad_env_value_raises_naming_the_variable_and_value(name, raw, why):
    with pytest.raises(ValueError, match=f"^{name}='{raw}' {why}.*\\(.+\\)$"):
        SchedulerConfig().with_env({name: raw})


def test_decode_max_below_min_raises_naming_both():
    with pytest.raises(
        ValueError, match=r"STRATA_PIPED_DECODE_MAX_MS \(100.0\) is below STRATA_PIPED_DECODE_MIN_MS \(500.0\)"
    ):
        SchedulerConfig().with_env({"STRATA_PIPED_DECODE_MIN_MS": "500", "STRATA_PIPED_DECODE_MAX_MS": "100"})


def test_piece_env_zero_means_one_run():
    cfg = SchedulerConfig(batch=4, batch_groups=2).with_env({"STRATA_PIPED_READ_PIECE": "0"})
    assert batch_read_piece(cfg.prefill_chunk, cfg.batch_groups, cfg.piped_read_piece) == 0
