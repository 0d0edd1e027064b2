"""The engine flags `serve` and `generate` share: each maps to one EngineConfig field (`ENGINE_FLAGS`).
`engine_options` adds them to a command, `engine_config` makes the EngineConfig (a bad combination is a usage
error naming it), `engine_factory` builds the Engine only when the command needs one (it imports torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..config import DEFAULT_PROMPT_CACHE_MIB, EngineConfig
from ..kernel_switches import keep_compile_cache

ENGINE_FLAGS = (
    "model",
    "batch",
    "batch_groups",
    "split",
    "devices",
    "prefill_chunk",
    "ctx",
    "allow_ctx_beyond_model",
    "executor",
    "sim_profile",
    "time_scale",
    "device",
    "dtype",
    "kv_dtype",
    "seed",
    "threads",
    "stage_workers",
    "stage_ranks",
    "stage_timeout_s",
    "compile",
    "log_events",
    "prompt_cache_mib",
)


def _batch_groups(_ctx: Any, _param: Any, value: str) -> str | int:
    if value == "auto":
        return value
    try:
        groups = int(value)
    except ValueError:
        raise click.BadParameter(f"must be an integer or 'auto', got {value!r}") from None
    if groups < 1:
        raise click.BadParameter(f"must be >= 1, got {groups}")
    return groups


def engine_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The EngineConfig flags, shared by serve and generate."""
    options = [
        click.option(
            "--model",
            default="strata-tiny-moe",
            show_default=True,
            help="Model name (a bundled model) or a directory with config.json, weights and tokenizer.",
        ),
        click.option(
            "--batch",
            type=click.IntRange(min=1),
            default=4,
            show_default=True,
            help="Decode slots: requests that hold a KV cache at once; more wait in order.",
        ),
        click.option(
            "--batch-groups",
            default="1",
            show_default=True,
            callback=_batch_groups,
            help="Split the slots into N pipelined groups ('auto' = one per pipeline stage).",
        ),
        click.option(
            "--split",
            type=click.IntRange(min=1),
            default=None,
            help="Layer split: layers [0, L) on stage 0, the rest on stage 1 (two stages).",
        ),
        click.option(
            "--devices",
            default="",
            help="Comma-separated devices, one pipeline stage each (e.g. cuda:0,cuda:1); even layer split.",
        ),
        click.option(
            "--prefill-chunk",
            type=click.IntRange(min=1),
            default=512,
            show_default=True,
            help="Prompt tokens read per forward (a chunk).",
        ),
        click.option(
            "--ctx",
            type=click.IntRange(min=2),
            default=None,
            help="Context length per slot (prompt + generated tokens). Default: the model's "
            "max_position_embeddings where a quarter of the memory holds what --batch slots commit (on CPU "
            "with a sliding window, the window's share only), else the most that fits.",
        ),
        click.option(
            "--allow-ctx-beyond-model",
            is_flag=True,
            help="Let --ctx exceed the model's max_position_embeddings (positions it never saw).",
        ),
        click.option(
            "--executor",
            type=click.Choice(["torch", "sim"]),
            default="torch",
            show_default=True,
            help="torch = run the model; sim = a cost model with the same scheduler (fast, no weights).",
        ),
        click.option(
            "--sim-profile",
            default=None,
            help="sim executor: name or JSON path of the cost profile (default pr2050-2x5090).",
        ),
        click.option(
            "--time-scale",
            type=float,
            default=1.0,
            show_default=True,
            help="sim executor: modelled seconds per wall-clock second (10 = ten times faster).",
        ),
        click.option(
            "--device", default=None, help="torch device for a single stage (default: cuda if present, else cpu)."
        ),
        click.option("--dtype", default=None, help="fp32, bf16 or fp16 (default: fp32 on cpu, bf16 on cuda)."),
        click.option(
            "--kv-dtype",
            type=click.Choice(["f32", "bf16", "q8", "k8v4"]),
            default=None,
            help="KV cache format: f32, bf16, q8 (int8 keys and values, a scale a position and head) or k8v4 "
            "(int8 keys, 4-bit values). Default: the model's dtype (f32 on cpu). Not with --compile "
            "(--layout plain; docs/MODEL.md, 'KV cache').",
        ),
        click.option(
            "--seed",
            type=int,
            default=0,
            show_default=True,
            help="Engine seed: the default seed of requests that give none.",
        ),
        click.option(
            "--threads",
            type=click.IntRange(min=1),
            default=None,
            help="torch intra-op threads per stage worker (default: (cores - 1) / stages on cpu, at least 1).",
        ),
        click.option(
            "--stage-workers",
            type=click.Choice(["auto", "thread", "dist"]),
            default="auto",
            show_default=True,
            help="What runs each pipeline stage: a thread, or a torch.distributed rank of its own (stages "
            "overlap without sharing the GIL; docs/DISTRIBUTED.md). auto: see docs/DISTRIBUTED.md.",
        ),
        click.option(
            "--stage-ranks",
            type=click.Choice(["launch", "join"]),
            default="launch",
            show_default=True,
            help="dist: launch = start the stage ranks on this machine; join = this server is RANK 0 and "
            "the stage ranks ('strata-engine stage') join through MASTER_ADDR/MASTER_PORT/WORLD_SIZE.",
        ),
        click.option(
            "--stage-timeout",
            "stage_timeout_s",
            type=click.FloatRange(min=0, min_open=True),
            default=60.0,
            show_default=True,
            help="dist: seconds a micro-batch may take before its stage rank is "
            "declared hung (its requests fail naming the rank).",
        ),
        click.option(
            "--compile/--no-compile",
            default=False,
            show_default=True,
            help="torch: run micro-batches of decode rows through a torch.compile'd step (compiled at start, "
            "before the server is ready; docs/MODEL.md, 'The compiled decode step').",
        ),
        click.option(
            "--prompt-cache",
            "prompt_cache_mib",
            type=click.IntRange(min=0),
            default=DEFAULT_PROMPT_CACHE_MIB,
            show_default=True,
            metavar="MIB",
            help="Prompt cache: a free slot keeps its request's tokens and KV for the next request that "
            "repeats them, and prefixes pushed out of slots wait in a host-memory store of MIB MiB "
            "(least recently used out first). 0 turns both off (docs/SERVER.md, 'Prompt cache').",
        ),
        click.option(
            "--log-events/--no-log-events",
            default=True,
            show_default=True,
            help="Echo every engine event (PIECE, YIELDED, ...) as one line on stderr.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def engine_config(options: dict[str, Any]) -> EngineConfig:
    """EngineConfig from the parsed flags; a bad combination is a usage error naming it."""
    values = {name: options[name] for name in ENGINE_FLAGS}
    try:
        return EngineConfig(**values)
    except ValueError as err:
        raise click.UsageError(str(err)) from None


def engine_factory(config: EngineConfig) -> Callable[[], Any]:
    """A zero-argument builder of the Engine of `config` (serve loads it while /health says 503)."""
    keep_compile_cache()

    def build() -> Any:
        from ..engine import Engine  # imports torch: only when an engine is really built

        return Engine(config)

    return build
