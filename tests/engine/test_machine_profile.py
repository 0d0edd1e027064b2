"""`strata-engine tune` keeps the layout that did the same work sooner on this machine; `--layout auto` follows it,
says so, and without a profile keeps the documented default. The real command (slow) tunes and serve follows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from strata_engine import machine_profile, tuning
from strata_engine.config import EngineConfig
from strata_engine.layout import LAYOUT_ENV, Machine, resolve

EXE = str(Path(sys.executable).with_name("strata-engine"))


def profile(layout: str, plain: float = 2.0, fastest: float = 1.0) -> dict:
    timing = lambda work: {"work_s": work, "decode_tok_s": 100.0, "read_s": 0.5, "start_s": 3.0}  # noqa: E731
    return {"layout": layout, "measured": {"plain": timing(plain), "fastest": timing(fastest)}, "date_utc": "today"}


def machine(entry: dict | None) -> Machine:
    return Machine(cores=2, cuda=False, layers=4, profile=entry)


def test_auto_follows_a_profile_that_measured_plain_faster_and_says_so():
    config = EngineConfig(batch=6, ctx=8192)
    chosen, why = resolve(config, "auto", given={"batch"}, env={}, machine=machine(profile("plain", 1.0, 3.0)))
    assert chosen == config
    assert (
        why
        == "plain: auto follows this machine's profile (today): plain did the work in 1.00 s against fastest's 3.00 s"
    )


def test_auto_follows_a_profile_that_measured_fastest_faster():
    chosen, why = resolve(EngineConfig(batch=6), "auto", given={"batch"}, env={}, machine=machine(profile("fastest")))
    assert chosen.layout == "fastest" and chosen.compile
    assert why.startswith("fastest (auto follows this machine's profile (today): fastest did the work in 1.00 s")


def test_without_a_profile_auto_keeps_the_default_and_names_the_command_that_measures_one():
    chosen, why = resolve(EngineConfig(batch=6), "auto", given={"batch"}, env={}, machine=machine(None))
    assert chosen.layout == "fastest" and "no machine profile: `strata-engine tune` measures one" in why


def test_an_explicit_variable_or_flag_outranks_the_profile():
    plain_measured = machine(profile("plain", 1.0, 3.0))
    chosen, why = resolve(EngineConfig(batch=6), "auto", set(), env={LAYOUT_ENV: "fastest"}, machine=plain_measured)
    assert chosen.layout == "fastest" and "profile" not in why
    chosen, _ = resolve(EngineConfig(batch=6), "fastest", set(), env={}, machine=plain_measured)
    assert chosen.layout == "fastest"
    chosen, why = resolve(EngineConfig(batch=6, split=2), "auto", {"split"}, env={}, machine=plain_measured)
    assert chosen.layout != "fastest" and "the layout flags given (--split)" in why


def test_tune_keeps_the_faster_layout_per_machine_and_model(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    work = {"plain": 2.5, "fastest": 1.5}
    fake = lambda config, batch, tokens, read: {**profile("x")["measured"]["plain"], "work_s": work[config.layout]}  # noqa: E731
    configs = {"plain": EngineConfig(layout="plain"), "fastest": EngineConfig(layout="fastest")}
    said, reported = [], []
    entry = tuning.tune(
        configs, 4, 8, 64, "strata-tiny-moe", run=fake, say=said.append, env=env, report=reported.append
    )
    assert entry["layout"] == "fastest" and entry["work"] == {"batch": 4, "tokens": 8, "read_tokens": 64}
    assert machine_profile.read("strata-tiny-moe", env) == entry
    assert machine_profile.read("another-model", env) is None  # a profile holds for its model only
    assert any("fastest did the work in 1.50 s against plain's 2.50 s" in line for line in reported)
    assert [line.split(":")[1].strip() for line in reported[:2]] == ["plain", "fastest"]  # each layout's figures
    assert all("building and running the work" in line for line in said)  # progress only: stderr in the CLI
    work["plain"] = 0.5  # tuned again (another day): the newer measurement replaces the entry
    assert tuning.tune(configs, 4, 8, 64, "strata-tiny-moe", run=fake, env=env)["layout"] == "plain"
    assert machine_profile.read("strata-tiny-moe", env)["layout"] == "plain"
    table = json.loads(machine_profile.profile_path(env).read_text())
    assert list(table) == [machine_profile.machine_key("strata-tiny-moe")]


@pytest.mark.parametrize("text", ["not json", '{"key": 1}', "[]"])
def test_an_unreadable_or_foreign_profile_is_no_profile(tmp_path, text):
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    machine_profile.profile_path(env).parent.mkdir(parents=True)
    machine_profile.profile_path(env).write_text(text)
    assert machine_profile.read("strata-tiny-moe", env) is None


def test_tune_show_without_a_profile_says_where_it_looked(tmp_path):
    from click.testing import CliRunner

    from strata_engine.cli import main

    result = CliRunner().invoke(main, ["tune", "--show"], env={"XDG_CACHE_HOME": str(tmp_path)})
    assert result.exit_code == 1 and f"{tmp_path}/strata/machine-profile.json" in result.output


@pytest.mark.slow
def test_the_real_tune_keeps_a_profile_that_serve_follows(tmp_path):
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path),  # a profile of its own; the compiled step's cache stays the machine's
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        or str(Path.home() / ".cache" / "strata" / "inductor"),
        "STRATA_CHUNK_KERNEL": "0",  # no native build or race in a fresh cache folder
        "STRATA_DECODE_KERNEL": "0",
        "STRATA_EXPERT_KERNEL": "0",
        "STRATA_DECODE_EXPERTS_KERNEL": "0",
    }
    env.pop(LAYOUT_ENV, None)  # the tests' plain layout (conftest) would outrank the profile
    tuned = subprocess.run(
        [EXE, "tune", "--batch", "2", "--tokens", "8", "--read", "256", "--ctx", "2048"],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    assert "tune: plain: work" in tuned.stdout and "; kept in " in tuned.stdout, tuned.stdout  # results on stdout
    entry = json.loads(subprocess.run([EXE, "tune", "--show"], env=env, capture_output=True, text=True).stdout)
    assert set(entry["measured"]) == {"plain", "fastest"} and entry["layout"] in ("plain", "fastest")
    assert all(m["work_s"] > 0 and m["decode_tok_s"] > 0 for m in entry["measured"].values())
    shown = subprocess.run([EXE, "serve", "--batch", "2", "--print-config"], env=env, capture_output=True, text=True)
    assert "auto follows this machine's profile" in shown.stderr, shown.stderr
    assert f"EngineConfig.layout = '{entry['layout']}'" in shown.stdout or entry["layout"] == "plain", shown.stdout


def test_a_quantized_kv_cache_runs_plain_under_auto_and_fastest_says_why_not():
    config = EngineConfig(batch=6, kv_dtype="q8")
    chosen, why = resolve(config, "auto", given={"batch", "kv_dtype"}, env={}, machine=machine(profile("fastest")))
    assert chosen == config and why == "plain: auto found --kv-dtype q8 (the compiled step reads float32 caches)"
    with pytest.raises(ValueError, match="--layout fastest cannot run with --kv-dtype q8"):
        resolve(config, "fastest", given={"kv_dtype"}, env={}, machine=machine(None))
