"""The embedded model's tokenizer.json (written so transformers, vLLM and any HF tool load the model directory
as it is) is the byte tokenizer: every byte is its own id, <bos> = 256, <eos> = 257, nothing added on
encode; the engine's own loader, transformers' AutoTokenizer and the plain byte tokenizer give the same ids
and the same streamed text, multi-byte and broken UTF-8 included."""

from __future__ import annotations

import random

import pytest

from strata_engine.model import load_model, load_tokenizer, resolve_model_path
from strata_engine.model.tokenizer import ByteTokenizer

NAME = "strata-tiny-moe"
TEXTS = [
    "",
    "import os\n\n\ndef read_config(path):\n    ",
    "x = '¿qué?'  # naïve café, 日本語, Ελληνικά",
    "🐍🐍 emoji (4 bytes) and \t tabs \r\n and \x00 nul",
    "  leading spaces, trailing  ",
    "".join(chr(c) for c in range(1, 128)),
]


@pytest.fixture(scope="module")
def ours():
    _, config = load_model(NAME)
    return load_tokenizer(resolve_model_path(NAME), config)


@pytest.fixture(scope="module")
def hf():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(resolve_model_path(NAME)))


def test_engine_loader_reads_the_shipped_tokenizer_json(ours):
    assert (resolve_model_path(NAME) / "tokenizer.json").is_file()
    assert (ours.vocab_size, ours.bos_token_id, ours.eos_token_id) == (258, 256, 257)


@pytest.mark.parametrize("text", TEXTS)
def test_ids_are_the_utf8_bytes_in_ours_and_in_transformers(ours, hf, text):
    expected = list(text.encode("utf-8"))
    assert ours.encode(text) == expected
    assert hf(text, add_special_tokens=True)["input_ids"] == expected  # no <bos> prepended
    assert hf.decode(expected) == ours.decode(expected) == text


def test_special_ids_agree(ours, hf):
    assert (hf.bos_token_id, hf.eos_token_id) == (256, 257)
    assert hf.convert_tokens_to_ids(["<bos>", "<eos>"]) == [256, 257]
    assert len(hf) == ours.vocab_size == 258
    ids = [256] + list("héllo".encode()) + [257]
    assert hf.decode(ids, skip_special_tokens=True) == ours.decode(ids) == ByteTokenizer().decode(ids) == "héllo"


def test_every_single_byte_round_trips_through_transformers(hf):
    for byte in range(256):
        assert hf.convert_tokens_to_ids(hf.convert_ids_to_tokens([byte])) == [byte]


def test_streamed_text_equals_the_byte_tokenizer_on_random_and_broken_utf8(ours):
    rng = random.Random(0)
    cases = [list(t.encode()) for t in TEXTS]
    cases += [[rng.randrange(256) for _ in range(rng.randrange(1, 40))] for _ in range(200)]  # broken UTF-8 too
    cases += [[0xE2, 0x82], [0xF0, 0x9F, 0x90], [0xFF, 0x41, 0xC3]]  # cut multi-byte characters
    for ids in cases:
        plain, shipped = ByteTokenizer().decode_stream(), ours.decode_stream()
        plain_text = "".join(plain.add(i) for i in ids) + plain.flush()
        shipped_text = "".join(shipped.add(i) for i in ids) + shipped.flush()
        assert shipped_text == plain_text == ByteTokenizer().decode(ids), ids
