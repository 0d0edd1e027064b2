"""`--layout`: auto picks the fastest layout where it can run and nobody shaped one; plain keeps the flags;
fastest beside a layout flag, or where it cannot run, is a usage error naming why. The real server in that
layout (slow) answers the golden manifest's greedy tokens."""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from strata_engine.config import EngineConfig
from strata_engine.layout import FASTEST_CHUNK, LAYOUT_ENV, Machine, provenance, resolve

TWO_CORES = Machine(cores=2, cuda=False, layers=4)
EXE = shutil.which("strata-engine", path=os.path.dirname(sys.executable)) or shutil.which("strata-engine")


def test_auto_lays_a_multi_core_cpu_engine_out_as_the_fastest_layout():
    config, why = resolve(EngineConfig(batch=6, ctx=8192), "auto", given={"batch", "ctx"}, env={}, machine=TWO_CORES)
    assert (config.layout, config.devices, config.batch_groups, config.compile, config.prefill_chunk) == (
        "fastest",
        ("cpu", "cpu"),
        2,
        True,
        FASTEST_CHUNK,
    )
    assert config.stage_workers == "thread"  # the whole decode needs the stages' shared KV cache
    assert config.num_stages == 2 and config.batch == 6 and config.ctx == 8192
    assert why.startswith("fastest (auto on 2 CPU cores; no machine profile")
    sched = config.scheduler_config()  # the layout's knobs
    assert (sched.read_mix, sched.decode_merge, sched.num_stages, sched.batch_groups) == (1, 1, 2, 2)


def test_a_given_chunk_and_the_environment_override_the_layouts_own():
    config, _ = resolve(
        EngineConfig(batch=6, prefill_chunk=128), "auto", given={"prefill_chunk"}, env={}, machine=TWO_CORES
    )
    assert config.prefill_chunk == 128
    env = {"STRATA_PIPED_DECODE_MERGE": "0", "STRATA_PIPED_READ_PIECE": "512"}
    sched = EngineConfig(batch=6, layout="fastest", env=env).scheduler_config()
    assert (sched.decode_merge, sched.read_mix, sched.piped_read_piece) == (0, 1, 512)
    sched = EngineConfig(batch=6, layout="fastest", env={"STRATA_PIPED_DECODE_MERGE": ""}).scheduler_config()
    assert sched.decode_merge == 1  # empty is unset: the layout's value, not the variable's default (0)
    with pytest.raises(ValueError, match=r"STRATA_PIPED_DECODE_MERGE='maybe' is not one of 0, 1"):
        EngineConfig(batch=6, layout="fastest", env={"STRATA_PIPED_DECODE_MERGE": "maybe"}).scheduler_config()


def test_the_fastest_layout_compiles_its_gemms_with_the_template_unless_the_environment_says():
    assert EngineConfig(batch=6, layout="fastest", compile=True, env={}).runtime_config().gemms == "template"
    assert EngineConfig(batch=6, compile=True, env={}).runtime_config().gemms == "aten"  # plain
    aten = {"STRATA_COMPILED_GEMMS": "aten"}
    assert EngineConfig(batch=6, layout="fastest", compile=True, env=aten).runtime_config().gemms == "aten"
    template = {"STRATA_COMPILED_GEMMS": "template"}
    assert EngineConfig(batch=6, compile=True, env=template).runtime_config().gemms == "template"
    with pytest.raises(
        ValueError, match=r"STRATA_COMPILED_GEMMS='mkl' is not one of aten, template \(aten or template\)"
    ):
        EngineConfig(batch=6, compile=True, env={"STRATA_COMPILED_GEMMS": "mkl"})


@pytest.mark.parametrize(
    "given,why",
    [
        ({"split"}, "--split"),
        ({"compile"}, "--compile"),
        ({"batch_groups", "devices"}, "--devices, --batch-groups"),
    ],
)
def test_auto_keeps_the_flags_when_the_user_shaped_a_layout(given, why):
    config = EngineConfig(batch=6)
    chosen, said = resolve(config, "auto", given=given, env={}, machine=TWO_CORES)
    assert chosen is config and said.startswith("plain") and why in said


@pytest.mark.parametrize(
    "machine,config,why",
    [
        (Machine(1, False, 4), EngineConfig(batch=6), "one CPU core"),
        (Machine(8, True, 4), EngineConfig(batch=6), "a GPU"),
        (TWO_CORES, EngineConfig(batch=6, device="cuda:0"), "a GPU"),
        (Machine(2, False, 1), EngineConfig(batch=6), "a model of 1 layer"),
        (TWO_CORES, EngineConfig(batch=1), "--batch 1"),
        (TWO_CORES, EngineConfig(batch=6, executor="sim"), "the sim executor"),
    ],
)
def test_auto_stays_plain_where_the_fastest_layout_cannot_run_and_fastest_says_why(machine, config, why):
    chosen, said = resolve(config, "auto", given=set(), env={}, machine=machine)
    assert chosen is config and said.startswith(f"plain: auto found {why}")
    with pytest.raises(ValueError, match=f"--layout fastest cannot run with {re.escape(why)}"):
        resolve(config, "fastest", given=set(), env={}, machine=machine)


