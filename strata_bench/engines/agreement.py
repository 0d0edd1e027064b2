"""Whether a server's tokenizer is ours: the condition for sending it token-id prompts.

A server that takes token ids but does not say its vocabulary (vLLM: GET /v1/models gives the model's
directory and `max_model_len`, nothing more) gets ids only when this is shown: the model directory it
names is on this machine, our own loader (strata_engine's `load_tokenizer`, the engine's) reads it, and the
server's POST /tokenize of a probe text (ASCII, multi-byte UTF-8, tabs and newlines) returns exactly the ids
ours gives. Then the vocabulary and eos id are that directory's config.json, which the server read too.
Otherwise the server gets text, and `reason` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .compare import first_difference

PROBE_TEXT = "def read(path):\n\treturn 'naïve café, ¿qué? 日本語 🐍' + path  # 1 < 2\n"


@dataclass(frozen=True)
class Agreement:
    agrees: bool
    reason: str  # the evidence, or why there is none
    vocab_size: int | None = None
    eos_token_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "agrees": self.agrees,
            "reason": self.reason,
            "vocab_size": self.vocab_size,
            "eos_token_id": self.eos_token_id,
        }


def local_model_dir(*names: str | None) -> Path | None:
    """The first of the server's model names (`root`, `id`) that is a directory here with a config.json, or
    the name of a model embedded in strata_engine."""
    for name in names:
        if not name:
            continue
        path = Path(name).expanduser()
        if (path / "config.json").is_file():
            return path
        if "/" not in name:
            from strata_engine.model.model_dir import MODELS_DIR

            if (MODELS_DIR / name / "config.json").is_file():
                return MODELS_DIR / name
    return None


def check_agreement(
    label: str, names: tuple[str | None, ...], server_tokenize: Callable[[str], list[int] | None]
) -> Agreement:
    """Ask the server to tokenize PROBE_TEXT and compare with our tokenizer of the model directory it names."""
    model_dir = local_model_dir(*names)
    if model_dir is None:
        shown = ", ".join(repr(n) for n in names if n) or "none"
        return Agreement(
            False,
            f"{label} serves a model ({shown}) that is not a directory on this machine, so its "
            "tokenizer cannot be compared with ours: text prompts",
        )
    try:
        from strata_engine.model.tokenizer import load_tokenizer
        from strata_engine.model.model_dir import read_config

        config = read_config(model_dir)
        ours = load_tokenizer(model_dir, config).encode(PROBE_TEXT)
    except Exception as exc:  # an architecture or tokenizer our loader refuses: no ids, say why
        return Agreement(False, f"our loader cannot read {model_dir} ({type(exc).__name__}: {exc}): text prompts")
    theirs = server_tokenize(PROBE_TEXT)
    if theirs is None:
        return Agreement(False, f"{label} did not answer POST /tokenize: text prompts")
    if theirs != ours:
        index = first_difference(theirs, ours)
        return Agreement(
            False,
            f"{label}'s tokenizer differs from ours on a probe text at token {index} "
            f"(server {theirs[index : index + 4]}, ours {ours[index : index + 4]}): text prompts",
        )
    return Agreement(
        True,
        f"{label}'s POST /tokenize equals our tokenizer of {model_dir} on a {len(ours)}-token "
        f"probe (multi-byte UTF-8 included); vocabulary {config.vocab_size} from its config.json",
        config.vocab_size,
        config.eos_token_id,
    )
