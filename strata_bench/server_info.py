"""What a server says about itself before a run: model name, token-id input, vocabulary, context, slots.

Strata engines answer GET /v1/engine; other OpenAI-compatible servers are probed through /v1/models and
then get text prompts. GET /v1/events (Strata) gives the engine's own decisions (pieces, give-ways).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import httpx

_FAR_AHEAD = 10**15


@dataclass(frozen=True)
class ServerInfo:
    model: str | None
    supports_token_ids: bool
    vocab_size: int | None
    eos_token_id: int | None
    ctx: int | None
    batch: int | None
    engine: dict[str, Any] | None  # GET /v1/engine as served, for provenance

    @property
    def prompt_mode(self) -> str:
        return "ids" if self.supports_token_ids and self.vocab_size else "text"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def probe_server(client: httpx.AsyncClient, url: str) -> ServerInfo:
    engine = await _get_json(client, f"{url}/v1/engine")
    models = await _get_json(client, f"{url}/v1/models")
    first_model = {}
    if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
        first_model = models["data"][0] or {}
    engine = engine if isinstance(engine, dict) else None
    e = engine or {}
    return ServerInfo(
        model=first_model.get("id") or e.get("model"),
        supports_token_ids=bool(e.get("supports_token_ids")),
        vocab_size=_int_or_none(e.get("vocab_size")),
        eos_token_id=_int_or_none(e.get("eos_token_id")),
        ctx=_int_or_none(e.get("ctx")) or _int_or_none(first_model.get("max_model_len")),
        batch=_int_or_none(e.get("batch")),
        engine=engine,
    )


async def event_index(client: httpx.AsyncClient, url: str) -> int | None:
    """The next event index (where this run's events will start); None if the server has no event feed."""
    # Ask from far ahead: the answer is empty and its header names the next index, without shipping a
    # long-lived server's whole history; a server without the header is asked for everything and counted.
    ahead = await _events(client, url, _FAR_AHEAD)
    if ahead is None:
        return None
    if ahead[1] is not None:
        return ahead[1]
    everything = await _events(client, url, 0)
    return None if everything is None else len(everything[0])


async def fetch_events(client: httpx.AsyncClient, url: str, since: int) -> tuple[list[dict[str, Any]], int] | None:
    """Events with index >= since and the next index to ask for; None without an event feed."""
    got = await _events(client, url, since)
    if got is None:
        return None
    events, next_index = got
    return events, since + len(events) if next_index is None else next_index


async def _events(client: httpx.AsyncClient, url: str, since: int) -> tuple[list[dict[str, Any]], int | None] | None:
    try:
        resp = await client.get(f"{url}/v1/events", params={"since": since}, timeout=10.0)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    events = []
    for line in resp.text.splitlines():
        if line.strip():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    header = resp.headers.get("X-Strata-Next-Index", "")
    return events, (int(header) if header.isdigit() else None)


async def _get_json(client: httpx.AsyncClient, url: str) -> Any:
    try:
        resp = await client.get(url, timeout=10.0)
        return resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
