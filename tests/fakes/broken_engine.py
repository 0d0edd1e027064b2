"""strata-engine with one realistic bug patched in at start, for testing what the gate catches.

    python tests/fakes/broken_engine.py --bug prefix-attention -- serve --split 2 ...

Each bug replaces one function, named by its dotted path in TARGETS (the one place to update when
engine modules move), with a wrapper that calls the original except in the bug's case:

  prefix-attention  a prompt chunk after the first leaves the prefix's last position out of attention
                    (every mode reads in chunks, so solo, interleaved and release runs all share it)
  piece-start       a read run that starts mid-prompt takes its first chunk one chunk early, so a
                    chunk is read twice and the next one never (the piece path: solo and interleaved
                    runs share it, the release never starts a run mid-prompt); the prompt's last
                    chunk is left alone so the read still ends with a first token
  corrupt-token     in a decode batch of more than one row, a request's token at index 3 is changed
                    to a neighbouring id after sampling, keeping the original token's logprob
  resume-offset     a parked read resumes one chunk past where it gave way (and never reads that chunk)
  cache-salt        the prompt cache places a request as if it had no cache_salt, so one salt's prefix is
                    served to another (the answer's tokens stay right: only isolation is broken)
  compiled-window   the compiled decode step (the default layout's) attends over one position fewer than
                    the window, so only rows past the window differ (eager reads and steps are right)
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import sys

# Where each patched function lives: a bug whose function moved fails to start, naming this table.
TARGETS = {
    "prefix-attention": ("strata_engine.model.attention.attend_row",),
    "piece-start": ("strata_engine.scheduler.plans.next_read_chunks",),
    "corrupt-token": ("strata_engine.executors.torch_executor.TorchExecutor._deliver",),
    "resume-offset": ("strata_engine.scheduler.scheduler.Scheduler._start",),
    "cache-salt": ("strata_engine.scheduler.prompt_cache.placement.PrefixCache.place",),
    "compiled-window": ("strata_engine.runtime.compiled_step.CompiledDecode._forward",),
    "shared-generator": ("strata_engine.runtime.sampler.Sampler.__init__",),
    "whole-text": ("strata_engine.server.render.Render.response",),
}
CORRUPT_INDEX = 3


def _resolve(paths: tuple[str, ...]):
    """(owner object, attribute name, original) for the first module- or class-level function path that exists."""
    for dotted in paths:
        parts = dotted.split(".")
        for split in range(len(parts) - 1, 0, -1):
            try:
                owner = importlib.import_module(".".join(parts[:split]))
            except ModuleNotFoundError:
                continue
            for attr in parts[split:]:
                if not hasattr(owner, attr):
                    break
                owner, parent = getattr(owner, attr), owner
            else:
                return parent, parts[-1], owner
            break
    raise ImportError(f"none of {paths} exists: update TARGETS in {__file__}")


def prefix_attention(original):
    import torch
    import torch.nn.functional as F

    @functools.wraps(original)
    def attend_row(q, keys, values, positions, consecutive, *rest, **kwargs):
        tokens, length = q.shape[2], keys.shape[2]
        start = length - tokens
        window = rest[0] if rest else kwargs.get("window")
        if tokens == 1 or start <= 0 or (window is not None and length > window):  # a window's own path: not this bug's
            return original(q, keys, values, positions, consecutive, *rest, **kwargs)
        seen = torch.arange(length, device=q.device)[None, :] <= positions[:, None]  # [T, L]
        seen[:, start - 1] = False  # the bug: the prefix's last position is left out
        mask = torch.zeros(seen.shape, dtype=q.dtype, device=q.device).masked_fill_(~seen, float("-inf"))
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)

    return attend_row


def piece_start(original):
    @functools.wraps(original)
    def next_read_chunks(tokens_read, prompt_tokens, chunk, unit_tokens):
        chunks = original(tokens_read, prompt_tokens, chunk, unit_tokens)
        start, end = chunks[0]
        if tokens_read > 0 and unit_tokens > 0 and end < prompt_tokens:
            chunks[0] = (start - chunk, end - chunk)  # the bug: one chunk early
        return chunks

    return next_read_chunks


def corrupt_token(original):
    @functools.wraps(original)
    def _deliver(self, rows, logits, on_token):
        if len(rows) < 2:
            return original(self, rows, logits, on_token)

        def corrupted(request, token):
            if request.tokens_generated == CORRUPT_INDEX:
                token = dataclasses.replace(token, token_id=token.token_id ^ 1)  # the bug: after sampling, same logprob
            on_token(request, token)

        return original(self, rows, logits, corrupted)

    return _deliver


def resume_offset(original):
    @functools.wraps(original)
    def _start(self, start, request, slot):
        chunk = self.config.prefill_chunk
        if getattr(start, "value", start) == "resume" and request.tokens_read + chunk < request.prompt_tokens:
            # the bug: the resumed read goes on one chunk past where it gave way (that chunk is never read);
            # the plans after it read from the request's counter, so every later run starts there
            request.tokens_read += chunk
        return original(self, start, request, slot)

    return _start


def cache_salt(original):
    @functools.wraps(original)
    def place(self, prompt, salt, generation, *rest, **kwargs):
        for held in self._held:  # the bug: every held prefix is matched as if it were under this request's salt
            if held is not None and getattr(held, "salt", salt) != salt:
                object.__setattr__(held, "salt", salt) if dataclasses.is_dataclass(held) else setattr(
                    held, "salt", salt
                )
        return original(self, prompt, salt, generation, *rest, **kwargs)

    return place


def compiled_window(original):
    @functools.wraps(original)
    def _forward(self, x, positions, slots):
        window = self.window
        self.window = window - 1 if window > 1 else window  # the bug: the window one position short
        try:
            return original(self, x, positions, slots)
        finally:
            self.window = window

    return _forward


def shared_generator(original):
    shared = []

    @functools.wraps(original)
    def __init__(self, params, seed):
        original(self, params, seed)
        if self._generator is not None:  # the bug: one generator for the engine, seeded by its first request
            if not shared:
                shared.append(self._generator)
            self._generator = shared[0]

    return __init__


def whole_text(original):
    @functools.wraps(original)
    def response(self, completion):
        obj = original(self, completion)
        choice = obj["choices"][0]
        key = "message" if "message" in choice else None
        text = choice["message"]["content"] if key else choice["text"]
        text = text[:-1]  # the bug: the non-streamed text joins the tokens' pieces one short
        if key:
            choice["message"]["content"] = text
        else:
            choice["text"] = text
        return obj

    return response


BUGS = {
    "prefix-attention": prefix_attention,
    "piece-start": piece_start,
    "corrupt-token": corrupt_token,
    "resume-offset": resume_offset,
    "cache-salt": cache_salt,
    "compiled-window": compiled_window,
    "shared-generator": shared_generator,
    "whole-text": whole_text,
}


def install(bug: str) -> None:
    owner, name, original = _resolve(TARGETS[bug])
    setattr(owner, name, BUGS[bug](original))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bug", choices=sorted(BUGS), required=True)
    parser.add_argument("engine_args", nargs=argparse.REMAINDER, help="-- then strata-engine's arguments")
    args = parser.parse_args()
    engine_args = args.engine_args[1:] if args.engine_args[:1] == ["--"] else args.engine_args
    install(args.bug)
    from strata_engine.cli import main as engine_main

    sys.argv = ["strata-engine", *engine_args]
    engine_main()


if __name__ == "__main__":
    main()
