"""Scenarios: which requests a run sends and when, as data (strata_bench/scenarios/*.json or any path).

Streams are sent at the run's start and, when the scenario has joiners, decode at least their `max_tokens`
and at least until `settle_s` after the last joiner's first token, however fast the engine: they ask for
all the room the server's context leaves and the driver closes them when both hold (with `stream_tail_s`
set: that long after the last joiner's first token, whatever their length). `max_tokens` caps them only on
a server that does not say its context (or in a scenario without joiners). So every arm sees the joiners
arrive while streams decode, and a slow engine still does the scenario's work; a run where the join was
missed is `missed` (driver.py). Every other request (a joiner) is sent `at_s`
seconds after the anchor: the moment every stream has its first token, plus `settle_s` (the run's start
when there are no streams). `scaled(scale)` multiplies every length and delay (prompt lengths, streams' decode lengths,
`at_s`, `settle_s`, `stream_tail_s`); a joiner's `max_tokens` stays, it only needs its first tokens.

A `session` is an agent: `turns` dependent requests, each the previous prompt + its answer + a new tool result
of `tool_tokens`, `think_s` apart; every session's first prompt starts with the scenario's shared
`system_tokens`, then `prompt_tokens` of its own. A session with `after_turns: K` joins when every session
without it has had K answers (plus `at_s`); the others start with the run. Scaled: system, context and tool
lengths, `think_s`, `at_s`; a turn's answer length (`max_tokens`) stays, like a joiner's. sessions.py drives them.

`count: N` expands a request into `name0..name{N-1}`; with `prompt_tokens_max` their prompt lengths are spread
evenly from `prompt_tokens` (the first) to `prompt_tokens_max` (the last), so N agents hold contexts of N lengths.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROLES = ("stream", "joiner", "session")
SCENARIO_DIR = Path(__file__).with_name("scenarios")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_SESSION_KEYS = {"turns", "tool_tokens", "think_s", "after_turns"}
_REQUEST_KEYS = {
    "name",
    "role",
    "prompt_tokens",
    "max_tokens",
    "at_s",
    "label",
    "count",
    "prompt_tokens_max",
} | _SESSION_KEYS
_SCENARIO_KEYS = {"name", "description", "settle_s", "stream_tail_s", "system_tokens", "requests"}


class ScenarioError(ValueError):
    """A scenario file or name is wrong; the message names the file and the field."""


@dataclass(frozen=True)
class RequestSpec:
    name: str
    role: str
    prompt_tokens: int
    max_tokens: int
    at_s: float = 0.0  # joiners: seconds after the anchor; streams: always 0 (sent at the start)
    label: str = ""  # the report's wording, e.g. "the 64K prompt"
    turns: int = 1  # sessions: requests in the chain
    tool_tokens: int = 0  # sessions: the tool result each later turn adds
    think_s: float = 0.0  # sessions: seconds from an answer to the next turn
    after_turns: int | None = None  # sessions: join when every starting session has had this many answers

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ScenarioError(f"request name {self.name!r} must be letters, digits, '_', '.', '-'")
        if self.role not in ROLES:
            raise ScenarioError(f"request {self.name!r}: role must be one of {ROLES}, got {self.role!r}")
        if not isinstance(self.prompt_tokens, int) or self.prompt_tokens < 1:
            raise ScenarioError(
                f"request {self.name!r}: prompt_tokens must be an integer >= 1, got {self.prompt_tokens!r}"
            )
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ScenarioError(f"request {self.name!r}: max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not isinstance(self.at_s, (int, float)) or self.at_s < 0:
            raise ScenarioError(f"request {self.name!r}: at_s must be a number >= 0, got {self.at_s!r}")
        if self.role == "stream" and self.at_s != 0:
            raise ScenarioError(f"request {self.name!r}: streams start with the run; at_s is for joiners")
        if self.role != "session":
            if (self.turns, self.tool_tokens, self.think_s, self.after_turns) != (1, 0, 0.0, None):
                raise ScenarioError(f"request {self.name!r}: turns, tool_tokens, think_s, after_turns are for sessions")
            return
        if not isinstance(self.turns, int) or self.turns < 1:
            raise ScenarioError(f"request {self.name!r}: turns must be an integer >= 1, got {self.turns!r}")
        if not isinstance(self.tool_tokens, int) or self.tool_tokens < (1 if self.turns > 1 else 0):
            raise ScenarioError(f"request {self.name!r}: tool_tokens must be an integer >= 1, got {self.tool_tokens!r}")
        if not isinstance(self.think_s, (int, float)) or self.think_s < 0:
            raise ScenarioError(f"request {self.name!r}: think_s must be a number >= 0, got {self.think_s!r}")
        if self.after_turns is not None and (not isinstance(self.after_turns, int) or self.after_turns < 0):
            raise ScenarioError(f"request {self.name!r}: after_turns must be an integer >= 0, got {self.after_turns!r}")

    @property
    def display(self) -> str:
        return self.label or self.name


@dataclass(frozen=True)
class Scenario:
    name: str
    requests: tuple[RequestSpec, ...]
    description: str = ""
    settle_s: float = 1.0
    stream_tail_s: float | None = None  # close streams this long after the last joiner's first token (None: settle_s)
    system_tokens: int = 0  # sessions: the system prompt every session's first turn starts with
    scale: float = 1.0  # already applied to the lengths and delays below
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        where = f"scenario {self.name!r}" + (f" ({self.source})" if self.source else "")
        if not _NAME.match(self.name):
            raise ScenarioError(f"{where}: name must be letters, digits, '_', '.', '-'")
        if not self.requests:
            raise ScenarioError(f"{where}: needs at least one request")
        names = [r.name for r in self.requests]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ScenarioError(f"{where}: request names must be unique, repeated: {dupes}")
        if self.settle_s < 0:
            raise ScenarioError(f"{where}: settle_s must be >= 0, got {self.settle_s}")
        if self.stream_tail_s is not None and self.stream_tail_s < 0:
            raise ScenarioError(f"{where}: stream_tail_s must be >= 0 or null, got {self.stream_tail_s}")
        if self.scale <= 0:
            raise ScenarioError(f"{where}: scale must be > 0, got {self.scale}")
        if self.sessions and len(self.sessions) != len(self.requests):
            raise ScenarioError(f"{where}: a scenario of sessions has only sessions (a session is its own stream)")
        if not isinstance(self.system_tokens, int) or self.system_tokens < 0:
            raise ScenarioError(f"{where}: system_tokens must be an integer >= 0, got {self.system_tokens!r}")
        if self.system_tokens and not self.sessions:
            raise ScenarioError(f"{where}: system_tokens is for scenarios of sessions")
        if self.sessions and all(r.after_turns is not None for r in self.sessions):
            raise ScenarioError(f"{where}: every session waits for others (after_turns): none starts the run")

    @property
    def streams(self) -> tuple[RequestSpec, ...]:
        return tuple(r for r in self.requests if r.role == "stream")

    @property
    def joiners(self) -> tuple[RequestSpec, ...]:
        return tuple(r for r in self.requests if r.role == "joiner")

    @property
    def sessions(self) -> tuple[RequestSpec, ...]:
        return tuple(r for r in self.requests if r.role == "session")

    def scaled(self, scale: float) -> "Scenario":
        """Every length and delay times `scale` (token counts rounded, at least 1), joiners' max_tokens kept."""
        if scale <= 0:
            raise ScenarioError(f"--scale must be > 0, got {scale}")

        def tokens(n: int) -> int:
            return max(1, round(n * scale))

        requests = tuple(
            replace(
                r,
                prompt_tokens=tokens(r.prompt_tokens),
                at_s=r.at_s * scale,
                max_tokens=tokens(r.max_tokens) if r.role == "stream" else r.max_tokens,
                tool_tokens=tokens(r.tool_tokens) if r.tool_tokens else 0,
                think_s=r.think_s * scale,
            )
            for r in self.requests
        )
        tail = None if self.stream_tail_s is None else self.stream_tail_s * scale
        return replace(
            self,
            requests=requests,
            settle_s=self.settle_s * scale,
            stream_tail_s=tail,
            scale=self.scale * scale,
            system_tokens=tokens(self.system_tokens) if self.system_tokens else 0,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("source")
        # session fields only where they mean something, so other scenarios' JSON is as it was
        out["requests"] = [
            {k: v for k, v in asdict(r).items() if r.role == "session" or k not in _SESSION_KEYS} for r in self.requests
        ]
        if not self.system_tokens:
            out.pop("system_tokens")
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "") -> "Scenario":
        where = source or "scenario"
        if not isinstance(data, dict):
            raise ScenarioError(f"{where}: a scenario is a JSON object")
        unknown = set(data) - _SCENARIO_KEYS - {"scale"}
        if unknown:
            raise ScenarioError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(_SCENARIO_KEYS)}")
        if "name" not in data or "requests" not in data:
            raise ScenarioError(f"{where}: 'name' and 'requests' are required")
        if not isinstance(data["requests"], list):
            raise ScenarioError(f"{where}: 'requests' must be a list")
        requests: list[RequestSpec] = []
        for i, item in enumerate(data["requests"]):
            requests.extend(_expand_request(item, f"{where} requests[{i}]"))
        try:
            return cls(
                name=data["name"],
                requests=tuple(requests),
                description=data.get("description", ""),
                settle_s=float(data.get("settle_s", 1.0)),
                stream_tail_s=None if data.get("stream_tail_s") is None else float(data["stream_tail_s"]),
                system_tokens=data.get("system_tokens", 0),
                scale=float(data.get("scale", 1.0)),
                source=source,
            )
        except (TypeError, ValueError) as exc:
            raise ScenarioError(f"{where}: {exc}") from None


