"""`strata-verify cache`: the prompt-cache check's command line (options, report header, exit status; cache/)."""

from __future__ import annotations

import click

from strata_verify.behaviours import parse_lacks
from strata_verify.cache.check import run_cache
from strata_verify.cache.plan import CACHE_BEHAVIOURS, CacheOptions, CachePlan
from strata_verify.cache.steps import cache_label
from strata_verify.cli.common import output_options, run_check, target
from strata_verify.report import Report

DEFAULT_ENGINE = "strata-engine serve"  # the prompt cache is on by default


@click.command()
@click.option(
    "--engine",
    help=f"Engine command line [default: {DEFAULT_ENGINE}]. On Strata the eviction sessions "
    "run on a fresh engine with `--prompt-cache <--evict-cache>` appended and the cold reads on one with "
    "`--prompt-cache 0`; another family's engine (vLLM) is one server, read cold per request.",
)
@click.option(
    "--url",
    help="URL of a running server (Strata, vLLM, llama-server): one server for every phase, each "
    "cold read with the family's switch (a fresh cache_salt; llama.cpp's cache_prompt: false).",
)
@click.option(
    "--scale",
    type=float,
    default=1.0,
    show_default=True,
    help="Multiply the sizes: system prompt 512, each session's context 512, tool results 128, long read 4096.",
)
@click.option("--sessions", type=int, default=2, show_default=True, help="Sessions side by side in the main phase.")
@click.option("--turns", type=int, default=4, show_default=True, help="Turns per session in the main phase.")
@click.option(
    "--evict-sessions",
    type=int,
    default=6,
    show_default=True,
    help="Sessions side by side in the eviction phase (more than the engine's slots).",
)
@click.option(
    "--evict-cache",
    "evict_mib",
    type=float,
    default=1.0,
    show_default=True,
    help="MiB of --prompt-cache for the eviction phase's fresh engine (--engine on Strata).",
)
@click.option(
    "--tokens", type=int, default=16, show_default=True, help="Tokens each turn answers (joined to the context)."
)
@click.option("--vocab", type=int, help="Vocabulary size, for a server that takes token ids but does not say it.")
@click.option(
    "--lacks",
    default="",
    metavar="BEHAVIOURS",
    help="Comma-separated behaviours the engine under test is "
    "declared NOT to have: " + "; ".join(f"{k}: {v}" for k, v in CACHE_BEHAVIOURS.items()) + ". Their "
    "steps are then 'not applicable'; equality steps always count (vLLM: --lacks events).",
)
@click.option("--timeout", type=float, default=900.0, show_default=True, help="Seconds any one phase may take.")
@click.option(
    "--logprob-tol",
    type=float,
    default=None,
    help="Largest |logprob difference| allowed between a cached "
    "answer and its cold read where the engine does not claim them bitwise equal (prompt_cache.bitwise). "
    "Default: 1e-4 on Strata; on other servers the difference is then information only.",
)
@output_options
def cache(
    engine,
    url,
    scale,
    sessions,
    turns,
    evict_sessions,
    evict_mib,
    tokens,
    vocab,
    lacks,
    timeout,
    logprob_tol,
    near_tie,
    start_timeout,
    markdown,
    junit_path,
    json_path,
):
    """Agent sessions served from the prompt cache must equal the same requests read cold: every later turn
    shown to be a cache hit (usage's cached_tokens, or a CACHE_HIT event), also under eviction (CACHE_EVICT)
    and when a long cold read gives way mid-session. Exit 0 when every check holds, 1 on a failed or
    unexercised check, 2 when the gate could not run."""
    try:
        plan = CachePlan(
            scale=scale, sessions=sessions, turns=turns, evict_sessions=evict_sessions, answer_tokens=tokens
        )
        options = CacheOptions(
            plan=plan,
            near_tie=near_tie,
            phase_timeout=timeout,
            evict_mib=evict_mib,
            vocab_size=vocab,
            lacks=parse_lacks(lacks, CACHE_BEHAVIOURS),
            logprob_tol=logprob_tol,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    where = target(engine, url, DEFAULT_ENGINE, start_timeout)
    report = Report(meta={"check": "cache", "engine": where.describe(), "scale": scale, "sizes": plan.describe()})
    if options.lacks:
        report.meta["declared absent"] = ", ".join(sorted(options.lacks))

    def then(run) -> None:
        report.meta["server"] = run.info.get("family", "?")
        report.meta["cold reads"] = run.cold_how
        if run.cache_info is not None:
            report.meta["prompt cache"] = cache_label(run.cache_info)

    run_check(
        report, f"cache on {where.describe()}", lambda: run_cache(where, options), markdown, junit_path, json_path, then
    )
