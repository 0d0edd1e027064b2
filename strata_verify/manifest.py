"""Determinism manifests: one build's six answer hashes plus the environment that produced them.

`build(run)` makes the JSON a release keeps (or strata_verify/golden/ commits); `load(path)` refuses
a missing, empty or malformed file, or one with zero answers, with a ManifestError naming the problem;
`compare(manifest, run)` gives one step per prompt, checks every run (not only the first) and names
each prompt, and each run, whose answer differs.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import platform
import sys
from pathlib import Path
from typing import Any

from strata_engine.engine_info import version
from strata_verify.determinism import DeterminismRun, answer_hash
from strata_verify.diverge import compare_answers
from strata_verify.report import FAIL, INFO, PASS, Step

FORMAT = "strata-verify-manifest/1"
CHECK = "determinism"
ENGINE_FLAGS = (
    "executor",
    "batch",
    "batch_groups",
    "num_stages",
    "prefill_chunk",
    "ctx",
    "piped_read_piece",
    "decode_share",
    "read_mix",
    "decode_merge",
    "pause_target_ms",
    "layout",
    "batch_invariant",
)
PACKAGES = ("strata", "torch", "numpy", "safetensors", "tokenizers", "transformers", "fastapi", "uvicorn", "httpx")


class ManifestError(ValueError):
    """A manifest that cannot be compared against (missing, empty, malformed, no answers)."""


def _version(package: str) -> str | None:
    if package == "strata":
        return version()
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def fingerprint(info: dict[str, Any]) -> dict[str, Any]:
    """Where the answers came from: package versions here, and the engine's device, dtype and flags."""
    packages = {name: _version(name) for name in PACKAGES}
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": {k: v for k, v in packages.items() if v is not None},
        "torch": packages.get("torch"),
        "device": info.get("device"),
        "dtype": info.get("dtype"),
        "model": info.get("model"),
        "engine_version": info.get("version"),
        "engine": info,
    }


def build(run: DeterminismRun) -> dict[str, Any]:
    prompts = dict(run.options.prompts)
    answers = []
    for name, answer in run.runs[0].items():
        answers.append(
            {
                "name": name,
                "prompt": prompts[name],
                "prompt_sha256": answer_hash(answer.prompt_token_ids) if answer.prompt_token_ids else None,
                "sha256": answer_hash(answer.token_ids),
                "tokens": len(answer.token_ids),
                "token_ids": answer.token_ids,
                "text": answer.text,
            }
        )
    return {
        "format": FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "engine_command": run.target.describe(),
        "max_tokens": run.options.tokens,
        "runs": len(run.runs),
        "answers": answers,
        "environment": fingerprint(run.info),
    }


def save(manifest: dict[str, Any], path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ManifestError(f"manifest {path} does not exist")
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise ManifestError(f"manifest {path} is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"manifest {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError(
            f"manifest {path} is not a {FORMAT} file (format: {data.get('format') if isinstance(data, dict) else None!r})"
        )
    answers = data.get("answers")
    if not isinstance(answers, list) or not answers:
        raise ManifestError(f"manifest {path} holds zero answers")
    for index, entry in enumerate(answers):
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("sha256") or not entry.get("tokens"):
            raise ManifestError(f"manifest {path}: answer {index} lacks a name, a sha256 or tokens")
    if not isinstance(data.get("max_tokens"), int) or data["max_tokens"] < 1:
        raise ManifestError(f"manifest {path}: max_tokens must be a positive integer")
    return data


class _Stored:
    """A manifest answer seen as an answer (diverge needs token_ids/logprobs/top_logprobs)."""

    def __init__(self, entry: dict[str, Any]):
        self.token_ids = list(entry.get("token_ids") or [])
        self.logprobs: list = []
        self.top_logprobs: list = []


def _compare_prompt(name: str, entry: dict[str, Any], answers: list[Any], label: str, build_name: str | None) -> Step:
    """Every run's answer to one prompt against the manifest's: each differing run is named."""
    step = f"{name} matches {label}"
    evidence = [f"{label}: sha256 {entry['sha256']}"]
    differing = []
    for index, answer in enumerate(answers):
        mine = answer_hash(answer.token_ids)
        evidence.append(f"run {index + 1}: sha256 {mine}")
        if mine == entry["sha256"]:
            continue
        differing.append(f"run {index + 1}")
        if entry.get("token_ids"):
            diff = compare_answers(left_name=f"run {index + 1}", left=answer, right_name=label, right=_Stored(entry))
            evidence.append(diff.describe() if diff else "token ids equal but hashes differ (manifest edited by hand?)")
        mine_prompt = answer_hash(answer.prompt_token_ids) if answer.prompt_token_ids else None
        if entry.get("prompt_sha256") and mine_prompt and mine_prompt != entry["prompt_sha256"]:
            evidence.append(f"run {index + 1}: the prompt's token ids differ too: the builds tokenize it differently")
    if not differing:
        return Step(
            CHECK, step, PASS, f"sha256 {entry['sha256']} in all {len(answers)} runs", tuple(evidence), build_name
        )
    return Step(
        CHECK,
        step,
        FAIL,
        f"answer to {name} differs from {label} in {' and '.join(differing)}",
        tuple(evidence),
        build_name,
    )


def compare(manifest: dict[str, Any], run: DeterminismRun, label: str) -> list[Step]:
    """One step per prompt of this run against the manifest, plus settings and environment steps."""
    build_name = run.target.name if run.target.name != "engine" else None
    steps: list[Step] = []
    if manifest["max_tokens"] != run.options.tokens:
        return [
            Step(
                CHECK,
                f"against {label}",
                FAIL,
                f"the manifest was made with max_tokens={manifest['max_tokens']}, "
                f"this run used {run.options.tokens}: rerun with --tokens {manifest['max_tokens']}",
                build=build_name,
            )
        ]
    stored = {entry["name"]: entry for entry in manifest["answers"]}
    runs = run.runs or [{}]
    prompts = dict(run.options.prompts)
    for name in sorted(set(stored).union(*runs)):
        step = f"{name} matches {label}"
        missing = [f"run {i + 1}" for i, answers in enumerate(runs) if name not in answers]
        if missing or name not in stored:
            where = ", ".join(missing) if missing else label
            steps.append(Step(CHECK, step, FAIL, f"prompt {name} is missing from {where}", build=build_name))
            continue
        entry = stored[name]
        if entry.get("prompt") is not None and entry["prompt"] != prompts.get(name):
            steps.append(
                Step(CHECK, step, FAIL, f"prompt {name} differs from {label}'s: {entry['prompt']!r}", build=build_name)
            )
            continue
        steps.append(_compare_prompt(name, entry, [answers[name] for answers in runs], label, build_name))
    env_then, env_now = manifest.get("environment") or {}, fingerprint(run.info)
    changed = [
        f"{key}: {env_then.get(key)!r} -> {env_now.get(key)!r}"
        for key in ("torch", "device", "dtype", "model", "engine_version", "python", "machine")
        if env_then.get(key) != env_now.get(key)
    ]
    flags_then, flags_now = env_then.get("engine") or {}, env_now.get("engine") or {}
    changed += [
        f"engine {key}: {flags_then.get(key)!r} -> {flags_now.get(key)!r}"
        for key in ENGINE_FLAGS
        if flags_then.get(key) != flags_now.get(key)
    ]
    steps.append(
        Step(
            CHECK,
            f"environment vs {label}",
            INFO,
            f"{len(changed)} differences" if changed else "same torch, device, dtype, model, engine version and flags",
            tuple(changed),
            build_name,
        )
    )
    return steps
