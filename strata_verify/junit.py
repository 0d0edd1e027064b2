"""JUnit XML for CI: one testsuite per check (and build), one testcase per step.

A failed or not-exercised step is a <failure> whose message is the step's reason and whose body is
its evidence; an `info` step passes with its text in <system-out>; a gate that could not run is one
<error> testcase carrying the engine's last stderr lines.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from strata_verify.report import INFO, NOT_APPLICABLE, NOT_EXERCISED, Report


# XML 1.0 forbids most control characters (an engine's stderr may hold ANSI colour codes).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("?", text)


def to_xml(report: Report) -> str:
    root = ET.Element("testsuites", name="strata-verify")
    suites: dict[str, ET.Element] = {}
    for step in report.steps:
        suite_name = f"strata-verify.{step.build + '.' if step.build else ''}{step.check}"
        suite = suites.get(suite_name)
        if suite is None:
            suite = suites[suite_name] = ET.SubElement(root, "testsuite", name=suite_name)
        case = ET.SubElement(suite, "testcase", classname=suite_name, name=_clean(step.name))
        body = _clean("\n".join(step.evidence))
        if step.failed:
            kind = "not-exercised" if step.status == NOT_EXERCISED else "mismatch"
            failure = ET.SubElement(case, "failure", message=_clean(f"{step.status}: {step.reason}"), type=kind)
            failure.text = body
        elif step.status == NOT_APPLICABLE:
            ET.SubElement(case, "skipped", message=_clean(step.reason))
        else:
            out = ET.SubElement(case, "system-out")
            prefix = "info: " if step.status == INFO else ""
            out.text = _clean(prefix + step.reason) + (f"\n{body}" if body else "")
    if report.gate_error is not None:
        suite = ET.SubElement(root, "testsuite", name="strata-verify.gate")
        case = ET.SubElement(suite, "testcase", classname="strata-verify.gate", name="engine")
        error = ET.SubElement(case, "error", message=_clean(report.gate_error), type="could-not-run")
        error.text = _clean("\n".join(report.stderr_tail))
        suites["strata-verify.gate"] = suite
    for suite in suites.values():
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
        suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
        suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write(report: Report, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_xml(report), encoding="utf-8")