def test_the_environment_sets_what_auto_means_and_bad_values_name_the_variable():
    config = EngineConfig(batch=6)
    assert resolve(config, "auto", set(), env={LAYOUT_ENV: "plain"}, machine=TWO_CORES)[0] is config
    assert resolve(config, "auto", set(), env={LAYOUT_ENV: "fastest"}, machine=TWO_CORES)[0].layout == "fastest"
    assert resolve(config, "plain", set(), env={LAYOUT_ENV: "fastest"}, machine=TWO_CORES)[0] is config
    with pytest.raises(ValueError, match=r"STRATA_LAYOUT='quick' is not one of plain, fastest \(plain or fastest\)"):
        resolve(config, "auto", set(), env={LAYOUT_ENV: "quick"}, machine=TWO_CORES)


def test_fastest_beside_a_layout_flag_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match="drop --split, or use --layout plain"):
        resolve(EngineConfig(batch=6, split=2), "fastest", given={"split"}, env={}, machine=TWO_CORES)
    with pytest.raises(ValueError, match="layout must be 'plain' or 'fastest'"):
        EngineConfig(layout="auto")


@pytest.mark.skipif(EXE is None, reason="the strata-engine console script is not installed")
def test_the_cli_refuses_fastest_beside_a_layout_flag_before_loading_anything():
    r = subprocess.run(
        [EXE, "serve", "--port", "0", "--layout", "fastest", "--batch-groups", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "drop --batch-groups, or use --layout plain" in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.skipif(EXE is None, reason="the strata-engine console script is not installed")
def test_the_default_server_runs_the_fastest_layout_and_answers_the_golden_tokens():
    golden = json.loads((Path(__file__).parents[2] / "strata_verify/golden/reference-cpu.json").read_text())
    env = {k: v for k, v in os.environ.items() if k != LAYOUT_ENV}  # the suite pins plain; this test is about auto
    proc = subprocess.Popen(
        [EXE, "serve", "--port", "0", "--batch", "4", "--ctx", "4096", "--no-log-events"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("STRATA_READY url="), (line, proc.poll(), proc.stderr.read() if proc.poll() else "")
        url = line.split("url=", 1)[1].split()[0]
        info = httpx.get(f"{url}/v1/engine", timeout=30).json()
        assert (info["layout"], info["num_stages"], info["batch_groups"], info["read_mix"], info["decode_merge"]) == (
            "fastest",
            2,
            2,
            1,
            1,
        )
        assert info["compiled"]["graphs"] >= 3 and info["prefill_chunk"] == FASTEST_CHUNK  # two stages' and the whole's
        assert info["stage_workers"] == "thread" and info["compiled"]["gemms"] == "template"
        for entry in golden["answers"][:3]:
            body = {
                "prompt": entry["prompt"],
                "max_tokens": golden["max_tokens"],
                "temperature": 0,
                "return_token_ids": True,
            }
            answer = httpx.post(f"{url}/v1/completions", json=body, timeout=120).json()
            assert answer["choices"][0]["text"] == entry["text"], entry["name"]
    finally:
        proc.kill()
        proc.wait(30)


def test_provenance_names_the_flag_the_layout_the_variable_or_the_default():
    flagged = EngineConfig(batch=6, env={"STRATA_PIPED_PAUSE_TARGET_MS": "80", "STRATA_ROW_TILE": "4"})
    laid_out, _ = resolve(flagged, "fastest", {"batch"}, env={}, machine=TWO_CORES)
    rows = {field: (value, source) for field, value, source in provenance(flagged, laid_out, {"batch"})}
    assert rows["EngineConfig.batch"] == (6, "--batch")
    assert rows["EngineConfig.compile"] == (True, "layout")
    assert rows["EngineConfig.seed"] == (0, "default")
    assert rows["RuntimeConfig.gemms"] == ("template", "layout")
    assert rows["RuntimeConfig.compile"] == (True, "EngineConfig")
    assert rows["RuntimeConfig.row_tile"] == (4, "STRATA_ROW_TILE")
    assert rows["RuntimeConfig.decode_all_threads"] == (False, "default")
    assert rows["RuntimeConfig.threads"][0] is None  # derived at engine start, not here
    assert rows["SchedulerConfig.decode_merge"] == (1, "layout")
    assert rows["SchedulerConfig.pause_target_ms"] == (80.0, "STRATA_PIPED_PAUSE_TARGET_MS")
    assert rows["SchedulerConfig.ctx"][0] is None  # derived at engine start, not here
    assert "EngineConfig.env" not in rows and "SchedulerConfig.row_tile" not in rows


def test_print_config_prints_each_field_and_its_source_and_exits_0():
    from click.testing import CliRunner

    from strata_engine import cli

    env = {"STRATA_LAYOUT": "plain", "STRATA_PIPED_READ_MIX": "1", "STRATA_STAGE_WORKERS": "thread"}
    env["STRATA_DECODE_ALL_THREADS"] = "1"
    result = CliRunner().invoke(cli.main, ["serve", "--executor", "sim", "--batch", "6", "--print-config"], env=env)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "EngineConfig.batch = 6  (--batch)" in lines
    assert "EngineConfig.layout = 'plain'  (STRATA_LAYOUT=plain (what auto means))" in lines
    assert "EngineConfig.stage_workers = 'auto'  (STRATA_STAGE_WORKERS=thread (what auto means))" in lines
    assert "SchedulerConfig.read_mix = 1  (STRATA_PIPED_READ_MIX)" in lines
    assert "SchedulerConfig.decode_share = 0.5  (default)" in lines
    assert "RuntimeConfig.decode_all_threads = True  (STRATA_DECODE_ALL_THREADS)" in lines
    assert "RuntimeConfig.gemms = 'aten'  (default)" in lines
    assert "STRATA_READY" not in result.stdout  # nothing was served
