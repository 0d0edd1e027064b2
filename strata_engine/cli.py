"""`strata-engine`: `serve` (the OpenAI-compatible HTTP API, docs/API.md), `generate` (one prompt, streamed) and
`stage` (one pipeline stage rank of a distributed server). Each engine flag maps to one EngineConfig field; the
STRATA_* variables are read through strata_engine.knobs and listed at the end of --help."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Callable

import click

from . import knobs
from .config import DEFAULT_PROMPT_CACHE_MIB, EngineConfig
from .kernel_switches import keep_compile_cache
from .layout import SHAPING, flags, provenance, resolve

LAYOUT_FLAGS = flags(SHAPING)  # the flags that choose a layout themselves (--layout auto then keeps them)

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
            "max_position_embeddings, or less where a quarter of the memory cannot hold that "
            "much KV cache for --batch slots.",
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


def _laid_out(flagged: EngineConfig, requested: str, print_config: bool = False) -> EngineConfig:
    """The config in the layout --layout asks for (layout.py), said on stderr; a bad combination is a usage error.
    `print_config`: each field, its value and where it came from on stdout, then exit 0 (no model is loaded)."""
    context = click.get_current_context()
    given = {
        name
        for name in (*ENGINE_FLAGS, "layout")
        if context.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    }
    try:
        config, why = resolve(flagged, requested, given)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    click.echo(f"strata-engine: layout {why}", err=True)
    for field, value, source in provenance(flagged, config, given) if print_config else ():
        click.echo(f"{field} = {value!r}  ({source})")
    if print_config:
        context.exit(0)
    return config


def _engine_factory(config: EngineConfig) -> Callable[[], Any]:
    keep_compile_cache()

    def build() -> Any:
        from .engine import Engine  # imports torch: only when an engine is really built

        return Engine(config)

    return build


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="strata", prog_name="strata-engine")
def main() -> None:
    """Strata: a reference MoE inference engine (OpenAI-compatible server, one-off generation)."""


@main.command(epilog=knobs.epilog())
@engine_options
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Anything beyond loopback needs --api-key (or --no-auth-ok).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="TCP port; 0 picks a free one. The URL is printed as 'STRATA_READY url=...' on stdout.",
)
@click.option("--api-key", default=None, help="Require 'Authorization: Bearer KEY' on every endpoint except /health.")
@click.option("--no-auth-ok", is_flag=True, help="Allow a non-loopback --host without an api key.")
@click.option("--served-model-name", default=None, help="Model id shown by /v1/models (default: the engine's).")
@click.option(
    "--max-body-bytes",
    type=click.IntRange(min=1024),
    default=8 * 1024 * 1024,
    show_default=True,
    help="Larger request bodies get 413.",
)
@click.option(
    "--drain-timeout",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="On SIGTERM/SIGINT, seconds in-flight requests get to finish; then each open stream ends "
    "with an error event naming the shutdown, and the server exits.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
    help="Server log level (stderr).",
)
@click.option(
    "--layout",
    type=click.Choice(["auto", "plain", "fastest"]),
    default="auto",
    show_default=True,
    help="fastest: two stages, two groups, 256-token chunks, the compiled decode step with C++ GEMM templates "
    "(STRATA_COMPILED_GEMMS=aten: MKL's) and its decode attention in one native call (STRATA_DECODE_KERNEL=0: ATen's per-row calls), the mixed read and the merged decode (the fastest measured layout on a multi-core CPU; docs/SERVER.md, 'Layouts'); "
    f"plain: the flags alone; auto: fastest on a CPU with 2+ cores unless a layout flag ({LAYOUT_FLAGS}) "
    "is given (STRATA_LAYOUT=plain|fastest sets what auto means).",
)
@click.option(
    "--print-config",
    is_flag=True,
    help="Print each resolved config field and where it came from "
    "(a flag, the layout, a STRATA_* variable or the default), then exit without loading the model.",
)
def serve(
    host: str,
    port: int,
    api_key: str | None,
    no_auth_ok: bool,
    served_model_name: str | None,
    max_body_bytes: int,
    drain_timeout: float,
    log_level: str,
    layout: str,
    print_config: bool,
    **options: Any,
) -> None:
    """Serve the OpenAI-compatible HTTP API (docs/API.md) until SIGTERM/SIGINT."""
    from .server.run import is_loopback
    from .server.run import serve as run_server

    config = _laid_out(engine_config(options), layout, print_config)
    try:
        api_key = knobs.read("STRATA_API_KEY") if api_key is None else api_key
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    if not api_key and not is_loopback(host) and not no_auth_ok:
        raise click.UsageError(
            f"--host {host} is reachable beyond this machine: set --api-key (or STRATA_API_KEY), "
            "or pass --no-auth-ok to serve without one"
        )
    try:
        status = run_server(
            _engine_factory(config),
            host=host,
            port=port,
            model_name=served_model_name,
            api_key=api_key,
            max_body_bytes=max_body_bytes,
            drain_timeout=drain_timeout,
            log_level=log_level,
        )
    except OSError as err:
        raise click.ClickException(str(err)) from None
    # Everything is stopped (streams ended, port closed, engine shut down); what is left is the
    # interpreter's own teardown, which took ~1.8 s (torch and its thread pools) after a drained
    # server: a prompt stop skips it.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


@main.command()
@engine_options
@click.argument("prompt")
@click.option("--max-tokens", type=click.IntRange(min=1), default=64, show_default=True, help="Tokens to generate.")
@click.option("--temperature", type=click.FloatRange(0, 100), default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=1.0, show_default=True)
@click.option("--top-k", type=click.IntRange(min=0), default=0, show_default=True, help="0 = off.")
@click.option("--sample-seed", type=int, default=None, help="Seed of this request's sampling.")
@click.option("--stop", multiple=True, help="Stop string (repeatable).")
@click.option("--ignore-eos", is_flag=True, help="Keep generating past the end-of-sequence token.")
@click.option("--prompt-ids", is_flag=True, help="PROMPT is comma-separated token ids, not text.")
@click.option("--show-ids", is_flag=True, help="After the text, print the generated token ids (comma-separated).")
def generate(
    prompt: str,
    max_tokens: int,
    temperature: float,
    top_p: float,
    top_k: int,
    sample_seed: int | None,
    stop: tuple[str, ...],
    ignore_eos: bool,
    prompt_ids: bool,
    show_ids: bool,
    **options: Any,
) -> None:
    """Generate from PROMPT ('-' reads stdin) and stream the text to stdout; timing goes to stderr."""
    from .errors import RequestError
    from .params import SamplingParams

    config = engine_config(options)
    text = sys.stdin.read() if prompt == "-" else prompt
    try:
        source: Any = [int(t) for t in text.replace(" ", "").split(",") if t] if prompt_ids else text
    except ValueError:
        raise click.BadParameter(
            "with --prompt-ids, PROMPT must be comma-separated integers", param_hint="PROMPT"
        ) from None
    try:
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            seed=sample_seed,
            stop=stop,
            ignore_eos=ignore_eos,
        )
    except RequestError as err:
        raise click.BadParameter(str(err), param_hint=f"--{(err.field or 'prompt').replace('_', '-')}") from None
    engine = _engine_factory(config)()
    with engine:
        _stream_to_terminal(engine, source, params, show_ids)


def _stream_to_terminal(engine: Any, prompt: Any, params: Any, show_ids: bool) -> None:
    from .errors import RequestError

    started = time.perf_counter()
    first = None
    shown = 0  # characters written; the engine may hold back a possible stop-string prefix until the end
    try:
        handle = engine.submit(prompt, params)
    except RequestError as err:
        raise click.BadParameter(str(err), param_hint="PROMPT") from None
    try:
        for out in handle:
            first = first or time.perf_counter()
            sys.stdout.write(out.text)
            sys.stdout.flush()
            shown += len(out.text)
    except KeyboardInterrupt:
        handle.cancel()
    completion = handle.result()
    sys.stdout.write(completion.text[shown:] + "\n")
    if show_ids:
        sys.stdout.write(",".join(map(str, completion.token_ids)) + "\n")
    sys.stdout.flush()
    elapsed = time.perf_counter() - started
    n = len(completion.token_ids)
    ttft = f"{(first - started) * 1000:.0f} ms" if first else "-"
    click.echo(
        f"[{n} tokens, finish_reason={completion.finish_reason}, first token {ttft}, "
        f"{n / elapsed if elapsed > 0 else 0:.1f} tok/s]",
        err=True,
    )


@main.command()
@click.option("--model", default=None, help="Model path on this host (default: the one the head names).")
@click.option(
    "--device",
    default=None,
    help="Device of this stage (default: the head's --devices entry; cuda:LOCAL_RANK under torchrun).",
)
@click.option("--local-rank", envvar="LOCAL_RANK", type=int, default=None, help="Set by torchrun (LOCAL_RANK).")
@click.option("--parent-pid", type=int, default=None, hidden=True)
@click.option(
    "--rendezvous-timeout",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="Seconds to wait for the head and the other ranks.",
)
def stage(
    model: str | None, device: str | None, local_rank: int | None, parent_pid: int | None, rendezvous_timeout: float
) -> None:
    """Serve one pipeline stage as a rank of a head's group (docs/DISTRIBUTED.md). The rank comes from the
    standard variables MASTER_ADDR, MASTER_PORT, RANK (1..WORLD_SIZE-1), WORLD_SIZE; torchrun sets them."""
    from .runtime.stage_ranks.stage import run_stage_rank

    sys.exit(run_stage_rank(model, device, local_rank, parent_pid, rendezvous_timeout))


@main.command()
@click.option("--gguf", "out", type=click.Path(dir_okay=False), required=True, help="The GGUF file to write.")
@click.option("--model", default="strata-tiny-moe", show_default=True, help="Model name or directory to export.")
@click.option(
    "--dtype",
    type=click.Choice(["f32", "f16"]),
    default="f32",
    show_default=True,
    help="Tensor type of the matrices (f32: the checkpoint's f16 values widened exactly; f16: as stored, "
    "half the file; norms stay f32 either way).",
)
def export(out: str, model: str, dtype: str) -> None:
    """Write MODEL as a GGUF file that llama.cpp serves with our greedy tokens (docs/ENGINES.md)."""
    from .model.gguf_export import ExportError, export_gguf

    try:
        path = export_gguf(model, out, dtype)
    except ModuleNotFoundError as err:
        raise click.ClickException(f"{err}: the gguf package comes with llama.cpp (bash scripts/install_llama_cpp.sh)")
    except ExportError as err:
        raise click.ClickException(str(err)) from None
    from .model.weights import read_config, resolve_model_path

    window = read_config(resolve_model_path(model)).sliding_window
    if window:
        click.echo(
            f"note: llama.cpp's qwen3moe applies no sliding window; its answers equal ours while prompt and "
            f"output stay within {window} tokens",
            err=True,
        )
    click.echo(path)


if __name__ == "__main__":  # python -m strata_engine.cli
    main()
