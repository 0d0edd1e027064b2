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


def test_a_run_forced_below_the_cpus_level_says_so_in_its_provenance_and_its_tables(monkeypatch):
    from strata_bench.tables import _measured_on

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    monkeypatch.delenv("STRATA_NATIVE_MARCH", raising=False)
    recorded = provenance.collect(["strata-bench", "demo"])
    assert recorded["isa_env"] == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    assert "run at ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2" in _measured_on(recorded)
    assert "run at" not in _measured_on({**recorded, "isa_env": {}})
