"""Every STRATA_* environment variable the engine reads: one table (`KNOBS`), one reader (`read`), one rule.

Unset or empty (after stripping) means the knob's default; any other value the knob does not accept raises
ValueError naming the variable, the value and what it accepts. `environ(env)` is the environment readers see
(and what stage ranks inherit: runtime/stage_ranks/ranks.py); `read_set` reads several at once (an engine's, at
its start: resolved.py); `export_default` is the one write (kernel_switches sets TORCHINDUCTOR_CACHE_DIR, torch's
own, at the command line's edge). This is the one module that touches os.environ (a test holds it); mkl_mode asks
MKL for its reproducible mode through MKL's call, not the environment.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

_MISSING: Any = object()


@dataclass(frozen=True)
class Knob:
    sets: str  # what it sets: "SchedulerConfig.<field>", "RuntimeConfig.<field>" or the reader's own words
    parse: Callable[[str], Any]  # the stripped, non-empty value -> the knob's value; raises ValueError(why)
    accepts: str  # what it accepts, for the error
    default: Any
    help: str  # one line, for --help

    def shown(self) -> str:
        """The default as the variable would spell it."""
        if self.default is None or isinstance(self.default, bool):
            return "unset" if self.default is None else str(int(self.default))
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)


def number(minimum: float = 0.0, whole: bool = False) -> Callable[[str], Any]:
    def parse(raw: str) -> Any:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError("is not a number") from None
        if math.isnan(value):
            raise ValueError("is not a number")
        if whole and not value.is_integer():
            raise ValueError("is not a whole number")
        if value < minimum:
            raise ValueError(f"is below {minimum:g}")
        return int(value) if whole else value

    return parse


def choice(values: Mapping[str, Any], fold: bool = False) -> Callable[[str], Any]:
    """One of `values`' keys (any case where `fold`) -> its value."""

    def parse(raw: str) -> Any:
        if (raw.lower() if fold else raw) not in values:
            raise ValueError(f"is not one of {', '.join(values)}")
        return values[raw.lower() if fold else raw]

    return parse


SWITCH = choice({"0": 0, "1": 1, "false": 0, "true": 1, "no": 0, "yes": 1, "off": 0, "on": 1}, fold=True)
ON_OFF = "0/false/no/off or 1/true/yes/on"
KERNEL = Knob(
    "its native op's path",
    choice({"0": "aten", "1": "native", "auto": "auto"}),
    "0 = ATen's calls, 1 = the native op, auto = the faster of the two measured here",
    "auto",
    "0 = ATen's calls, 1 = the native op, auto = whichever measures faster on this machine",
)


def _march(raw: str) -> str:
    if not all(c.isalnum() or c in "-_.+" for c in raw):
        raise ValueError("is not a g++ -march value")
    return raw


def _api_key(raw: str) -> str:
    if not (raw.isascii() and raw.isprintable()):
        raise ValueError("is not printable ASCII")  # the server compares it with the header's bytes
    return raw


