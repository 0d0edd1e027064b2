#!/usr/bin/env python
"""Train strata-tiny-moe: a byte-level qwen3_moe on the Python standard library's own source, on CPU.

The corpus is every *.py under sysconfig's stdlib (no tests, no codec tables), each file framed as
<bos> bytes <eos>; files whose path hashes to 0 mod --holdout-every are held out for validation. The
train step runs the inference modules themselves (same projections, rotary, router and expert dispatch),
only attention is full causal SDPA instead of the KV cache. Writes an HF directory: config.json,
model.safetensors (float16), README.md with held-out bits per byte, margins, samples and the command.

  .venv/bin/python scripts/train_tiny_moe.py --out strata_engine/models/strata-tiny-moe --steps 1500
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from strata_engine.model.kv_cache import KVCache  # noqa: E402
from strata_engine.model.config import ModelConfig  # noqa: E402
from strata_engine.model.transformer import MoE, Transformer  # noqa: E402
from strata_engine.model.weights import hf_config_dict, load_model, save_hf_weights  # noqa: E402

SHIPPED = Path(__file__).resolve().parent.parent / "strata_engine" / "models" / "strata-tiny-moe"

BOS, EOS = 256, 257
SAMPLE_PROMPTS = [
    "def fibonacci(n):\n",
    "import os\nimport sys\n\n\nclass ",
    "    def __init__(self, name, value=None):\n        self.",
]


def corpus_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        # tests hold odd encodings and deliberately broken code; encodings/ is mostly hex tables
        if "site-packages" in parts or parts[0] == "encodings" or any("test" in p for p in parts[:-1]):
            continue
        files.append(path)
    return files


def is_heldout(path: Path, every: int) -> bool:
    root = Path(sysconfig.get_paths()["stdlib"])
    digest = hashlib.sha256(str(path.relative_to(root)).encode()).digest()
    return int.from_bytes(digest[:4], "little") % every == 0


def framed(files: list[Path]) -> torch.Tensor:
    ids: list[int] = []
    for path in files:
        ids += [BOS, *path.read_bytes(), EOS]
    return torch.tensor(ids, dtype=torch.int16)


def init_weights(model: Transformer, std: float) -> None:
    """GPT-2 style: normal(std), residual output projections scaled down by sqrt(2 * layers), norms = 1."""
    out_std = std / math.sqrt(2 * model.config.num_layers)
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            torch.nn.init.ones_(param)
        elif name.endswith(("o_proj.weight", "down_proj", "down_proj.weight")):
            torch.nn.init.normal_(param, std=out_std)
        else:
            torch.nn.init.normal_(param, std=std)


def train_forward(model: Transformer, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens [B, T] -> logits [B, T, V], load-balancing loss. Same modules as inference, no KV cache."""
    batch, seq = tokens.shape
    positions = torch.arange(seq).expand(batch, seq)
    h = model.embed(tokens)
    balance = h.new_zeros(())
    window = model.config.sliding_window
    mask = None  # plain causal while the window covers the whole sequence
    if window is not None and seq > window:  # position p sees (p - window, p], as the inference path does
        distance = torch.arange(seq)[:, None] - torch.arange(seq)[None, :]
        mask = (distance >= 0) & (distance < window)
    for block in model.layers:
        q, k, v = block.self_attn.project(block.input_layernorm(h), positions)
        h = h + block.self_attn.output(
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=True)
        )
        if isinstance(block.mlp, MoE):
            # Switch-style balance: experts_count * sum_e (share of tokens routed to e) * (mean router prob of e)
            x = block.post_attention_layernorm(h).reshape(batch * seq, -1)
            probs, _, chosen = block.mlp.route(x)
            routed = F.one_hot(chosen, probs.shape[-1]).float().sum(1).mean(0) / chosen.shape[-1]
            balance = balance + probs.shape[-1] * (routed * probs.mean(0)).sum()
        h = block.feed_forward(h)
    return model.head(h), balance / len(model.layers)


def bits_per_byte(logits: torch.Tensor, targets: torch.Tensor) -> tuple[float, int]:
    """Sum of bits over byte targets (specials excluded), and how many bytes."""
    keep = targets < 256
    nats = F.cross_entropy(logits[keep], targets[keep].long(), reduction="sum")
    return nats.item() / math.log(2), int(keep.sum())


