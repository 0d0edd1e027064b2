"""The STRATA_* table: every variable the engine's source names is in it, and a bad value of each raises naming it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import strata_engine
from strata_engine import cli, knobs
from strata_engine.config import EngineConfig, SchedulerConfig
from strata_engine.runtime_config import RuntimeConfig
from strata_engine.knobs import KNOBS, read

SOURCE = Path(strata_engine.__file__).parent
NOT_VARIABLES = {"STRATA_READY"}  # the server's ready line on stdout, not a variable
BAD = {  # one value each knob refuses; a knob added to the table needs one here
    "STRATA_PIPED_READ_PIECE": "2.5",
    "STRATA_BATCH_DECODE_SHARE": "abc",
    "STRATA_PIPED_DECODE_MIN_MS": "-1",
    "STRATA_PIPED_DECODE_MAX_MS": "nan",
    "STRATA_PIPED_READ_MIX": "2",
    "STRATA_PIPED_PAUSE_TARGET_MS": "soon",
    "STRATA_PIPED_DECODE_MERGE": "maybe",
    "STRATA_ROW_TILE": "0",
    "STRATA_DECODE_ALL_THREADS": "all",
    "STRATA_STAGE_WORKERS": "process",
    "STRATA_COMPILED_GEMMS": "mkl",
    "STRATA_LAYOUT": "quick",
    "STRATA_CHUNK_KERNEL": "on",
    "STRATA_DECODE_KERNEL": "native",
    "STRATA_EXPERT_KERNEL": "2",
    "STRATA_DECODE_EXPERTS_KERNEL": "fewer",
    "STRATA_QUANT_DECODE_KERNEL": "yes",
    "STRATA_KV_CODEC_KERNEL": "fast",
    "STRATA_NATIVE_MARCH": "x86-64-v3; rm -rf",
    "STRATA_API_KEY": "k\u00e9y",
}


def _sources():
    return {str(path.relative_to(SOURCE)): path.read_text() for path in SOURCE.rglob("*.py")}


def test_every_strata_variable_the_source_names_is_in_the_table():
    named = {name for text in _sources().values() for name in re.findall(r"\bSTRATA_[A-Z_]*[A-Z]\b", text)}
    assert named - NOT_VARIABLES - set(KNOBS) == set()
    assert set(KNOBS) - named == set()  # no stale entries either (each is named where it is read or in the table)


def test_the_environment_is_read_only_through_the_table():
    """knobs.py is the one module that touches os.environ: the ranks' environment is handed on through
    `knobs.environ()`, the compile cache's folder set through `knobs.export_default`."""
    uses = {path: len(re.findall(r"os\.environ|getenv", text)) for path, text in _sources().items()}
    assert {path for path, n in uses.items() if n} == {"knobs.py"}


def test_every_knob_has_a_bad_value_here():
    assert set(BAD) == set(KNOBS)


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_a_bad_value_raises_naming_the_variable_the_value_and_what_it_accepts(name):
    with pytest.raises(ValueError) as caught:
        read(name, {name: BAD[name]})
    assert str(caught.value).startswith(f"{name}={BAD[name]!r} ")
    assert str(caught.value).endswith(f"({KNOBS[name].accepts})")


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_unset_and_empty_give_the_default(name):
    assert read(name, {}) == read(name, {name: ""}) == read(name, {name: "  "}) == KNOBS[name].default
    assert read(name, {}, default="mine") == "mine"


def test_switches_take_zero_as_off():
    for raw, want in [("0", False), ("1", True), ("false", False), ("TRUE", True), ("off", False), ("yes", True)]:
        assert read("STRATA_DECODE_ALL_THREADS", {"STRATA_DECODE_ALL_THREADS": raw}) is want
    assert read("STRATA_PIPED_READ_MIX", {"STRATA_PIPED_READ_MIX": "on"}) == 1
    with pytest.raises(ValueError, match="STRATA_LAYOUT='Plain' is not one of plain, fastest"):
        read("STRATA_LAYOUT", {"STRATA_LAYOUT": "Plain"})  # choices keep their case, as they did


