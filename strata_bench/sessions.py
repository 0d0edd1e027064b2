"""Agent sessions: one run of a scenario of sessions, each a chain of dependent requests (driver.py calls it).

A session's first prompt is the scenario's shared system prompt plus its own cold context; each later turn
is sent `think_s` after the previous answer and is that turn's prompt + the answer (its token ids, or its
text for a text server) + a new tool result, as an agent loop sends it, so a prefix cache may serve all
but the tool result. Every piece is a cold prompt (prompts.py: seeded by the bench nonce, round, scenario
and piece; identical for the arms of a round), built before the clock starts. Sessions without
`after_turns` start with the run; one with it joins when each of them has had that many answers, plus
`at_s`. A turn is a StreamResult named `<session>.t<turn>`, role `session`; the run JSON adds each turn's
session, turn index and whether its session joined (`session_fields`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from .engines.probe import ServerInfo, count_tokens
from .engines.result import StreamResult
from .engines.stream import stream_completion
from .prompts import prompt_digest, prompt_seed, sized_text_prompt, token_prompt
from .scenarios import RequestSpec, Scenario


class SessionsDontFit(ValueError):
    """A session's last turn would not fit the server's context."""


class SessionRun:
    """The sessions of one run; `results` grows as turns are sent, so a failed run keeps what it got."""

    def __init__(
        self,
        url: str,
        scenario: Scenario,
        info: ServerInfo,
        prompt_key: tuple[Any, ...],
        run_id: str,
        time_scale: float,
        warnings: list[str],
    ):
        self.url, self.scenario, self.info, self.run_id = url, scenario, info, run_id
        self.wall = 1.0 / time_scale
        self.results: list[StreamResult] = []
        self.fields: dict[str, dict[str, Any]] = {}
        self._key, self._warnings = prompt_key, warnings
        self._text = info.prompt_mode != "ids"
        self.system = self._piece("system", scenario.system_tokens) if scenario.system_tokens else self._empty()
        self.contexts = {s.name: self._piece(s.name, s.prompt_tokens) for s in scenario.sessions}
        self.tools = {
            (s.name, t): self._piece(f"{s.name}.tool{t}", s.tool_tokens)
            for s in scenario.sessions
            for t in range(1, s.turns)
        }
        for spec in scenario.sessions:
            self._fit(spec)
        self.answers: dict[str, int] = {s.name: 0 for s in scenario.sessions}
        self._answered = asyncio.Event()

    def _empty(self) -> list[int] | str:
        return "" if self._text else []

    def _piece(self, what: str, length: int) -> list[int] | str:
        seed = prompt_seed(*self._key, what)
        if not self._text:
            return token_prompt(seed, length, self.info.vocab_size or 2, self.info.eos_token_id)
        text, measured = sized_text_prompt(seed, length, lambda t: count_tokens(self.url, self.info, t))
        if measured is None and what == "system":
            self._warnings.append(
                f"{self.info.family.label} cannot count tokens: the sessions' text pieces are "
                "about as many words as tokens asked"
            )
        return " " + text

    def _fit(self, spec: RequestSpec) -> None:
        longest = (
            self.scenario.system_tokens
            + spec.prompt_tokens
            + (spec.turns - 1) * (spec.max_tokens + spec.tool_tokens)
            + spec.max_tokens
        )
        if self.info.ctx is not None and longest > self.info.ctx:
            raise SessionsDontFit(
                f"session {spec.name}: its last turn holds {longest} tokens with its answer, over the "
                f"server's context of {self.info.ctx} per request: lower --scale or raise the context"
            )

    async def run(self) -> None:
        """Every session to its end (or its first failed turn)."""
        starters = [s for s in self.scenario.sessions if s.after_turns is None]
        tasks = [asyncio.create_task(self._session(s, starters)) for s in self.scenario.sessions]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _session(self, spec: RequestSpec, starters: list[RequestSpec]) -> None:
        if spec.after_turns is not None:
            while not all(self.answers[s.name] >= min(spec.after_turns, s.turns) for s in starters):
                self._answered.clear()
                await self._answered.wait()
        if spec.at_s:
            await asyncio.sleep(spec.at_s * self.wall)
        family = self.info.family
        prompt = self.system + self.contexts[spec.name]
        for turn in range(spec.turns):
            name = f"{spec.name}.t{turn}"
            result = StreamResult(
                name=name,
                role="session",
                request_id=f"{self.run_id}-{name}",
                prompt_tokens=self._length(spec, turn),
                prompt_sha256=prompt_digest(prompt),
                max_tokens=spec.max_tokens,
            )
            self.results.append(result)
            self.fields[name] = {"session": spec.name, "turn": turn, "joined": spec.after_turns is not None}
            body = family.request_body(prompt, spec.max_tokens, model=self.info.model, warm=True)
            await stream_completion(
                self.url,
                json.dumps(body, separators=(",", ":")).encode(),
                result,
                path=family.endpoint,
                wire=family.wire,
                headers=family.headers(result.request_id),
            )
            self.answers[spec.name] += 1
            self._answered.set()
            if result.error:
                break
            if turn + 1 < spec.turns:
                await asyncio.sleep(spec.think_s * self.wall)
                prompt = prompt + self._answer(result) + self.tools[(spec.name, turn + 1)]
        self.answers[spec.name] = max(self.answers[spec.name], spec.turns)  # a session that ended holds no one up
        self._answered.set()

    def _length(self, spec: RequestSpec, turn: int) -> int:
        return self.scenario.system_tokens + spec.prompt_tokens + turn * (spec.max_tokens + spec.tool_tokens)

    def _answer(self, result: StreamResult) -> list[int] | str:
        """The answer as the next prompt repeats it: its token ids, or its text on a text server."""
        if self._text:
            return result.text
        if not result.token_ids:
            result.warnings.append("the server returned no token ids: the next turn's prompt leaves this answer out")
        return list(result.token_ids)


def session_fields(run_requests: list[dict[str, Any]], fields: dict[str, dict[str, Any]]) -> None:
    """Add each turn's session, turn index and `joined` to its request dict in the run JSON."""
    for request in run_requests:
        request.update(fields.get(request["name"], {}))


def missed_session_join(requests: list[dict[str, Any]]) -> str | None:
    """Why the run did not see a session join while the others were still working, or None when it did:
    some starting session must still have had a turn to send when the joining session's first answer
    began. (A fast engine can finish the others first; then nothing of the join was measured.)"""
    joins = [r for r in requests if r.get("joined") and r.get("turn") == 0]
    others = [r for r in requests if r.get("role") == "session" and not r.get("joined")]
    if not joins or not others:
        return None
    first = min((r.get("first_token_at") or r.get("ended_at") or 0.0) for r in joins)
    last_sent = max((r.get("sent_at") or 0.0) for r in others)
    last_end = max((r.get("ended_at") or 0.0) for r in others)
    if max(last_sent, last_end) >= first:
        return None
    return (
        f"the other sessions had ended (their last answer at {last_end:.3f} s) before the joining session's first "
        f"token ({first:.3f} s): raise their turns or lower after_turns"
    )
