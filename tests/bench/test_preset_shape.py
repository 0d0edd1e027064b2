"""The spec preset (pr2050) on the simulated executor at full size reproduces the spec's headline shape.

Spec PR 2050: the longest pause 12.2 -> 4.2 s (32K pieces) -> 2.6 s (16K), the joiners' TTFT longer with
pieces, the token rate within run-to-run spread; the one-line question answered sooner with pieces.
"""

import json

import pytest

from .conftest import bench


def metric(scenario, key, arm):
    m = next(m for m in scenario["metrics"] if m["key"] == key)
    return m["summary"][arm]["median"]


@pytest.mark.slow
def test_pr2050_preset_reproduces_the_spec_shape(tmp_path):
    out = tmp_path / "pr2050"
    r = bench(
        "preset",
        "pr2050",
        "--time-scale",
        "8",
        "--repeat",
        "1",
        "--out",
        str(out),
        "--no-report",
        "--scenarios",
        "two_joiners,followup",
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(bench("report", str(out), "--format", "json").stdout)
    assert report["time_scale"] == 8 and report["tokens"]["equal"], report["tokens"]
    tj = next(s for s in report["scenarios"] if s["name"] == "two_joiners")

    def m(key, arm):
        return metric(tj, key, arm)

    release, p32, p16 = (m("longest_pause_s", a) for a in ("release", "piece32k", "piece16k"))
    assert release / p32 >= 2.5, (release, p32)
    assert p16 < p32, (p16, p32)
    for joiner in ("ttft_s.join64k", "ttft_s.join32k"):
        assert m(joiner, "release") < m(joiner, "piece32k") < m(joiner, "piece16k"), joiner
    assert abs(m("token_rate", "piece32k") / m("token_rate", "release") - 1) <= 0.10
    assert m("tokens_meanwhile", "release") < m("tokens_meanwhile", "piece32k") < m("tokens_meanwhile", "piece16k")

    fu = next(s for s in report["scenarios"] if s["name"] == "followup")
    assert metric(fu, "ttft_s.question", "piece16k") < metric(fu, "ttft_s.question", "release")
    assert metric(fu, "ttft_s.read45k", "release") < metric(fu, "ttft_s.read45k", "piece16k")
