"""`strata-engine serve`: the OpenAI-compatible HTTP API (docs/API.md) until SIGTERM/SIGINT, in the layout
`--layout` resolves (layout.py); the STRATA_* variables are listed at the end of its --help."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click

from .. import knobs
from ..config import EngineConfig
from ..layout import SHAPING, flags, provenance, resolve
from .engine_flags import ENGINE_FLAGS, engine_config, engine_factory, engine_options

LAYOUT_FLAGS = flags(SHAPING)  # the flags that choose a layout themselves (--layout auto then keeps them)


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


@click.command(epilog=knobs.epilog())
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
    from ..server.run import is_loopback
    from ..server.run import serve as run_server

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
            engine_factory(config),
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
