"""`strata-verify kv-quality`: what a KV format costs the embedded model's next-token distributions against a
float32 cache, in process (kv_quality.py)."""

from __future__ import annotations

import click

from strata_verify import independent
from strata_verify.cli.common import against_option, load_answers, run_check
from strata_verify.kv_quality import THRESHOLDS, run_kv_quality
from strata_verify.report import Report


@click.command("kv-quality")
@click.option("--kv-dtype", "kv_dtype", type=click.Choice(sorted(THRESHOLDS)), required=True, help="The KV format.")
@against_option("Independent answers file: its prompts and float64 answers are what is read.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help="torch threads.")
@click.option("--markdown", is_flag=True, help="Print markdown (for a PR comment) instead of text.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write JUnit XML for CI.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write raw results and the verdict as JSON.")
def kv_quality(kv_dtype, against_path, threads, markdown, junit_path, json_path):
    """A KV format against a float32 cache on the embedded model: top-1, KL, logprobs (docs/VERIFY.md)."""
    report = Report(meta={"check": "kv-quality", "kv_dtype": kv_dtype, "against": against_path})
    reference, expected = load_answers(against_path, "kv-quality", report, markdown, junit_path, json_path)
    report.meta["expected"] = independent.made_by(reference)

    def check():
        import torch

        from strata_engine.model import load_model

        torch.set_num_threads(threads)
        model = load_model("strata-tiny-moe")[0].eval()
        return run_kv_quality(model, kv_dtype, reference, expected)

    run_check(
        report, f"kv-quality: kv {kv_dtype} against float32 on strata-tiny-moe", check, markdown, junit_path, json_path
    )
