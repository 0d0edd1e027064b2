"""Tokenizers: text <-> token ids, plus streaming detokenization that never splits a UTF-8 character.

`load_tokenizer(model_dir, config)` returns an `HFTokenizer` when the model directory holds a
tokenizer.json, else a `ByteTokenizer` (ids 0..255 are bytes, then <bos> and <eos>). `decode_stream()`
gives a `TokenStream` whose `add(id)` returns the text that became complete with that token ("" while a
multi-byte character or a multi-token piece is still open) and whose `flush()` returns what is left.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Protocol, Sequence

from .config import ModelConfig


class TokenStream(Protocol):
    def add(self, token_id: int) -> str: ...

    def flush(self) -> str: ...


class Tokenizer(Protocol):
    vocab_size: int
    eos_token_id: int | None
    bos_token_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def decode_stream(self) -> TokenStream: ...


class ByteTokenizer:
    """Bytes are ids 0..255; 256 = <bos>, 257 = <eos>; ids up to the model's vocab decode to nothing."""

    BOS, EOS = 256, 257

    def __init__(self, vocab_size: int = 258, bos_token_id: int | None = BOS, eos_token_id: int | None = EOS):
        if vocab_size < 256:
            raise ValueError(f"a byte tokenizer needs vocab_size >= 256, the model has {vocab_size}")
        self.vocab_size, self.bos_token_id, self.eos_token_id = vocab_size, bos_token_id, eos_token_id

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        self._check(ids)
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def decode_stream(self) -> "ByteStream":
        return ByteStream(self)

    def _check(self, ids: Sequence[int]) -> None:
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} outside the vocabulary [0, {self.vocab_size})")


class ByteStream:
    """Holds an incomplete UTF-8 sequence until its last byte arrives; invalid bytes become U+FFFD."""

    def __init__(self, tokenizer: ByteTokenizer):
        self.tokenizer = tokenizer
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token_id: int) -> str:
        self.tokenizer._check([token_id])
        return self.decoder.decode(bytes([token_id])) if token_id < 256 else ""

    def flush(self) -> str:
        return self.decoder.decode(b"", final=True)


class HFTokenizer:
    """A `tokenizers` tokenizer.json; special tokens are not added on encode and skipped on decode."""

    def __init__(self, path: Path, bos_token_id: int | None = None, eos_token_id: int | None = None):
        from tokenizers import Tokenizer as _Tok

        self.tok = _Tok.from_file(str(path))
        self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)
        self.bos_token_id, self.eos_token_id = bos_token_id, eos_token_id

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def decode_stream(self) -> "HFStream":
        return HFStream(self)


class HFStream:
    """The prefix/read-offset scheme of TGI and vLLM: decode the ids since `prefix` and emit what grew past
    the text of ids[prefix:read], unless it ends in U+FFFD (a byte-fallback character still incomplete).
    Decoding from an earlier prefix keeps word boundaries (sentencepiece spaces) right."""

    def __init__(self, tokenizer: HFTokenizer):
        self.tokenizer, self.ids, self.prefix, self.read = tokenizer, [], 0, 0

    def _delta(self) -> str:
        before = self.tokenizer.decode(self.ids[self.prefix : self.read])
        after = self.tokenizer.decode(self.ids[self.prefix :])
        return after[len(before) :] if len(after) > len(before) else ""

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        delta = self._delta()
        if not delta or delta.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return delta

    def flush(self) -> str:
        delta = self._delta()
        self.prefix = self.read = len(self.ids)
        return delta


def load_tokenizer(model_dir: str | Path, config: ModelConfig) -> Tokenizer:
    path = Path(model_dir) / "tokenizer.json"
    if path.is_file():
        return HFTokenizer(path, config.bos_token_id, config.eos_token_id)
    bos = config.bos_token_id if config.bos_token_id is not None else ByteTokenizer.BOS
    eos = config.eos_token_id if config.eos_token_id is not None else ByteTokenizer.EOS
    return ByteTokenizer(config.vocab_size, bos, eos)