KNOBS: dict[str, Knob] = {
    "STRATA_PIPED_READ_PIECE": Knob(
        "SchedulerConfig.piped_read_piece",
        number(whole=True),
        "a whole number of tokens >= 0",
        0,
        "pipelined groups: read prompts in pieces of N tokens (whole chunks, 1-32); 0 = one run (release)",
    ),
    "STRATA_BATCH_DECODE_SHARE": Knob(
        "SchedulerConfig.decode_share",
        number(),
        "a share >= 0 of the chunk's read time",
        0.5,
        "decode time between read chunks/pieces as a share of the chunk/piece's read time",
    ),
    "STRATA_PIPED_DECODE_MIN_MS": Knob(
        "SchedulerConfig.decode_min_ms",
        number(),
        "milliseconds >= 0",
        20.0,
        "floor of the decode budget after a piece (ms)",
    ),
    "STRATA_PIPED_DECODE_MAX_MS": Knob(
        "SchedulerConfig.decode_max_ms",
        number(),
        "milliseconds >= 0, not below the MIN",
        400.0,
        "cap of the decode budget after a piece (ms)",
    ),
    "STRATA_PIPED_READ_MIX": Knob(
        "SchedulerConfig.read_mix",
        SWITCH,
        ON_OFF,
        0,
        "1 = mixed read: every micro-batch carries one read chunk plus a group's decode tokens",
    ),
    "STRATA_PIPED_PAUSE_TARGET_MS": Knob(
        "SchedulerConfig.pause_target_ms",
        number(),
        "milliseconds >= 0 (0 = off)",
        0.0,
        "while a slot decodes, end each read run before T ms (predicted from the run's own "
        "measured chunk times); with the mixed read, decode tokens ride only when due; 0 = off",
    ),
    "STRATA_PIPED_DECODE_MERGE": Knob(
        "SchedulerConfig.decode_merge",
        SWITCH,
        ON_OFF,
        0,
        "1 = while nothing is read, every group's decoding rows go as one micro-batch (one pass "
        "through the stages instead of one per group); reads keep the groups",
    ),
    "STRATA_ROW_TILE": Knob(
        "RuntimeConfig.row_tile",
        number(1, whole=True),
        "a whole number >= 1 (1 = padding off)",
        None,
        "pad every GEMM's rows to this tile in every stage instead of the probed one; 1 = padding off",
    ),
    "STRATA_DECODE_ALL_THREADS": Knob(
        "RuntimeConfig.decode_all_threads",
        lambda raw: bool(SWITCH(raw)),
        ON_OFF,
        False,
        "1 = thread stages decode at their full thread count instead of 1 thread",
    ),
    "STRATA_STAGE_WORKERS": Knob(
        "what EngineConfig.stage_workers auto picks",
        choice({"thread": "thread", "dist": "dist"}),
        "thread or dist",
        None,
        "what --stage-workers auto picks (unset: by the stages, groups and cores)",
    ),
    "STRATA_COMPILED_GEMMS": Knob(
        "RuntimeConfig.gemms",
        choice({"aten": "aten", "template": "template"}),
        "aten or template",
        None,
        "the compiled step's GEMMs: aten = MKL's, template = inductor's C++ template (unset: the layout's)",
    ),
    "STRATA_LAYOUT": Knob(
        "what --layout auto picks",
        choice({"plain": "plain", "fastest": "fastest"}),
        "plain or fastest",
        "fastest",
        "what --layout auto means",
    ),
    "STRATA_CHUNK_KERNEL": KERNEL,
    "STRATA_DECODE_KERNEL": KERNEL,
    "STRATA_EXPERT_KERNEL": KERNEL,
    "STRATA_DECODE_EXPERTS_KERNEL": KERNEL,
    "STRATA_QUANT_DECODE_KERNEL": KERNEL,
    "STRATA_KV_CODEC_KERNEL": KERNEL,
    "STRATA_NATIVE_MARCH": Knob(
        "the native ops' g++ -march",
        _march,
        "a g++ -march value: native, x86-64-v2, x86-64-v3, ...",
        "native",
        "the ISA level the native ops are built for (x86-64-v2/v3/v4 to run a lower one)",
    ),
    "STRATA_API_KEY": Knob(
        "serve's --api-key where the flag is not given",
        _api_key,
        "printable ASCII",
        None,
        "the key every endpoint but /health requires as 'Authorization: Bearer KEY' (= --api-key)",
    ),
}


def epilog() -> str:
    """The variables for the end of `serve --help`."""
    lines = [
        "\b",
        "Environment variables (read at engine start; unset or empty = the default; a bad value is an error naming it):",
    ]
    lines += [f"  {name} (default {knob.shown()}): {knob.help}" for name, knob in KNOBS.items()]
    lines += [
        "\b",
        "Kernels (CPU; built with g++ once per machine, ~30 s each; docs/MODEL.md): STRATA_CHUNK_KERNEL=0 reads "
        "prompt chunks with ATen's flash calls instead of the native chunk attention; STRATA_DECODE_KERNEL=0 gives the "
        "compiled decode step ATen's per-row attention instead of its native op (both float32); STRATA_EXPERT_KERNEL=0 "
        "runs an MoE layer's routed experts in a Python loop, not in one native call over the same ATen ops; "
        "STRATA_DECODE_EXPERTS_KERNEL=0 has the compiled decode step run every expert on every row, not each row's "
        "chosen experts in one native call (float32); "
        "STRATA_QUANT_DECODE_KERNEL=0 gives decode rows of a q8 or k8v4 cache the dequantized window copy and ATen's "
        "attention instead of the native op that reads the stored bytes; STRATA_KV_CODEC_KERNEL=0 stores and reads a q8 "
        "or k8v4 cache's prompt chunks with kv_format.py's Python codec instead of the native one (the same bits).",
    ]
    return "\n".join(lines)


def environ(env: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """`env`, or the process's environment where None."""
    return os.environ if env is None else env


def export_default(name: str, value: str) -> None:
    """Set variable `name` for this process and the processes it starts, unless it is set: for the command line's
    edge only (a cache folder torch reads itself); nothing below it writes the environment."""
    os.environ.setdefault(name, value)


def read(name: str, env: Mapping[str, str] | None = None, default: Any = _MISSING) -> Any:
    """The value of knob `name` in `env` (None = os.environ); unset or empty gives `default` (the table's where
    not given: a layout passes its own). A value the knob does not accept raises ValueError naming all three."""
    knob = KNOBS[name]
    value = environ(env).get(name, "")
    if not value.strip():
        return knob.default if default is _MISSING else default
    try:
        return knob.parse(value.strip())
    except ValueError as why:
        raise ValueError(f"{name}={value!r} {why} ({knob.accepts})") from None


def read_set(names: Iterable[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The knobs of `names` that are set (non-empty) in `env` (None = os.environ), read at once in that order:
    name -> its value. An unset one is absent, so its reader keeps its own default (the table's or a layout's)."""
    return {name: read(name, env) for name in names if is_set(name, env)}


def is_set(name: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether knob `name` is set (non-empty) in `env`."""
    return bool(environ(env).get(name, "").strip())
