"""report and junit: exit codes (never a pass on nothing), text, markdown and JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from strata_verify import junit
from strata_verify.report import FAIL, INFO, NOT_EXERCISED, PASS, Report, Step


def test_exit_codes():
    assert Report().exit_code == 1  # nothing checked
    assert Report([Step("x", "info only", INFO, "n/a")]).exit_code == 1
    assert Report([Step("x", "a", PASS, "ok"), Step("x", "b", INFO, "fyi")]).exit_code == 0
    assert Report([Step("x", "a", PASS, "ok"), Step("x", "b", FAIL, "bad")]).exit_code == 1
    assert Report([Step("x", "a", NOT_EXERCISED, "did not happen")]).exit_code == 1
    assert Report([Step("x", "a", PASS, "ok")], gate_error="engine died").exit_code == 2


def test_unknown_status_is_refused():
    with pytest.raises(ValueError, match="status"):
        Step("x", "a", "ok", "reason")


def test_text_and_markdown_show_reason_evidence_and_stderr():
    report = Report(
        [
            Step("interleave", "C interleaved == solo", FAIL, "differs at token 3", ("index 3: 5 vs 6",)),
            Step("interleave", "D gives way to E", NOT_EXERCISED, "no YIELDED | event"),
        ],
        meta={"engine": "strata-engine serve"},
    )
    text = report.render_text()
    assert "differs at token 3" in text and "index 3: 5 vs 6" in text and "NOT EXERCISED" in text
    assert "engine: strata-engine serve" in text and "exit 1" in text
    md = report.render_markdown()
    assert "### strata-verify: FAIL" in md and "no YIELDED \\| event" in md and "not exercised" in md
    report.gate_error, report.stderr_tail = "engine exited", ["Traceback", "RuntimeError: boom"]
    assert "RuntimeError: boom" in report.render_text() and "RuntimeError: boom" in report.render_markdown()


def test_junit_counts_failures_and_errors(tmp_path):
    report = Report(
        [
            Step("interleave", "A interleaved == solo", PASS, "12 tokens equal"),
            Step("interleave", "C interleaved == solo", FAIL, "differs at token 3", ("index 3",)),
            Step("interleave", "D gives way to E", NOT_EXERCISED, "no YIELDED"),
            Step("determinism", "p1 same in every run", PASS, "sha256 ab", build="B"),
            Step("interleave", "logprobs", INFO, "largest 0"),
        ]
    )
    path = tmp_path / "j.xml"
    junit.write(report, path)
    root = ET.parse(path).getroot()
    suite = root.find("testsuite[@name='strata-verify.interleave']")
    assert suite.get("tests") == "4" and suite.get("failures") == "2"
    failure = suite.find("testcase[@name='D gives way to E']/failure")
    assert failure.get("type") == "not-exercised" and "no YIELDED" in failure.get("message")
    assert root.find("testsuite[@name='strata-verify.B.determinism']") is not None


def test_junit_gate_error_is_valid_xml_even_with_control_characters(tmp_path):
    report = Report(gate_error="engine exited with status 1", stderr_tail=["\x1b[31mERROR\x1b[0m: weights missing"])
    root = ET.fromstring(junit.to_xml(report).split("?>", 1)[1])
    error = root.find("testsuite/testcase/error")
    assert error.get("type") == "could-not-run" and "weights missing" in error.text
