"""The executor contract between the pure-Python scheduler and whatever runs the model.

It lives beside the scheduler because the scheduler owns it: executors import it (an arrow down), the
scheduler never imports an executor. The scheduler decides *what* runs (read these chunks of this request, decode these groups for a
budget); an executor decides *how* (torch pipeline stages in `runtime/pipeline.py`, or the cost model
in `executors/sim/`): its read and mixed runs are `scheduler/run_loop.py`'s loops over its own stages (when
an interruptible run ends, which group rides), its decode asks `run_loop.DecodeSpec`. Executors report measured milliseconds and deliver each sampled token through
`on_token` the moment it exists, so streaming clients see true arrival times.
This module imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from ..tokens import SampledToken
from .prompt_cache.copies import PrefixCopies
from .run_loop import DecodeSpec, RunSpec

if TYPE_CHECKING:
    from .request import Request


# on_token(request, token) is called once per sampled token, in order, on the executor's thread.
OnToken = Callable[["Request", SampledToken], None]


@dataclass(frozen=True)
class RunResult:
    """Outcome of one pipelined read run (one or more chunks of one prompt, drained at the end)."""

    ms: float
    chunks: int
    tokens: int  # prompt tokens read by this run
    first_token: SampledToken | None = None  # set when the run read the prompt's last token


@dataclass(frozen=True)
class DecodeResult:
    ms: float
    rounds: int  # micro-batch rounds: each live group advanced by one token per round
    tokens: int  # tokens sampled in total


@dataclass(frozen=True)
class MixedResult:
    """Outcome of one mixed read run: micro-batches that each carry one read chunk plus one group's decode tokens."""

    ms: float
    chunks: int
    tokens: int
    decode_tokens: int
    chunk_ms: tuple[float, ...] = field(default_factory=tuple)
    first_token: SampledToken | None = None


class Executor(PrefixCopies, Protocol):
    """Every call the scheduler makes (`scheduler.py`, `endings.py`), on its step thread, and the prompt
    cache's members (`prompt_cache/copies.PrefixCopies`; `NoPrefixCache` for an executor without it)."""

    num_stages: int  # pipeline stages: the scheduler sizes groups and micro-batches by it

    def read(self, request: "Request", run: RunSpec, on_token: OnToken) -> RunResult:
        """Read prompt positions [start, end) of each of `run.chunks`, in order, as ONE pipelined run: the
        chunks stream through the stages back to back and only the run's end drains the pipeline. When the
        last chunk ends at the prompt's end, sample the first output token (and call on_token).
        run.should_stop (mixed read and pause target only; None = never asked) and run.budget_ms (the pause
        target): before each chunk after the first, `read_policy.end_run` says whether the run ends
        there, after the chunks in flight (`run_loop.read_run`); RunResult says what was read."""

    def decode(self, groups: Sequence[Sequence["Request"]], on_token: OnToken, limits: DecodeSpec) -> DecodeResult:
        """Decode the groups as micro-batches through the pipeline: keep it full while `limits.goes_on`
        (max_rounds rounds, budget_ms of the executor's clock, should_stop at a micro-batch boundary);
        then drain. A request whose phase is no longer DECODING (it finished in on_token) is left out of
        later micro-batches."""

    def mixed(
        self, request: "Request", run: RunSpec, groups: Sequence[Sequence["Request"]], on_token: OnToken
    ) -> MixedResult:
        """The mixed read (`run_loop.mixed_run`): each chunk in one micro-batch together with the decode
        tokens of the group `read_policy.choose_rider` picks, pipelined, draining only at the end.
        run.should_stop as in read; run.max_gap_ms (a pause target): a group rides only when it is due."""

    def prepare_slot(self, slot: int, keep_tokens: int = 0) -> None:
        """A new request takes the slot; its first keep_tokens positions stay (the prompt cache), the rest
        will be written. Called with one argument when the prompt cache is off."""

    def free_slot(self, slot: int) -> None:
        """The slot's request ended. With the prompt cache on, its KV must stay until prepare_slot."""
