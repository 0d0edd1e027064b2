"""The native ops a start needs are built side by side before it races them (runtime/native/prebuild.py):
which ops count as missing, and that each missing one is built in a child process of its own."""

from __future__ import annotations

import os

from strata_engine.runtime.native import build, prebuild
from strata_engine.runtime.native.chunk_attention import ENV as CHUNK_ENV
from strata_engine.runtime.native.decode_attention import ENV as DECODE_ENV
from strata_engine.runtime.native.routed_experts import ENV as EXPERTS_ENV

FAKE_OPS = """
import os, pathlib
def _mark(name):
    pathlib.Path(os.environ["MARKS"], name).write_text(str(os.getpid()))
def op_a():
    _mark("a")
def op_b():
    _mark("b")
def op_c():
    _mark("c")
"""


def fake_ops(tmp_path, monkeypatch):
    (tmp_path / "fake_native_ops.py").write_text(FAKE_OPS)
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("MARKS", str(marks))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the children import the accessors by module name
    import fake_native_ops

    ops = [
        (CHUNK_ENV, "op_a", fake_native_ops.op_a, "a source"),
        (EXPERTS_ENV, "op_b", fake_native_ops.op_b, "b source"),
        (DECODE_ENV, "op_c", fake_native_ops.op_c, "c source"),
    ]
    return ops, marks


def test_an_op_switched_off_given_to_aten_or_built_is_not_missing(tmp_path, monkeypatch):
    ops, _ = fake_ops(tmp_path, monkeypatch)
    monkeypatch.setenv(CHUNK_ENV, "0")
    monkeypatch.setattr(build, "is_built", lambda name, source, march: name == "op_c")
    monkeypatch.setattr(
        build, "read_verdicts", lambda: {build.verdict_key("op_b", "b source", "native"): {"path": "aten"}}
    )
    monkeypatch.delenv("STRATA_NATIVE_MARCH", raising=False)
    assert prebuild.missing(ops) == []
    monkeypatch.setenv(EXPERTS_ENV, "1")  # switched on: a kept verdict for ATen does not hold it back
    assert [name for _, name, _, _ in prebuild.missing(ops)] == ["op_b"]


def test_each_missing_op_is_built_in_a_process_of_its_own(tmp_path, monkeypatch):
    ops, marks = fake_ops(tmp_path, monkeypatch)
    monkeypatch.setattr(build, "is_built", lambda name, source, march: False)
    monkeypatch.setattr(build, "read_verdicts", lambda: {})
    assert prebuild.build_missing(ops, jobs=2) == ["op_a", "op_b", "op_c"]
    pids = {p.name: int(p.read_text()) for p in marks.iterdir()}
    assert sorted(pids) == ["a", "b", "c"]
    assert os.getpid() not in pids.values() and len(set(pids.values())) == 3


def test_one_missing_op_is_built_here(tmp_path, monkeypatch):
    ops, marks = fake_ops(tmp_path, monkeypatch)
    monkeypatch.setattr(build, "is_built", lambda name, source, march: name != "op_a")
    monkeypatch.setattr(build, "read_verdicts", lambda: {})
    assert prebuild.build_missing(ops) == ["op_a"]
    assert int((marks / "a").read_text()) == os.getpid()


def test_the_command_passes_its_jobs_on_and_refuses_fewer_than_one(monkeypatch, capsys):
    import pytest

    from strata_engine.runtime.native import __main__ as command

    calls = []
    monkeypatch.setattr(command, "missing", lambda ops: [] if calls else list(ops))
    monkeypatch.setattr(command, "build_missing", lambda ops, jobs=None: calls.append(jobs))
    assert command.main(["--jobs", "1"]) == 0 and calls == [1]
    with pytest.raises(SystemExit) as exit_:
        command.main(["--jobs", "0"])
    assert exit_.value.code == 2 and "--jobs must be >= 1, got 0" in capsys.readouterr().err
