"""`strata-engine generate`: one prompt, its text streamed to stdout and its timing to stderr."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from .engine_flags import engine_config, engine_factory, engine_options


@click.command()
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
    from ..errors import RequestError
    from ..params import SamplingParams

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
    engine = engine_factory(config)()
    with engine:
        _stream_to_terminal(engine, source, params, show_ids)


def _stream_to_terminal(engine: Any, prompt: Any, params: Any, show_ids: bool) -> None:
    from ..errors import RequestError

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
