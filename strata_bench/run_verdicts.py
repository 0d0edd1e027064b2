"""Verdicts on one run from what it recorded: did the joiners arrive while the streams decoded (`missed_join`),
did the server run the streams one at a time (`serialised`), and did the client's own event loop stall
(`client_stall`), so that the run's timing says more about this machine's client than about the engine."""

from __future__ import annotations

from .engines.result import StreamResult

CLIENT_STALL_S = 0.5  # a client stall this long is a run warning


def client_stall(stall: list[float], origin: float) -> list[str]:
    """A warning when the client's loop woke `stall[0]` s late (from perf_counter `stall[1]`), else none."""
    if not stall or stall[0] < CLIENT_STALL_S:
        return []
    return [
        f"client stall: the bench's event loop ran {stall[0]:.2f} s late from +{stall[1] - origin:.2f} s: sends "
        f"and token stamps then were late (this machine's client, not the engine)"
    ]


def serialised(results: list[StreamResult]) -> list[str]:
    """A server that ran the streams one at a time: no two streams' token spans (first to last) overlap.
    (Joiners are left out: a short question may rightly be answered while a long read waits.)"""
    spans = sorted((r.times[0], r.times[-1]) for r in results if r.times and r.role == "stream")
    if len(spans) < 2 or any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])):
        return []
    return [
        "serialised: the server ran the streams one at a time (no stream received a token while another "
        "was streaming): the run measures a queue, not interleaving"
    ]


def missed_join(results: list[StreamResult]) -> str | None:
    """Why the run did not see the joiners arrive while the streams decode, or None when it did: every stream
    must still be decoding (tokens at or after that moment, or closed by us) when the last joiner has its
    first token. Scenarios without streams or joiners have nothing to miss."""
    streams = [r for r in results if r.role == "stream"]
    firsts = [r.first_token_at for r in results if r.role == "joiner" and r.first_token_at is not None]
    if not streams or not firsts:
        return None
    last_first = max(firsts)
    ended = [r for r in streams if not r.cancelled and (not r.times or r.times[-1] < last_first)]
    if not ended:
        return None
    names = ", ".join(f"{r.name} ({len(r.times)} tokens)" for r in ended)
    return (
        f"the joiners did not arrive while the streams decode: {names} ended before the last joiner's first "
        f"token (at most max_tokens, or the server's context, reached first); nothing of the join was measured"
    )
