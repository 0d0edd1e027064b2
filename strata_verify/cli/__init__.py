"""`strata-verify`: the CI gate's command line (interleave, determinism, answers, needle, builds, cache, kv-quality).

The group is here, each subcommand in the module of its name: a small function that parses its options, then
hands the Report and the check to `common.run_check`, which runs it and, through `common.finish`, prints text
(or `--markdown`), writes `--junit`/`--json`, and exits 0 (every check holds), 1 (a check failed or was not
exercised) or 2 (the gate could not run; the engine's stderr is shown).
"""

from __future__ import annotations

import click

from strata_bench.engines.launcher import interrupt_on_sigterm
from strata_verify.cli import answers, builds, cache, determinism, interleave, kv_quality, needle


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Text-equality gate for engine scheduler changes (see docs/VERIFY.md)."""
    interrupt_on_sigterm()


for _command in (
    interleave.interleave,
    determinism.determinism,
    needle.needle,
    answers.answers,
    builds.builds,
    cache.cache,
    kv_quality.kv_quality,
):
    main.add_command(_command)
