"""Strata's version has one home, `engine_info.version()`: the installed distribution's, or a clear fallback where
the package is not installed; the CLI, the server, the bench's provenance and the verify manifest all report it."""

from __future__ import annotations

from importlib import metadata

from click.testing import CliRunner

from strata_bench import provenance
from strata_engine import engine_info
from strata_engine.cli import main
from strata_verify import manifest


def test_version_is_the_installed_distributions():
    assert engine_info.version() == metadata.version("strata")


def test_version_falls_back_where_strata_is_not_installed(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(engine_info.metadata, "version", missing)
    engine_info.version.cache_clear()
    try:
        assert engine_info.version() == engine_info.NOT_INSTALLED
    finally:
        engine_info.version.cache_clear()


def test_every_place_reports_the_one_version():
    expected = engine_info.version()
    out = CliRunner().invoke(main, ["--version"]).output
    assert out.strip() == f"strata-engine, version {expected}"
    assert provenance.package_versions()["strata"] == expected
    assert manifest.fingerprint({})["packages"]["strata"] == expected
