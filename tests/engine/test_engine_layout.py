"""`Engine.from_pretrained(layout=...)` is `strata-engine serve --layout`: `fastest` and `auto` resolve through
layout.resolve with the fields passed as the flags given, so the Python API and the CLI get the same engine under
the same name; `plain`, the default, builds the fields as given. No engine is built here (the fastest layout
compiles for a minute): `Engine.__init__` is replaced by one that keeps the config, and a fake machine stands in
for this one."""

from __future__ import annotations

import pytest

from strata_engine import engine as engine_module
from strata_engine import layout
from strata_engine.config import EngineConfig
from strata_engine.engine import Engine, config_for
from strata_engine.layout import LAYOUT_ENV, SHAPING, Machine, resolve

TWO_CORES = Machine(cores=2, cuda=False, layers=4)
MODEL = "strata-tiny-moe"


@pytest.fixture
def kept(monkeypatch):
    """Engine.from_pretrained builds no engine: it keeps the config; this machine is TWO_CORES, no profile."""

    def init(self, config):
        self.config = config

    monkeypatch.setattr(Engine, "__init__", init)
    monkeypatch.setattr(layout, "this_machine", lambda config: TWO_CORES)
    monkeypatch.delenv(LAYOUT_ENV, raising=False)  # auto means the documented default, as for a user


def test_from_pretrained_fastest_is_the_layout_resolve_gives_the_cli(kept):
    given = {"batch": 6, "ctx": 8192, "prefill_chunk": 128}
    expected, _ = resolve(EngineConfig(model=MODEL, **given), "fastest", set(given), machine=TWO_CORES)
    assert config_for(MODEL, "fastest", given, machine=TWO_CORES) == expected
    config = Engine.from_pretrained(MODEL, layout="fastest", **given).config
    assert config == expected
    # the layout's stages, groups and compiled step, not only its scheduler knobs; a given chunk is kept
    assert (config.layout, config.devices, config.batch_groups, config.compile, config.stage_workers) == (
        "fastest",
        ("cpu", "cpu"),
        2,
        True,
        "thread",
    )
    assert (config.batch, config.ctx, config.prefill_chunk) == (6, 8192, 128)


def test_from_pretrained_fastest_matches_serve_print_config(kept):
    """The CLI's own resolution (`serve --layout fastest --print-config`) on the same machine: the layout's fields."""
    from click.testing import CliRunner

    from strata_engine import cli

    result = CliRunner().invoke(
        cli.main, ["serve", "--layout", "fastest", "--batch", "6", "--ctx", "8192", "--print-config"]
    )
    assert result.exit_code == 0, result.output
    printed = dict(line.split(" = ", 1) for line in result.stdout.splitlines() if line.startswith("EngineConfig."))
    config = Engine.from_pretrained(MODEL, layout="fastest", batch=6, ctx=8192).config
    for name in ("layout", "prefill_chunk", "batch", "ctx", *SHAPING):
        assert printed[f"EngineConfig.{name}"].split("  (")[0] == repr(getattr(config, name)), name


def test_from_pretrained_plain_by_default_builds_the_fields_as_given(kept):
    def no_machine(config):
        raise AssertionError("plain consults no machine")

    for config in (
        Engine.from_pretrained(MODEL, batch=6, split=2).config,
        Engine.from_pretrained(MODEL, layout="plain", batch=6, split=2).config,
        config_for(MODEL, "plain", {"batch": 6, "split": 2}, machine=no_machine),
    ):
        assert config == EngineConfig(model=MODEL, batch=6, split=2)
        assert config.layout == "plain" and not config.compile and config.batch_groups != 2


def test_from_pretrained_auto_follows_the_cli(kept):
    assert Engine.from_pretrained(MODEL, layout="auto", batch=6).config.layout == "fastest"  # no shaping field
    shaped = Engine.from_pretrained(MODEL, layout="auto", batch=6, split=2).config
    assert shaped == EngineConfig(model=MODEL, batch=6, split=2)  # a shaping field given: auto stays plain


def test_from_pretrained_fastest_beside_a_shaping_field_raises_as_the_cli_does(kept):
    with pytest.raises(ValueError, match="--layout fastest sets the stages.*drop --split"):
        Engine.from_pretrained(MODEL, layout="fastest", split=2)
    with pytest.raises(ValueError, match="--layout must be one of auto, plain, fastest"):
        Engine.from_pretrained(MODEL, layout="fast")


def test_the_why_goes_to_the_engine_log_not_stdout(kept, caplog, capsys):
    with caplog.at_level("DEBUG", logger=engine_module._event_log.name):
        Engine.from_pretrained(MODEL, layout="fastest", batch=6)
    assert any(r.getMessage().startswith("layout fastest (--layout fastest)") for r in caplog.records)
    assert capsys.readouterr().out == ""