@torch.no_grad()
def heldout_bpb(model: Transformer, data: torch.Tensor, seq: int, windows: int) -> float:
    step = max(1, (len(data) - seq - 1) // windows)
    bits = count = 0
    for start in range(0, step * windows, step):
        chunk = data[start : start + seq + 1].long()
        logits, _ = train_forward(model, chunk[None, :-1])
        b, c = bits_per_byte(logits[0], chunk[1:])
        bits, count = bits + b, count + c
    return bits / count


@torch.no_grad()
def greedy_report(model: Transformer, config: ModelConfig, new_tokens: int) -> tuple[list[str], list[float]]:
    """Greedy continuations through the inference path (KV cache), and every step's top-1 minus top-2 logit."""
    samples, margins = [], []
    for prompt in SAMPLE_PROMPTS:
        ids = list(prompt.encode())
        kv = KVCache(config, 1, len(ids) + new_tokens + 1, torch.float32, "cpu")
        slots = torch.tensor([0])
        logits = model(torch.tensor([ids]), torch.arange(len(ids))[None], kv, slots)[0, -1]
        out = []
        for _ in range(new_tokens):
            top = logits.topk(2)
            margins.append((top.values[0] - top.values[1]).item())
            token = int(top.indices[0])
            if token == EOS:
                break
            out.append(token)
            pos = len(ids) + len(out) - 1
            logits = model(torch.tensor([[token]]), torch.tensor([[pos]]), kv, slots)[0, -1]
        samples.append(prompt + bytes(t for t in out if t < 256).decode("utf-8", errors="replace"))
    return samples, margins


def model_card(
    args,
    config,
    params,
    active,
    train_bytes,
    val_bytes,
    files,
    bpb_fp32,
    bpb_saved,
    bpb_long,
    samples,
    margins,
    seconds,
) -> str:
    margins_sorted = sorted(margins)
    frac = lambda t: sum(m > t for m in margins) / len(margins)  # noqa: E731
    lines = [
        "# strata-tiny-moe",
        "",
        "A byte-level Mixture-of-Experts language model (qwen3_moe architecture) trained on CPU on the Python",
        "standard library's own source, shipped inside strata_engine as the engine's default model.",
        "",
        f"- architecture: {config.architecture}, {config.num_layers} layers, hidden {config.hidden_size}, "
        f"{config.num_heads} heads / {config.num_kv_heads} kv heads (head_dim {config.head_dim}), "
        f"{config.num_experts} experts top-{config.num_experts_per_tok} (expert width {config.moe_intermediate_size}), "
        f"rope theta {config.rope_theta:g}, max positions {config.max_position_embeddings}",
        f"- parameters: {params:,} total, {active:,} active per token",
        "- vocabulary: 258 = 256 bytes + <bos> (256) + <eos> (257); `tokenizer.json` + `tokenizer_config.json` describe exactly "
        "that byte tokenizer (byte-level BPE, no merges, nothing added on encode), so transformers' AutoTokenizer, vLLM and "
        "any HF tool load this directory as it is",
        f"- corpus: {len(files)} *.py files of the Python {platform.python_version()} standard library (no tests, no encodings/), "
        f"{train_bytes:,} training bytes, {val_bytes:,} held-out bytes (files whose path's sha256 is 0 mod {args.holdout_every})",
        f"- training: {args.steps_run} steps of {args.batch * args.seq_len} bytes ({args.batch} x {args.seq_len}; the last {args.long_fraction:.0%} "
        f"as windows of {args.long_seq_len}), AdamW lr {args.lr} cosine, seed {args.seed}, {seconds / 60:.1f} min on CPU "
        f"with {args.threads} threads",
        f"- held-out bits per byte: {bpb_saved:.3f} over {args.seq_len}-byte windows (weights as saved in float16; {bpb_fp32:.3f} "
        f"before rounding); {bpb_long:.3f} over {args.long_seq_len}-byte windows",
        f"- greedy top-1 minus top-2 logit margin over {len(margins)} sample steps: median {margins_sorted[len(margins) // 2]:.2f}, "
        f"min {margins_sorted[0]:.3f}; share above 0.1: {frac(0.1):.1%}, above 1.0: {frac(1.0):.1%}",
        "",
        "Command:",
        "",
        "```",
        "python " + " ".join(sys.argv),
        "```",
        "",
        "Greedy samples (inference path, KV cache):",
        "",
    ]
    for sample in samples:
        lines += ["```python", sample, "```", ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("strata_engine/models/strata-tiny-moe"))
    p.add_argument("--steps", type=int, default=1400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument(
        "--long-seq-len", type=int, default=2048, help="sequence length of the final phase (long-prompt positions)"
    )
    p.add_argument(
        "--long-fraction",
        type=float,
        default=0.15,
        help="share of the steps trained at --long-seq-len, same bytes per step",
    )
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--moe-intermediate", type=int, default=128)
    p.add_argument(
        "--max-positions",
        type=int,
        default=131072,
        help="positions the config declares; with a sliding window every query sees at most that many "
        "keys, so positions past the training windows stay in the trained regime",
    )
    p.add_argument(
        "--sliding-window",
        type=int,
        default=1024,
        help="attention span of every layer (qwen3_moe use_sliding_window); 0 = full causal attention",
    )
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--holdout-every", type=int, default=20)
    p.add_argument("--eval-windows", type=int, default=48)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--time-budget-min",
        type=float,
        default=0.0,
        help="if > 0, the schedule also follows wall time: progress = max(step/steps, elapsed/budget), stop at 1",
    )
    args = p.parse_args()
    if args.layers % 2:
        p.error("--layers must be even (the engine splits the model in two stages)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    files = corpus_files()
    train_files = [f for f in files if not is_heldout(f, args.holdout_every)]
    val_files = [f for f in files if is_heldout(f, args.holdout_every)]
    train, val = framed(train_files), framed(val_files)
    print(
        f"corpus: {len(train_files)} train files ({len(train):,} bytes), {len(val_files)} held out ({len(val):,} bytes)",
        flush=True,
    )

    config = ModelConfig(
        architecture="qwen3_moe",
        vocab_size=258,
        hidden_size=args.hidden,
        num_layers=args.layers,
        num_heads=args.heads,
        num_kv_heads=args.kv_heads,
        head_dim=args.hidden // args.heads,
        intermediate_size=4 * args.hidden,
        rms_norm_eps=1e-6,
        rope_theta=args.rope_theta,
        max_position_embeddings=args.max_positions,
        num_experts=args.experts,
        num_experts_per_tok=args.top_k,
        moe_intermediate_size=args.moe_intermediate,
        norm_topk_prob=True,
        qk_norm=True,
        moe_layers=tuple(range(args.layers)),
        bos_token_id=BOS,
        eos_token_id=EOS,
        sliding_window=args.sliding_window or None,
    )
    model = Transformer(config)
    init_weights(model, std=0.02)
    params = sum(t.numel() for t in model.parameters())
    expert_params = sum(b.mlp.gate_up_proj.numel() + b.mlp.down_proj.numel() for b in model.layers)
    active = params - expert_params + expert_params * args.top_k // args.experts
    print(f"model: {params:,} parameters, {active:,} active per token", flush=True)

    decay = [t for n, t in model.named_parameters() if t.dim() >= 2 and "embed" not in n]
    no_decay = [t for n, t in model.named_parameters() if t.dim() < 2 or "embed" in n]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    warmup = 0.05  # share of the run

    def schedule(progress: float) -> float:
        return min(1.0, (progress + 1e-3) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    gen = torch.Generator().manual_seed(args.seed)
    started = time.time()
    budget_s = args.time_budget_min * 60
    for step in range(args.steps):
        # On a shared machine the step time is not ours to fix: with a budget, the cosine and the long
        # phase follow whichever of steps or wall time runs out first (the card records the steps run).
        progress = max(step / args.steps, (time.time() - started) / budget_s if budget_s else 0.0)
        if progress >= 1.0:
            break
        for group in opt.param_groups:
            group["lr"] = args.lr * schedule(progress)
        seq, batch = args.seq_len, args.batch
        if progress >= 1 - args.long_fraction:  # teach positions up to long_seq_len at equal bytes per step
            seq, batch = args.long_seq_len, max(1, args.batch * args.seq_len // args.long_seq_len)
        starts = torch.randint(0, len(train) - seq - 1, (batch,), generator=gen)
        chunk = torch.stack([train[s : s + seq + 1] for s in starts.tolist()]).long()
        logits, balance = train_forward(model, chunk[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), chunk[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        (loss + 0.01 * balance).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        steps_run = step + 1
        if step % 50 == 0 or step == args.steps - 1:
            elapsed = time.time() - started
            print(
                f"step {step:5d}  loss {loss.item():.3f} ({loss.item() / math.log(2):.3f} bits)  balance {balance.item():.3f}  "
                f"{elapsed / 60:.1f} min  {elapsed / (step + 1):.2f} s/step",
                flush=True,
            )
    seconds = time.time() - started
    args.steps_run = steps_run
    model.eval()
    bpb_fp32 = heldout_bpb(model, val, args.seq_len, args.eval_windows)
    print(f"held-out bits per byte (fp32): {bpb_fp32:.3f}", flush=True)
    bpb_long = heldout_bpb(model, val, args.long_seq_len, max(1, args.eval_windows * args.seq_len // args.long_seq_len))
    print(f"held-out bits per byte at {args.long_seq_len}-byte windows (fp32): {bpb_long:.3f}", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    save_hf_weights(model, args.out, torch.float16)
    (args.out / "config.json").write_text(json.dumps(hf_config_dict(config), indent=2) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):  # the byte tokenizer the embedded model ships with
        if (SHIPPED / name).resolve() != (args.out / name).resolve():
            shutil.copyfile(SHIPPED / name, args.out / name)
    saved, _ = load_model(args.out)  # the shipped weights, through the real loader, in fp32
    bpb_saved = heldout_bpb(saved, val, args.seq_len, args.eval_windows)
    samples, margins = greedy_report(saved, config, 160)
    card = model_card(
        args,
        config,
        params,
        active,
        len(train),
        len(val),
        files,
        bpb_fp32,
        bpb_saved,
        bpb_long,
        samples,
        margins,
        seconds,
    )
    (args.out / "README.md").write_text(card)
    print(card, flush=True)


if __name__ == "__main__":
    main()
