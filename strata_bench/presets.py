"""Presets: a named bench (arms, scenarios, rounds, scale) as data in strata_bench/presets/*.json.

An arm command may hold `{time_scale}`: `--time-scale T` fills it (the simulated executor runs T times
faster than modelled time) and the bench divides its delays by T and reports modelled seconds. A preset
without the placeholder runs a real engine, where only T = 1 makes sense.

An arm may also name an engine this project did not write, by placeholder: `{vllm}` (vLLM's `vllm`
command, scripts/install_vllm.sh), `{llama_server}` with `{gguf}` (llama.cpp's server and the embedded
model exported to GGUF, scripts/install_llama_cpp.sh), `{model_dir}` (the embedded model's directory).
`installed()` fills them in; an arm whose engine is not installed here is left out, with a line saying
how to install it (the `engines` preset runs whatever is installed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .arms import ArmError, parse_arms

PRESET_DIR = Path(__file__).with_name("presets")


class PresetError(ValueError):
    """An unknown preset, a malformed preset file, or an option the preset cannot take."""


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    arms: tuple[tuple[str, str], ...]  # (name, command template)
    scenarios: tuple[str, ...]
    repeat: int
    scale: float
    time_scale: float

    @property
    def takes_time_scale(self) -> bool:
        return all("{time_scale}" in command for _, command in self.arms)

    def arm_specs(self, time_scale: float) -> list[str]:
        """`NAME=COMMAND` strings, ready for arms.parse_arms."""
        if time_scale != 1.0 and not self.takes_time_scale:
            raise PresetError(f"preset {self.name!r} runs a real engine: --time-scale does not apply to it")
        return [f"{name}={command.replace('{time_scale}', f'{time_scale:g}')}" for name, command in self.arms]

    def only(self, names: str) -> "Preset":
        """The preset with the arms `names` (comma-separated) names, in the preset's order; a name it lacks is
        an error that lists its arms."""
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        known = [name for name, _ in self.arms]
        unknown = [n for n in wanted if n not in known]
        if unknown or not wanted:
            raise PresetError(
                f"preset {self.name!r} has no arm {', '.join(map(repr, unknown)) or '(none given)'}; "
                f"its arms: {', '.join(known)}"
            )
        return replace(self, arms=tuple(arm for arm in self.arms if arm[0] in wanted))

    def installed(self) -> tuple["Preset", list[str]]:
        """The preset with the engine placeholders filled in, and a line per arm left out (not installed)."""
        arms, notes = [], []
        for name, command in self.arms:
            filled, missing = fill_engines(command)
            if missing:
                notes.append(f"arm {name!r} left out: {missing}")
            else:
                arms.append((name, filled))
        if not arms:
            raise PresetError(f"preset {self.name!r}: none of its engines is installed here:\n" + "\n".join(notes))
        return replace(self, arms=tuple(arms)), notes

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str) -> "Preset":
        try:
            arms = data["arms"]
            if not isinstance(arms, dict) or len(arms) < 2:
                raise PresetError(f"{source}: 'arms' must map two or more names to commands")
            return cls(
                name=data["name"],
                description=data.get("description", ""),
                arms=tuple((str(k), str(v)) for k, v in arms.items()),
                scenarios=tuple(data["scenarios"]),
                repeat=int(data.get("repeat", 1)),
                scale=float(data.get("scale", 1.0)),
                time_scale=float(data.get("time_scale", 1.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, PresetError):
                raise
            raise PresetError(f"{source}: malformed preset ({type(exc).__name__}: {exc})") from None


def available_presets() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PRESET_DIR.glob("*.json"))}


def load_preset(name: str) -> Preset:
    found = available_presets()
    path = found.get(name) or (Path(name) if name.endswith(".json") and Path(name).is_file() else None)
    if path is None:
        raise PresetError(f"unknown preset {name!r}; available: {', '.join(found) or 'none'}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PresetError(f"{path}: not valid JSON: {exc}") from None
    return Preset.from_dict(data, str(path))


EMBEDDED_MODEL = "strata-tiny-moe"


def fill_engines(command: str) -> tuple[str, str | None]:
    """(command with engine placeholders filled, None), or (command, why it cannot run here and how to fix it)."""
    if "{model_dir}" in command:
        from strata_engine.model.model_dir import MODELS_DIR

        command = command.replace("{model_dir}", str(MODELS_DIR / EMBEDDED_MODEL))
    if "{vllm}" in command:
        from .engines.vllm import INSTALL, find_vllm

        vllm = find_vllm()
        if vllm is None:
            return command, f"vLLM is not installed: {INSTALL}"
        command = command.replace("{vllm}", str(vllm))
    if "{llama_server}" in command or "{gguf}" in command:
        from .engines.llama_cpp import cache_dir, find_llama_server

        install = "run `bash scripts/install_llama_cpp.sh` to build it"
        binary = find_llama_server()
        if binary is None:
            return command, f"llama.cpp's llama-server is not built: {install}"
        gguf = cache_dir() / f"{EMBEDDED_MODEL}.gguf"
        if not gguf.is_file():
            try:
                from strata_engine.model.gguf_export import export_gguf
            except ImportError as exc:
                return command, f"the embedded model cannot be exported to GGUF here ({exc}): {install}"
            partial = gguf.with_suffix(".gguf.partial")
            try:
                export_gguf(EMBEDDED_MODEL, partial)
            except ImportError as exc:  # the exporter imports `gguf` when it runs
                return command, f"the gguf package is missing ({exc}): {install}"
            partial.replace(gguf)
        command = command.replace("{llama_server}", str(binary)).replace("{gguf}", str(gguf))
    return command, None


def engine_commands(arm_texts: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, command) of `--arm NAME=COMMAND` texts, parsed as `strata-bench run` parses them (`arms.parse_arms`:
    unique names, clear errors) with the placeholders filled (`fill_engines`), for the scripts that start
    engines themselves; an arm that cannot run here, or a NAME=@URL arm, is an ArmError naming it."""
    out = []
    for arm in parse_arms(arm_texts):
        if arm.command is None:
            raise ArmError(f"arm {arm.name!r}: this script starts its engines; give NAME=COMMAND, not NAME=@URL")
        command, missing = fill_engines(arm.command)
        if missing:
            raise ArmError(f"arm {arm.name!r}: {missing}")
        out.append((arm.name, command))
    return out
