"""When a request ends on a sampled token: the engine's one finish decision (EOS, max tokens, context end).

Contract: `finish_reason` looks at one sampled token and the request's counts with it included, and
returns "stop" (the token is EOS and EOS is not ignored: it is not part of the output), "length" (max
tokens reached, or the context is full) or None. The engine asks it once per token; the scheduler then
ends the request, the token's output carries the reason, and the HTTP layer only renders it. Stop
strings are text, found where the text is assembled (`outputs.RequestState`).
"""

from __future__ import annotations


def finish_reason(
    token_id: int,
    *,
    tokens_generated: int,
    prompt_tokens: int,
    max_tokens: int,
    ctx: int,
    eos_token_id: int | None,
    ignore_eos: bool = False,
) -> str | None:
    """The reason this token ends its request, or None. `tokens_generated` counts this token."""
    if eos_token_id is not None and token_id == eos_token_id and not ignore_eos:
        return "stop"
    if tokens_generated >= max_tokens or prompt_tokens + tokens_generated >= ctx:
        return "length"
    return None
