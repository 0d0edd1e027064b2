"""Tokenizers: byte round trips, special ids, and streaming decode that never emits half a character."""

from __future__ import annotations

import pytest

from strata_engine.model.config import ModelConfig
from strata_engine.model.tokenizer import ByteTokenizer, HFTokenizer, load_tokenizer

TEXT = "def café(x):\n    return '世界' + \"🐍\"  # ñ\n"


def test_byte_roundtrip_and_specials():
    tok = ByteTokenizer(vocab_size=260)
    ids = tok.encode(TEXT)
    assert ids == list(TEXT.encode("utf-8")) and max(ids) < 256
    assert tok.decode(ids) == TEXT
    assert tok.decode([tok.BOS, *ids, tok.EOS, 259]) == TEXT  # specials and padding ids decode to nothing
    with pytest.raises(ValueError, match="token id 260 outside the vocabulary"):
        tok.decode([260])
    with pytest.raises(ValueError, match="vocab_size >= 256"):
        ByteTokenizer(vocab_size=100)


def test_byte_stream_holds_incomplete_characters():
    tok = ByteTokenizer()
    stream = tok.decode_stream()
    deltas = [stream.add(i) for i in tok.encode(TEXT)]
    assert "".join(deltas) + stream.flush() == TEXT
    assert all("\ufffd" not in d for d in deltas)
    # each multi-byte character comes out whole, on its last byte, and nothing before that
    assert deltas.count("🐍") == 1 and deltas.count("世") == 1
    start = len("def caf".encode())
    assert deltas[start : start + 2] == ["", "é"]
    assert stream.add(ByteTokenizer.EOS) == ""


def test_byte_stream_flushes_a_dangling_prefix_as_replacement():
    stream = ByteTokenizer().decode_stream()
    assert stream.add(0xE4) == "" and stream.add(0xB8) == ""  # first two bytes of 世
    assert stream.flush() == "\ufffd"


def make_hf_tokenizer(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([TEXT * 3, "import os\nimport sys\n"], trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    return tmp_path


def test_hf_tokenizer_stream_matches_decode(tmp_path):
    config = ModelConfig(
        architecture="llama",
        vocab_size=300,
        hidden_size=8,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        head_dim=4,
        intermediate_size=8,
        eos_token_id=0,
    )
    tok = load_tokenizer(make_hf_tokenizer(tmp_path), config)
    assert isinstance(tok, HFTokenizer) and tok.eos_token_id == 0
    text = TEXT + "x = '¿qué?' 🐍🐍"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    stream = tok.decode_stream()
    deltas = [stream.add(i) for i in ids]
    assert "".join(deltas) + stream.flush() == text
    assert all("\ufffd" not in d for d in deltas)


def test_load_tokenizer_falls_back_to_bytes(tmp_path):
    config = ModelConfig(
        architecture="llama",
        vocab_size=258,
        hidden_size=8,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        head_dim=4,
        intermediate_size=8,
        bos_token_id=256,
        eos_token_id=257,
    )
    tok = load_tokenizer(tmp_path, config)
    assert isinstance(tok, ByteTokenizer)
    assert (tok.vocab_size, tok.bos_token_id, tok.eos_token_id) == (258, 256, 257)
