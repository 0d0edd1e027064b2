"""Tables in docs/measurements/ are rendered from runs kept in benchmarks/results/: a number has its run."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from strata_bench.cli import main as bench
from strata_bench.results import ResultsDir

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("measurements", ROOT / "scripts" / "measurements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


measurements = _script()


def test_every_rendered_table_is_its_commands_output():
    pages = sorted(measurements.PAGES.glob("*.md"))
    assert any(measurements.blocks(page) for page in pages), "no page renders a table from a kept run"
    assert [line for page in pages for line in measurements.stale(page)] == []


def test_a_number_edited_by_hand_is_named(tmp_path):
    page = measurements.PAGES / "many-agents.md"
    edited = tmp_path / "many-agents.md"
    text = page.read_text()
    block = measurements.blocks(page)[0]
    body = block.group("body")
    assert "1.94 s" in body
    edited.write_text(text.replace(body, body.replace("1.94 s", "0.94 s", 1)))
    stale = measurements.stale(edited)
    assert len(stale) == 1 and str(edited) in stale[0]
    assert len(stale) == 1 and "strata-bench report benchmarks/results/many-agents --brief" in stale[0]


def test_kept_runs_are_gzipped_byte_stable_and_report_as_the_originals(tmp_path):
    source = ROOT / "benchmarks" / "results" / "engines-avx2-quiet"
    first = ResultsDir(tmp_path / "one")
    measurements.keep(ResultsDir(source), first.path)
    again = measurements.keep(ResultsDir(first.path), tmp_path / "two")
    files = sorted(p.name for p in (first.path / "runs").iterdir())
    assert files and all(name.endswith(".json.gz") for name in files)
    assert all((first.path / "runs" / n).read_bytes() == (again.path / "runs" / n).read_bytes() for n in files)
    shutil.rmtree(first.path / "runs")
    (first.path / "runs").mkdir()
    assert first.runs() == []  # the report reads the runs, not a cached table
    out = [CliRunner().invoke(bench, ["report", str(d), "--brief"]).output for d in (source, again.path)]
    assert out[0] == out[1] and "**two_joiners**" in out[0]


def test_brief_is_markdown_only(tmp_path):
    result = CliRunner().invoke(
        bench, ["report", str(ROOT / "benchmarks" / "results" / "many-agents"), "--brief", "--format", "csv"]
    )
    assert result.exit_code == 2 and "brief is a markdown table only" in result.output


@pytest.mark.parametrize("args", ["--brief", "benchmarks/results/nowhere --brief"])
def test_a_block_whose_command_fails_says_so(args):
    with pytest.raises(ValueError, match="strata-bench report"):
        measurements.rendered(args)


def test_a_gate_under_load_block_renders_from_its_kept_series_and_names_a_hand_edit(tmp_path):
    kept = tmp_path / "series.json"
    report = {"verdict": "PASS", "steps": [{"check": "needle", "name": "n", "status": "pass"}], "seconds": 26.0}
    runs = [{"run": 1, "condition": "quiet", "started": "", "load": 1.0, "report": report}]
    target = {"name": "strata", "what": "strata-engine serve", "runs": runs}
    record = {"check": "needle", "extra": [], "command": "", "runs_per_condition": 1, "hogs": 2, "cpu": "a CPU"}
    kept.write_text(json.dumps({**record, "started": "a", "ended": "b", "targets": [target]}))
    page = tmp_path / "page.md"
    page.write_text(f"# x\n\n<!-- gate_under_load --render {kept} -->\n<!-- end of report -->\n")
    assert len(measurements.stale(page)) == 1
    assert measurements.render_page(page) and measurements.stale(page) == []
    assert "| strata | 1 | quiet | 1.00 | PASS | 26 s |  |" in page.read_text()
    page.write_text(page.read_text().replace("| 26 s |", "| 20 s |"))
    assert len(measurements.stale(page)) == 1 and "gate_under_load --render" in measurements.stale(page)[0]


def test_a_recorded_run_keeps_its_output_and_renders_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measurements, "RESULTS", tmp_path)
    table = "print('| arm | ms |'); print('|---|---:|'); print('| op | 1.25 |'); print('|err| (ms): p50=0.5')"
    status, kept = measurements.record("a-table", [sys.executable, "-c", table])
    assert status == 0 and kept == tmp_path / "a-table.json" and "| op | 1.25 |" in capsys.readouterr().out
    record = json.loads(kept.read_text())
    assert "| op | 1.25 |\n" in record["stdout"] and record["cpu"] and record["cores"] >= 1
    page = tmp_path / "page.md"
    page.write_text(f"# x\n\n<!-- recorded {kept} -->\n<!-- end of report -->\n")
    assert measurements.render_page(page) and measurements.stale(page) == []
    assert "| op | 1.25 |" in page.read_text() and "-c" in page.read_text()
    assert "```text\n|err| (ms): p50=0.5\n```" in page.read_text()  # no separator row: a line of text
    assert measurements.typed_rows(page) == 0  # rendered rows are not typed
    page.write_text(page.read_text().replace("1.25", "1.05"))
    assert len(measurements.stale(page)) == 1 and "recorded" in measurements.stale(page)[0]
    assert measurements.typed_rows(page) == 0


def test_a_failed_run_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(measurements, "RESULTS", tmp_path)
    assert measurements.record("broken", [sys.executable, "-c", "print('| 1 |'); raise SystemExit(3)"]) == (3, None)
    assert list(tmp_path.iterdir()) == []


def test_every_table_on_the_measurement_pages_is_rendered_from_a_kept_run():
    """A table row outside a rendered block is a number typed by hand: keep the run that printed it
    (`scripts/measurements.py record` or `keep`) and render it, or take it off the page."""
    typed = {page.name: n for page in measurements.PAGES.glob("*.md") if (n := measurements.typed_rows(page))}
    assert typed == {}, f"table rows typed by hand: {typed}"
