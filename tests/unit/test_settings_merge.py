"""Settings people get right the first time: partial overrides, typos, options anywhere."""

from __future__ import annotations

import logging

import pytest

from lockstep.cli.main import hoist_global_options
from lockstep.config.settings import load_settings

pytestmark = pytest.mark.unit


def test_one_field_of_a_built_in_slo_class_keeps_the_rest_of_it() -> None:
    s = load_settings(environ={"LOCKSTEP_SLO__CLASSES__CABIN__E2E_MS": "150"})
    cabin = s.slo.classes["cabin"]
    assert (cabin.e2e_ms, cabin.fps, cabin.drop_frames) == (150.0, 30.0, True)
    assert set(s.slo.classes) == {"cabin", "surgical", "ar"}


def test_a_custom_slo_class_adds_to_the_built_in_ones() -> None:
    s = load_settings(slo={"classes": {"warehouse": {"e2e_ms": 500, "fps": 10}}})
    assert set(s.slo.classes) == {"cabin", "surgical", "ar", "warehouse"}
    assert s.slo.budget_ms("warehouse") == 500


def test_an_unknown_section_is_warned_about_with_a_suggestion(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lockstep.config.settings")
    load_settings(environ={"LOCKSTEP_ALIGNN__TOLERANCE_MS": "3", "LOCKSTEP_CONFIG": "x"})
    [record] = [r for r in caplog.records if "ignoring" in r.getMessage()]
    assert "LOCKSTEP_ALIGNN__TOLERANCE_MS" in record.getMessage()
    assert "did you mean LOCKSTEP_ALIGN?" in record.getMessage()


def test_global_options_are_accepted_after_the_subcommand() -> None:
    argv = ["run", "--roles", "align", "--config", "x.toml", "--log-level=info"]
    assert hoist_global_options(argv) == ["--config", "x.toml", "--log-level=info", "run",
                                          "--roles", "align"]
    assert hoist_global_options(["topics", "manifest", "--configmap", "c.yaml"]) == [
        "topics", "manifest", "--configmap", "c.yaml"]
