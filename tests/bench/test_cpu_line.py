"""`provenance.cpu_line()` names the CPU in one line for every bench's heading: model name, family and model,
the vector flags, and "no avx512" where it has none (machines of one model name differ in them)."""

from __future__ import annotations

from strata_bench import provenance

CPUINFO = {
    "model name": "AMD EPYC",
    "cpu family": "25",
    "model\t": "1",
    "flags": "fpu sse2 avx fma avx2 bmi2",
}


def test_cpu_line_names_the_model_family_and_vector_flags(monkeypatch):
    monkeypatch.setattr(provenance, "_cpuinfo", CPUINFO.get)
    assert provenance.cpu_line() == "AMD EPYC, family 25 model 1, avx avx2 fma, no avx512"
    monkeypatch.setattr(provenance, "_cpuinfo", {**CPUINFO, "flags": "avx avx512f amx_tile"}.get)
    assert provenance.cpu_line() == "AMD EPYC, family 25 model 1, amx_tile avx avx512f"


def test_cpu_line_without_cpuinfo_is_the_processor_name(monkeypatch):
    monkeypatch.setattr(provenance, "_cpuinfo", lambda field: None)
    assert provenance.cpu_line() == provenance._cpu_name()