def _expand_request(item: Any, where: str) -> list[RequestSpec]:
    if not isinstance(item, dict):
        raise ScenarioError(f"{where}: each request is a JSON object")
    unknown = set(item) - _REQUEST_KEYS
    if unknown:
        raise ScenarioError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(_REQUEST_KEYS)}")
    missing = {"name", "role", "prompt_tokens", "max_tokens"} - set(item)
    if missing:
        raise ScenarioError(f"{where}: missing field(s) {sorted(missing)}")
    fields = {k: v for k, v in item.items() if k not in ("count", "prompt_tokens_max")}
    count = item.get("count")
    try:
        if count is None:
            if "prompt_tokens_max" in item:
                raise ScenarioError("prompt_tokens_max spreads the lengths of a `count`: give count too")
            return [RequestSpec(**fields)]
        if not isinstance(count, int) or count < 1:
            raise ScenarioError(f"count must be an integer >= 1, got {count!r}")
        lengths = _spread(item["prompt_tokens"], item.get("prompt_tokens_max", item["prompt_tokens"]), count)
        # "stream" x 4 -> stream0..stream3: each its own request with its own cold prompt
        return [
            RequestSpec(**{**fields, "name": f"{item['name']}{i}", "prompt_tokens": n}) for i, n in enumerate(lengths)
        ]
    except ScenarioError as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def _spread(low: Any, high: Any, count: int) -> list[Any]:
    """`count` prompt lengths from `low` to `high`, evenly spaced and rounded (all `low` when they are equal)."""
    if low == high or not isinstance(low, int) or isinstance(low, bool):
        return [low] * count  # RequestSpec names a bad prompt_tokens
    if not isinstance(high, int) or isinstance(high, bool) or high < low:
        raise ScenarioError(f"prompt_tokens_max must be an integer >= prompt_tokens ({low}), got {high!r}")
    if count == 1:
        return [low]
    return [low + round(i * (high - low) / (count - 1)) for i in range(count)]


def available_scenarios() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.json"))}


def load_scenario(name_or_path: str) -> Scenario:
    """A bundled scenario by name, or a JSON file by path."""
    path = Path(name_or_path)
    if not (name_or_path.endswith(".json") or path.is_file()):
        bundled = available_scenarios()
        if name_or_path not in bundled:
            raise ScenarioError(
                f"unknown scenario {name_or_path!r}; available: {', '.join(bundled) or 'none'} (or a path to a .json file)"
            )
        path = bundled[name_or_path]
    if not path.is_file():
        raise ScenarioError(f"scenario file {str(path)!r} does not exist")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{path}: not valid JSON: {exc}") from None
    return Scenario.from_dict(data, source=str(path))


def parse_scenario_list(text: str) -> list[Scenario]:
    """`two_joiners,followup` -> scenarios; unknown names are an error listing what exists."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ScenarioError("no scenario given; available: " + ", ".join(available_scenarios()))
    scenarios = [load_scenario(n) for n in names]
    seen = [s.name for s in scenarios]
    dupes = sorted({n for n in seen if seen.count(n) > 1})
    if dupes:
        raise ScenarioError(f"scenario(s) given twice: {dupes}")
    return scenarios
