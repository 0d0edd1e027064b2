"""`strata-engine tune`: time `--layout plain` and `--layout fastest` on this machine and keep the faster one in the
machine profile that `serve --layout auto` follows (tuning.py times them, machine_profile.py keeps the verdict)."""

from __future__ import annotations

import json
from typing import Any

import click

from ..layout import resolve
from .engine_flags import ENGINE_FLAGS, engine_config, engine_options, keep_compile_cache


@click.command()
@engine_options
@click.option("--tokens", type=click.IntRange(min=1), default=64, show_default=True, help="Tokens each stream decodes.")
@click.option(
    "--read",
    "read_tokens",
    type=click.IntRange(min=1),
    default=2048,
    show_default=True,
    help="The long prompt's tokens.",
)
@click.option("--show", is_flag=True, help="Print this machine's kept entry for --model (JSON) and exit; 1 if none.")
def tune(tokens: int, read_tokens: int, show: bool, **options: Any) -> None:
    """Time the plain and the fastest layout on this machine, on the same work (--batch streams decoding --tokens
    tokens together, then one --read-token prompt alone, after a warm-up), and keep the one that did it sooner
    for `serve --layout auto` (a minute or two: the fastest layout compiles first). The profile is kept per CPU,
    core count, torch, Strata version and model in machine-profile.json in the cache folder
    ($XDG_CACHE_HOME/strata, else ~/.cache/strata); delete it to go back to the documented default."""
    from .. import machine_profile, tuning

    config = engine_config(options)
    if show:
        entry = machine_profile.read(config.model, config.env)
        if entry is None:
            click.echo(f"no profile for this machine and {config.model} in {machine_profile.profile_path(config.env)}")
            raise SystemExit(1)
        click.echo(json.dumps(entry, indent=1, sort_keys=True))
        return
    context = click.get_current_context()
    given = {
        name
        for name in ENGINE_FLAGS
        if context.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    }
    try:
        configs = {name: resolve(config, name, given)[0] for name in machine_profile.CANDIDATES}
    except ValueError as err:
        raise click.UsageError(f"{err}: tune compares the layouts themselves") from None
    keep_compile_cache()  # the fastest layout's compiled step lands in the cache a later serve reads
    tuning.tune(  # progress on stderr, the figures and the verdict on stdout
        configs, config.batch, tokens, read_tokens, config.model, say=lambda line: click.echo(line, err=True),
        env=config.env, report=click.echo,
    )  # fmt: skip
