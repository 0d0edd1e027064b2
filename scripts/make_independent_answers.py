"""Make the independent answers that `strata-verify answers` compares an engine against.

The expected tokens must not come from the build under test, so they are made here by another
implementation of the same model: Hugging Face transformers' Qwen3-MoE (eager attention, eager
experts) on the same safetensors weights, in float64. Each prompt is read in ONE forward call (no
chunks, no pieces, no give-way), then greedy tokens follow with transformers' own KV cache. Nothing
from strata_engine is imported; the prompts come from strata_verify.requests (seeded token ids).

A prompt is kept only when every greedy step's top-2 logprob margin is at least --min-margin, so a
rounding difference between implementations (about 1e-5 nats in float32) cannot flip the answer;
otherwise the next seed attempt is tried and the one used is recorded.

    .venv/bin/python scripts/make_independent_answers.py            # writes strata_verify/golden/independent-tiny-moe.json
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from strata_verify.independent import FORMAT, GOLDEN, PROMPTS, prompt_ids  # noqa: E402
from strata_verify.determinism import answer_hash  # noqa: E402

MODEL = REPO / "strata_engine" / "models" / "strata-tiny-moe"


def load(model_dir: Path):
    import transformers
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float64, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    return model, transformers.__version__


@torch.no_grad()
def greedy(model, ids: list[int], tokens: int) -> dict:
    """The prompt in one forward, then `tokens` greedy steps on transformers' KV cache."""
    out = model(torch.tensor([ids]), use_cache=True)
    past, logits = out.past_key_values, out.logits[0, -1]
    chosen, logprobs, tops = [], [], []
    for _ in range(tokens):
        lp = torch.log_softmax(logits.double(), dim=-1)
        values, top = torch.topk(lp, 2)
        token = int(top[0])
        chosen.append(token)
        logprobs.append(float(lp[token]))
        tops.append([[int(t), float(v)] for t, v in zip(top, values)])
        out = model(torch.tensor([[token]]), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    margins = [t[0][1] - t[1][1] for t in tops]
    return {"token_ids": chosen, "logprobs": logprobs, "top_ids": tops, "min_margin": min(margins)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", type=Path, default=MODEL, help="HF checkpoint directory (config.json + model.safetensors)"
    )
    parser.add_argument("--out", type=Path, default=GOLDEN)
    parser.add_argument("--tokens", type=int, default=32, help="greedy tokens per answer")
    parser.add_argument(
        "--min-margin", type=float, default=0.02, help="smallest top-2 margin (nats) a kept answer may have"
    )
    parser.add_argument("--attempts", type=int, default=20, help="seed attempts per prompt before giving up")
    args = parser.parse_args()
    if args.tokens < 1 or args.min_margin < 0 or args.attempts < 1:
        parser.error("--tokens and --attempts must be >= 1, --min-margin >= 0")
    config = json.loads((args.model / "config.json").read_text())
    vocab, eos = int(config["vocab_size"]), config.get("eos_token_id")
    model, version = load(args.model)
    weights = hashlib.sha256((args.model / "model.safetensors").read_bytes()).hexdigest()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    answers = []
    for name, length in PROMPTS:
        for attempt in range(args.attempts):
            started = time.monotonic()
            ids = prompt_ids(name, length, vocab, eos, attempt)
            made = greedy(model, ids, args.tokens)
            print(
                f"{name}: attempt {attempt}, {length} prompt tokens, min margin {made['min_margin']:.4f}, "
                f"{time.monotonic() - started:.1f} s",
                file=sys.stderr,
            )
            if made["min_margin"] >= args.min_margin:
                break
        else:
            sys.exit(f"{name}: no attempt in {args.attempts} has every margin >= {args.min_margin}")
        answers.append(
            {
                "name": name,
                "prompt_tokens": length,
                "attempt": attempt,
                "prompt_sha256": answer_hash(ids),
                "sha256": answer_hash(made["token_ids"]),
                "tokens": args.tokens,
                **made,
            }
        )
    manifest = {
        "format": FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "made_by": {
            "implementation": f"transformers {version} {type(model).__name__}",
            "dtype": "float64",
            "attention": "eager",
            "experts": "eager",
            "method": "prompt in one forward call, then greedy tokens on transformers' KV cache",
            "weights": str(args.model / "model.safetensors").replace(str(REPO) + "/", ""),
            "weights_sha256": weights,
            "config_sha256": hashlib.sha256((args.model / "config.json").read_bytes()).hexdigest(),
            "torch": torch.__version__,
            "command": "python scripts/make_independent_answers.py " + " ".join(sys.argv[1:]),
        },
        "vocab_size": vocab,
        "eos_token_id": eos,
        "max_tokens": args.tokens,
        "min_margin": args.min_margin,
        "answers": answers,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(answers)} answers)", file=sys.stderr)


if __name__ == "__main__":
    main()