def test_numbers_keep_their_kind():
    assert read("STRATA_PIPED_READ_PIECE", {"STRATA_PIPED_READ_PIECE": "1024.0"}) == 1024
    assert read("STRATA_BATCH_DECODE_SHARE", {"STRATA_BATCH_DECODE_SHARE": " 0.25 "}) == 0.25
    with pytest.raises(
        ValueError, match=r"^STRATA_BATCH_DECODE_SHARE='abc' is not a number \(a share >= 0 of the chunk's read time\)$"
    ):
        read("STRATA_BATCH_DECODE_SHARE", {"STRATA_BATCH_DECODE_SHARE": "abc"})


def test_the_process_environment_is_the_default(monkeypatch):
    monkeypatch.setenv("STRATA_LAYOUT", "plain")
    assert read("STRATA_LAYOUT") == "plain" and knobs.environ() is __import__("os").environ


def test_a_bad_scheduler_variable_is_named_when_the_engine_config_is_made():
    with pytest.raises(ValueError, match="STRATA_PIPED_READ_MIX='2' is not one of 0, 1"):
        EngineConfig(executor="sim", env={"STRATA_PIPED_READ_MIX": "2"})


def test_serve_reads_the_api_key_through_the_table(monkeypatch):
    import strata_engine.server.run as run

    seen = {}

    def stop_here(_factory, **kw):
        seen.update(kw)
        raise OSError("stopped before serving")

    monkeypatch.setattr(run, "serve", stop_here)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/nowhere")  # so keep_compile_cache leaves the environment alone
    args = ["serve", "--executor", "sim", "--layout", "plain", "--port", "0"]
    result = CliRunner().invoke(cli.main, args, env={"STRATA_API_KEY": " k-123 "})
    assert result.exit_code == 1 and seen["api_key"] == "k-123"
    result = CliRunner().invoke(cli.main, [*args, "--api-key", "flag"], env={"STRATA_API_KEY": "k\u00e9y"})
    assert result.exit_code == 1 and seen["api_key"] == "flag"  # the flag wins, as it did
    result = CliRunner().invoke(cli.main, args, env={"STRATA_API_KEY": "k\u00e9y"})
    assert result.exit_code == 2 and "STRATA_API_KEY='k\u00e9y' is not printable ASCII" in result.output


def test_importing_the_package_changes_no_environment():
    import subprocess
    import sys

    script = "import os; before = dict(os.environ); import strata_engine, strata_engine.config; print(dict(os.environ) == before)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr[-2000:]


def test_read_set_reads_the_named_knobs_at_once_and_leaves_the_unset_ones_out():
    env = {"STRATA_ROW_TILE": "8", "STRATA_PIPED_READ_MIX": " ", "STRATA_COMPILED_GEMMS": "aten"}
    names = ("STRATA_COMPILED_GEMMS", "STRATA_ROW_TILE", "STRATA_PIPED_READ_MIX")
    assert knobs.read_set(names, env) == {"STRATA_COMPILED_GEMMS": "aten", "STRATA_ROW_TILE": 8}
    with pytest.raises(ValueError, match="STRATA_ROW_TILE='0'"):
        knobs.read_set(names, {"STRATA_ROW_TILE": "0"})


def test_an_engines_knobs_resolve_as_each_config_reads_them_alone():
    env = {"STRATA_ROW_TILE": "8", "STRATA_PIPED_DECODE_MERGE": "0", "STRATA_STAGE_WORKERS": "thread"}
    config = EngineConfig(batch=4, split=2, batch_groups="auto", layout="fastest", env=env)
    found = config.knobs_read()
    assert (
        config.scheduler_config(found)
        == config.scheduler_config()
        == SchedulerConfig(batch=4, batch_groups=2, num_stages=2, read_mix=1, decode_merge=0, prompt_cache_mib=1024)
    )
    assert config.runtime_config(found) == config.runtime_config() == RuntimeConfig(gemms="template", row_tile=8)
    assert config.stage_workers_for(["cpu", "cpu"], found) == "thread"
    assert "STRATA_STAGE_WORKERS" not in EngineConfig(executor="sim", env=env).knobs_read()  # read where auto means it
