"""Independent answers: greedy answers to long prompts made outside the build under test.

The file (`golden/independent-tiny-moe.json`, written by scripts/make_independent_answers.py with
transformers at float64 on the same weights) holds, per prompt, the seeded key its token ids come
from, their SHA-256, the expected token ids and, per position, the chosen logprob and the top-2
candidates by id. `load(path)` refuses a file that cannot be compared against (ManifestError);
`prompt_ids` rebuilds a prompt from its name, length and attempt, so no prompt text is stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata_verify.determinism import answer_hash
from strata_verify.manifest import ManifestError
from strata_verify.requests import random_prompt

FORMAT = "strata-verify-independent/1"
GOLDEN = Path(__file__).resolve().parent / "golden" / "independent-tiny-moe.json"
# Each ends two or three tokens after a 512-token chunk boundary (the engine's default chunk), so the
# last chunk's queries sit right next to the prefix: where a prefix/chunk boundary bug changes most.
# S is under half of L1 (a give-way candidate); L2 is not (2 x 1027 > 2050), so L1, read first,
# gives way to S alone, resumes, and L2 is read while L1 and S decode.
PROMPTS: tuple[tuple[str, int], ...] = (("L1", 2050), ("L2", 1027), ("S", 514))


def prompt_ids(name: str, length: int, vocab_size: int, eos_token_id: int | None, attempt: int = 0) -> list[int]:
    """The token ids of one independent prompt (seeded; the same on every machine and Python)."""
    return random_prompt(f"independent-{name}-{attempt}", length, vocab_size, eos_token_id)


@dataclass(frozen=True)
class Expected:
    """One independent answer, seen as an answer (diverge reads token_ids, logprobs and top_ids)."""

    name: str
    prompt: list[int]
    token_ids: list[int]
    logprobs: list[float]
    top_ids: list[list[list[float]]]
    min_margin: float | None

    @property
    def top_logprobs(self) -> list:
        return []


def load(path: str | Path) -> tuple[dict[str, Any], list[Expected]]:
    """The file's metadata and its answers with rebuilt prompts; ManifestError naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise ManifestError(
            f"independent answers {path} do not exist (make them with scripts/make_independent_answers.py)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "null")
    except json.JSONDecodeError as exc:
        raise ManifestError(f"independent answers {path} are not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError(f"{path} is not a {FORMAT} file")
    vocab, eos, tokens = data.get("vocab_size"), data.get("eos_token_id"), data.get("max_tokens")
    if not isinstance(vocab, int) or vocab < 3 or not isinstance(tokens, int) or tokens < 1:
        raise ManifestError(f"{path}: vocab_size and max_tokens must be positive integers")
    entries = data.get("answers")
    if not isinstance(entries, list) or not entries:
        raise ManifestError(f"{path} holds zero answers")
    answers = []
    for index, entry in enumerate(entries):
        try:
            name, length, attempt = entry["name"], int(entry["prompt_tokens"]), int(entry.get("attempt", 0))
            ids = [int(t) for t in entry["token_ids"]]
        except (KeyError, TypeError, ValueError):
            raise ManifestError(f"{path}: answer {index} lacks name, prompt_tokens or token_ids") from None
        if len(ids) != tokens or answer_hash(ids) != entry.get("sha256"):
            raise ManifestError(f"{path}: answer {name}'s token ids do not match its tokens/sha256 (edited by hand?)")
        prompt = prompt_ids(name, length, vocab, eos, attempt)
        if answer_hash(prompt) != entry.get("prompt_sha256"):
            raise ManifestError(
                f"{path}: prompt {name} rebuilt from its seed hashes differently than when the answers "
                "were made (the prompt generator changed): regenerate the answers"
            )
        answers.append(
            Expected(
                name,
                prompt,
                ids,
                list(entry.get("logprobs") or []),
                list(entry.get("top_ids") or []),
                entry.get("min_margin"),
            )
        )
    if len({a.name for a in answers}) != len(answers):
        raise ManifestError(f"{path}: answer names must be unique")
    return data, answers


def made_by(data: dict[str, Any]) -> str:
    """One line saying how the expected answers were made."""
    how = data.get("made_by") or {}
    return (
        f"{how.get('implementation', '?')}, {how.get('dtype', '?')}; {how.get('method', '?')}; "
        f"weights sha256 {str(how.get('weights_sha256', '?'))[:16]}..."
    )
