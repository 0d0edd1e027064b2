"""What the cache check sends: agent sessions as data (sizes from a scale, prompts from a seed), and its options.

A session's first turn is the shared system prompt plus the session's own context; every later turn is the
previous turn's prompt, that turn's answer tokens, and a new tool result: what an agent loop sends. So
every turn after the first repeats a prefix the engine has read, and a prompt cache may serve it. Prompt
ids come from the bench's cold-prompt generator (strata_bench.prompts), seeded by the run's nonce, so no
earlier run's cache holds them; the long read of the give-way phase is under no prefix any session has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strata_bench.prompts import prompt_seed, token_prompt
from strata_verify.behaviours import parse_lacks
from strata_verify.diverge import NEAR_TIE

# Sizes at --scale 1, in tokens: small enough for a CPU CI run of the embedded model.
SYSTEM_TOKENS = 512  # the system prompt every session shares
CONTEXT_TOKENS = 512  # each session's own first context (its repository, its task)
TOOL_TOKENS = 128  # each later turn's new tool result
LONG_TOKENS = 4096  # the long cold read a session turn gives way to (over twice the turn's prompt)
# Behaviours the cache check may be told the engine lacks (--lacks), and the step each one's evidence is.
CACHE_BEHAVIOURS = {
    "give-way": "a long read gives way to a shorter prompt (step 'give-way mid-session')",
    "events": "an event feed, GET /v1/events (hits then from usage only; evictions cannot be shown)",
}


@dataclass(frozen=True)
class CachePlan:
    scale: float = 1.0
    sessions: int = 2  # sessions of the main phase, run side by side
    turns: int = 4  # turns per session of the main phase
    evict_sessions: int = 6  # sessions of the eviction phase, more than a small engine's slots
    evict_turns: int = 3
    answer_tokens: int = 16  # tokens each turn generates (ignore_eos): the reply that joins the context

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"--scale must be > 0, got {self.scale}")
        if self.sessions < 1 or self.evict_sessions < 1:
            raise ValueError(
                f"--sessions and --evict-sessions must be >= 1, got {self.sessions}, {self.evict_sessions}"
            )
        if self.turns < 2 or self.evict_turns < 2:
            raise ValueError(
                f"--turns must be >= 2 (a session's later turns are what a cache serves), got {self.turns}"
            )
        if self.answer_tokens < 1:
            raise ValueError(f"--tokens must be >= 1, got {self.answer_tokens}")
        if self.system_tokens < 2:
            raise ValueError(f"--scale {self.scale} leaves a {self.system_tokens}-token system prompt; raise it")
        if not 2 * self.turn_tokens(1) < self.long_tokens:
            raise ValueError("the give-way turn must be under half the long read")

    def _tokens(self, full: int) -> int:
        return max(1, round(full * self.scale))

    @property
    def system_tokens(self) -> int:
        return self._tokens(SYSTEM_TOKENS)

    @property
    def context_tokens(self) -> int:
        return self._tokens(CONTEXT_TOKENS)

    @property
    def tool_tokens(self) -> int:
        return self._tokens(TOOL_TOKENS)

    @property
    def long_tokens(self) -> int:
        return self._tokens(LONG_TOKENS)

    def turn_tokens(self, turn: int) -> int:
        """A turn's prompt length: system + context, then per later turn an answer and a tool result."""
        return self.system_tokens + self.context_tokens + turn * (self.answer_tokens + self.tool_tokens)

    def needed_ctx(self) -> int:
        longest = max(self.turn_tokens(max(self.turns, self.evict_turns) - 1), self.long_tokens)
        return longest + self.answer_tokens

    def describe(self) -> str:
        return (
            f"system {self.system_tokens}, context {self.context_tokens}, tool result {self.tool_tokens}, "
            f"answer {self.answer_tokens} tokens; {self.sessions} sessions x {self.turns} turns, "
            f"{self.evict_sessions} x {self.evict_turns} under eviction, a {self.long_tokens}-token read to give way"
        )


@dataclass(frozen=True)
class Prompts:
    """Seeded prompt pieces of one run: ids below the vocabulary, never EOS."""

    nonce: str
    vocab_size: int
    eos_token_id: int | None

    def piece(self, what: str, length: int) -> list[int]:
        return token_prompt(prompt_seed("verify-cache", self.nonce, what), length, self.vocab_size, self.eos_token_id)

    def first_turn(self, plan: CachePlan, session: str) -> list[int]:
        return self.piece("system", plan.system_tokens) + self.piece(f"{session}-context", plan.context_tokens)

    def next_turn(self, plan: CachePlan, session: str, turn: int, previous: list[int], answer: list[int]) -> list[int]:
        """Turn `turn` (>= 1): the previous prompt, the previous answer's tokens, a new tool result."""
        return previous + list(answer) + self.piece(f"{session}-tool{turn}", plan.tool_tokens)


@dataclass(frozen=True)
class CacheOptions:
    plan: CachePlan = field(default_factory=CachePlan)
    near_tie: float = NEAR_TIE
    phase_timeout: float = 900.0
    request_timeout: float = 600.0
    evict_mib: float = 1.0  # --prompt-cache of the eviction phase's engine (--engine on Strata only)
    vocab_size: int | None = None
    lacks: frozenset[str] = frozenset()
    logprob_tol: float | None = None  # |cached - cold| logprob bound without a bitwise claim (None: Strata's default)

    def __post_init__(self) -> None:
        if self.logprob_tol is not None and not self.logprob_tol >= 0:
            raise ValueError(f"--logprob-tol must be >= 0, got {self.logprob_tol}")
        if self.near_tie < 0:
            raise ValueError(f"--near-tie must be >= 0, got {self.near_tie}")
        if self.phase_timeout <= 0:
            raise ValueError(f"--timeout must be > 0, got {self.phase_timeout}")
        if not self.evict_mib > 0:
            raise ValueError(f"--evict-cache must be > 0 MiB (0 turns the cache off), got {self.evict_mib}")
        object.__setattr__(self, "lacks", parse_lacks(self.lacks, CACHE_BEHAVIOURS))
