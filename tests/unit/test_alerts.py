"""promtool unit tests: every alert fires on a synthetic series and is silent on a healthy one.

The rules are docker/prometheus/alerts.yml, the cases tests/prometheus/alerts_test.yml.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docker" / "prometheus" / "alerts.yml"
TESTS = ROOT / "tests" / "prometheus" / "alerts_test.yml"


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not on PATH: the alert tests need it. Install Prometheus "
                    "(Debian/Ubuntu: apt-get install prometheus; scripts/test does it) or put "
                    "promtool from a Prometheus release on PATH.")
    return promtool


def _run(*args: str) -> str:
    result = subprocess.run([_promtool(), *args], capture_output=True, text=True, timeout=120,
                            cwd=ROOT, check=False)
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout


def test_the_alert_rules_are_valid_promql() -> None:
    assert "SUCCESS" in _run("check", "rules", str(RULES))


def test_every_alert_fires_on_a_synthetic_series_and_stays_silent_on_a_healthy_one() -> None:
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"]
              for r in g["rules"] if "alert" in r}
    cases = [c for t in yaml.safe_load(TESTS.read_text())["tests"]
             for c in t.get("alert_rule_test", [])]
    fires = {c["alertname"] for c in cases if c.get("exp_alerts")}
    silent = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert alerts - fires == set(), "alerts never shown firing"
    assert alerts - silent == set(), "alerts never shown silent"
    assert "SUCCESS" in _run("test", "rules", str(TESTS))
