"""`strata-engine`: `serve` (the OpenAI-compatible HTTP API, docs/API.md), `generate` (one prompt, streamed),
`stage` (one pipeline stage rank of a distributed server), `export` (the model as GGUF) and `tune` (which layout
serves faster on this machine). The group is here,
each command in the module of its name; `engine_flags.py` holds the flags serve and generate share, each one
EngineConfig field. The STRATA_* variables are read through strata_engine.knobs and listed at the end of
`serve --help`."""

from __future__ import annotations

import click

from ..engine_info import version
from . import export, generate, serve, stage, tune


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(version=version(), prog_name="strata-engine")
def main() -> None:
    """Strata: a reference MoE inference engine (OpenAI-compatible server, one-off generation)."""


for _command in (serve.serve, generate.generate, stage.stage, export.export, tune.tune):
    main.add_command(_command)
