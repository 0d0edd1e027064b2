#!/usr/bin/env python
"""Where one decode step of the model goes: torch.profiler over the engine's own stage forward.

Reads --rows prompts of --prompt tokens into a KV cache, then profiles --steps greedy decode steps of all
rows together through `runtime.stage_forward` (what a stage thread or rank runs), with each module's time
labelled (embed, per layer: input norm, attention projection + rotary, per-row attention, o_proj, post norm,
MoE router/experts; head), for each arm: eager invariant (rows padded to the 16-row tile), eager padding off,
the compiled step, and the compiled step with inductor's C++ GEMM templates (`template`); an arm ending in
`-every` runs the compiled MoE on every expert (STRATA_DECODE_EXPERTS_KERNEL=0 for that arm), the others each
row's chosen experts where the native decode experts serve. Layers can be split
like `--split 2` (two stages' layer ranges timed separately, no transport: that is measured on the server,
docs/measurements/decode-step.md). Prints µs per step per label and the top aten ops.

  .venv/bin/python benchmarks/profile_decode_step.py --rows 1,6 --threads 1,2
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from strata_engine.model import load_model  # noqa: E402
from strata_engine.model.kv_cache import KVCache  # noqa: E402
from strata_engine.model.transformer import MoE, RMSNorm, Attention  # noqa: E402
from strata_engine.runtime.compiled_step import CompiledDecode  # noqa: E402
from strata_engine.runtime.invariance import apply_row_tile, default_row_tile  # noqa: E402
from strata_engine.runtime.native.decode_experts import ENV as EXPERTS_ENV  # noqa: E402
from strata_engine.runtime.native.choice import install  # noqa: E402
from strata_engine.runtime.pipeline import Part  # noqa: E402
from strata_engine.runtime.stage_forward import stage_forward  # noqa: E402


def label_modules(model) -> None:
    """record_function ranges around the modules that make up a step (forward hooks)."""

    def wrap(module, name):
        def pre(_m, _a):
            if torch.compiler.is_compiling():
                return
            module._rf = record_function(name)
            module._rf.__enter__()

        def post(_m, _a, _o):
            if not torch.compiler.is_compiling():
                module._rf.__exit__(None, None, None)

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)

    for name, module in model.named_modules():
        kind = None
        if isinstance(module, Attention):
            kind = "attention (proj+rope+rows+o_proj)"
        elif isinstance(module, MoE):
            kind = "moe (router+experts)"
        elif isinstance(module, RMSNorm) and "layernorm" in name:
            kind = "rmsnorm"
        elif name.endswith("qkv_proj"):
            kind = "attention: qkv GEMM"
        elif name.endswith("o_proj"):
            kind = "attention: o GEMM"
        elif name.endswith("mlp.gate"):
            kind = "moe: router GEMM"
        elif name == "lm_head":
            kind = "head"
        elif name == "embed_tokens":
            kind = "embed"
        if kind:
            wrap(module, "@" + kind)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1,6")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--prompt", type=int, default=300)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument(
        "--arms",
        default="invariant,padding_off,compiled",
        help="invariant (the engine's tile), padding_off, compiled, template (compiled with "
        "STRATA_COMPILED_GEMMS=template's C++ GEMM templates), tileN (eager at a row tile of N), compiledN "
        "(compiled at a tile of N); a compiled arm ending in -every runs every expert on every row "
        "(STRATA_DECODE_EXPERTS_KERNEL=0 for it)",
    )
    args = p.parse_args()
    model, config = load_model("strata-tiny-moe")
    install(model)  # the native ops where the engine serves them
    tile = default_row_tile(config, "cpu", torch.float32, max(int(t) for t in args.threads.split(",")))  # the engine's
    layers = range(config.num_layers)
    label_modules(model)
    torch.manual_seed(0)
    experts_switch = os.environ.get(EXPERTS_ENV, "")
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for batch in [int(b) for b in args.rows.split(",")]:
            for arm in args.arms.split(","):
                every = arm.endswith("-every")
                os.environ[EXPERTS_ENV] = "0" if every else experts_switch
                kind = arm.removesuffix("-every")
                row_tile = 1 if kind == "padding_off" else int(re.sub(r"^\D*", "", kind) or tile)
                apply_row_tile(model, row_tile)
                kv = KVCache(config, num_slots=batch, ctx=args.prompt + 4 * args.steps + 8)
                gemms = "template" if kind == "template" else "aten"
                compiled = (
                    CompiledDecode(model, layers, kv, True, True, row_tile, batch, threads, gemms=gemms)
                    if kind.startswith("compiled") or kind == "template"
                    else None
                )
                with torch.inference_mode():
                    tokens = []
                    for slot in range(batch):
                        part = Part.ragged([(slot, 0, [(7 * slot + i) % 250 for i in range(args.prompt)])], True)
                        stage_forward(model, layers, kv, part, True, True, row_tile, "cpu")
                        tokens.append(int(part.logits[0].argmax()))
                    position = args.prompt

                    def one_step():
                        nonlocal tokens, position
                        part = Part.ragged([(s, position, [t]) for s, t in enumerate(tokens)], True)
                        stage_forward(model, layers, kv, part, True, True, row_tile, "cpu", compiled)
                        tokens = part.logits.argmax(-1).tolist()
                        position += 1

                    for _ in range(args.steps):  # warm
                        one_step()
                    took = []
                    for _ in range(args.steps):
                        start = time.perf_counter()
                        one_step()
                        took.append((time.perf_counter() - start) * 1e3)
                    plain_ms, best_ms = statistics.median(took), min(took)
                    with profile(activities=[ProfilerActivity.CPU]) as prof:
                        for _ in range(args.steps):
                            with record_function("@step"):
                                one_step()
                events = prof.key_averages()
                labelled = {e.key: e.cpu_time_total / args.steps for e in events if e.key.startswith("@")}
                ops = sorted((e for e in events if not e.key.startswith("@")), key=lambda e: -e.self_cpu_time_total)[:8]
                print(
                    f"\n== {arm}, batch {batch}, {threads} thread(s): {plain_ms:.2f} ms/step unprofiled (median; best "
                    f"{best_ms:.2f}; {batch / plain_ms * 1e3:.0f} tok/s); profiled step {labelled.get('@step', 0) / 1e3:.2f} ms"
                )
                for key, us in sorted(labelled.items(), key=lambda kv: -kv[1]):
                    print(f"   {key[1:]:<40} {us:8.0f} us/step")
                print(
                    "   top aten ops (self):",
                    ", ".join(
                        f"{e.key} {e.self_cpu_time_total / args.steps:.0f}us x{e.count // args.steps}" for e in ops
                    ),
                )


if __name__ == "__main__":
    main()
