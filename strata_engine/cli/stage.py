"""`strata-engine stage`: one pipeline stage rank of a head's group (runtime/stage_ranks/, docs/DISTRIBUTED.md)."""

from __future__ import annotations

import sys

import click


@click.command()
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
    from ..runtime.stage_ranks.stage import run_stage_rank

    sys.exit(run_stage_rank(model, device, local_rank, parent_pid, rendezvous_timeout))
