"""The Prometheus alert rules and the Grafana dashboard in docker/ name only real metrics."""

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from lockstep.telemetry.metrics import Telemetry

pytestmark = pytest.mark.unit

DOCKER = Path(__file__).resolve().parents[2] / "docker"
ALERTS = DOCKER / "prometheus" / "alerts.yml"
DASHBOARD = DOCKER / "grafana" / "lockstep.json"
_SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("_total",), "gauge": ("",)}
#: Labels Prometheus adds to every series of a scrape target.
_TARGET_LABELS = {"job", "instance"}


def _series() -> dict[str, set[str]]:
    """Every sample name the telemetry registry can expose, with its label names."""
    out: dict[str, set[str]] = {}
    for metric in vars(Telemetry()).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        # prometheus_client keeps no public list of a metric's label names.
        kind, name, labels = metric._type, metric._name, set(metric._labelnames)
        for suffix in _SUFFIXES[kind]:
            out[name + suffix] = labels | _TARGET_LABELS | (
                {"le"} if suffix == "_bucket" else set())
    return out


def _check(expr: str, series: dict[str, set[str]], where: str) -> set[str]:
    """Check one PromQL expression; return the lockstep metrics it names."""
    names = set(re.findall(r"\blockstep_[a-z0-9_]+", expr))
    unknown = names - set(series)
    assert not unknown, f"{where}: unknown metrics {sorted(unknown)} in {expr}"
    for name, selector in re.findall(r"\b(lockstep_[a-z0-9_]+)\{([^}]*)\}", expr):
        keys = set(re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)", selector))
        assert keys <= series[name], f"{where}: {name} has no label {keys - series[name]}"
    known = set().union(*(series[n] for n in names)) if names else set()
    for clause in re.findall(r"\b(?:by|on|without|group_left|group_right)\s*\(([^)]*)\)", expr):
        labels = {x.strip() for x in clause.split(",") if x.strip()}
        assert labels <= known, f"{where}: grouping by unknown labels {labels - known}"
    return names


def test_every_metric_of_the_alert_rules_exists_with_its_labels() -> None:
    series = _series()
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    named: set[str] = set()
    for group in groups:
        for rule in group["rules"]:
            assert ("alert" in rule) != ("record" in rule), rule
            named |= _check(rule["expr"], series, rule.get("alert") or rule["record"])
            for used in re.findall(r"\blockstep:[a-z0-9_:]+", rule["expr"]):
                assert used in recorded, f"{used} is not a recording rule"
            if "alert" in rule:
                assert rule["labels"]["severity"] in {"page", "ticket", "info"}
                assert rule["annotations"]["summary"]
    assert {"lockstep_slo_violations_total", "lockstep_e2e_latency_seconds_count",
            "lockstep_consumer_lag", "lockstep_slo_breaches_total"} <= named


def test_the_prometheus_config_loads_the_alert_rules() -> None:
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    assert "/etc/prometheus/alerts.yml" in config["rule_files"]
    assert "./prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in (
        DOCKER / "compose.yaml").read_text()


def _targets(panels: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for panel in panels:
        out += [(panel["title"], t["expr"]) for t in panel.get("targets", [])]
        out += _targets(panel.get("panels", []))
    return out


def test_every_metric_of_the_grafana_dashboard_exists_with_its_labels() -> None:
    series = _series()
    dashboard = json.loads(DASHBOARD.read_text())
    targets = _targets(dashboard["panels"])
    assert len(targets) >= 10
    named: set[str] = set()
    for title, expr in targets:
        named |= _check(expr, series, title)
    assert {"lockstep_stage_latency_seconds_bucket", "lockstep_e2e_latency_seconds_bucket",
            "lockstep_slo_degraded", "lockstep_tokens_total", "lockstep_windows_total",
            "lockstep_consumer_lag"} <= named
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_check_catches_a_misspelt_metric_and_an_unknown_label() -> None:
    series = _series()
    with pytest.raises(AssertionError, match="unknown metrics"):
        _check("rate(lockstep_windows_count[5m])", series, "typo")
    with pytest.raises(AssertionError, match="has no label"):
        _check('lockstep_consumer_lag{pool="vl"}', series, "label")
    with pytest.raises(AssertionError, match="grouping"):
        _check("sum by (pool) (lockstep_consumer_lag)", series, "by")


def test_the_dashboard_filters_by_class_pool_and_job_over_the_rate_interval() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"class", "pool", "job"} <= variables
    targets = _targets(dashboard["panels"])
    exprs = " ".join(expr for _, expr in targets)
    for variable in ("$class", "$pool", "$job"):
        assert variable in exprs
    fixed = [(title, expr) for title, expr in targets if re.search(r"\[\d+[smhdw]\]", expr)]
    assert not fixed, f"hard-coded ranges instead of $__rate_interval: {fixed}"
    assert all("$__rate_interval" in expr for _, expr in targets if "rate(" in expr)
    titles = " ".join(title.lower() for title, _ in targets)
    for topic in ("expired", "late", "dead letters", "queue depth"):
        assert topic in titles, f"no panel for {topic}"


def test_compose_prometheus_scrapes_every_role_on_all_addresses() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    roles = {name for name, service in compose["services"].items()
             if (service.get("command") or [None])[0] == "run"}
    assert {"align", "route", "worker", "worker-text"} <= roles
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    scraped = {name for job in config["scrape_configs"] for sd in job.get("dns_sd_configs", [])
               for name in sd["names"]}
    assert roles <= scraped, f"not scraped: {roles - scraped}"
    anchor = compose["x-lockstep"]["environment"]
    assert anchor["LOCKSTEP_METRICS__HOST"] == "0.0.0.0"
    assert "LOCKSTEP_METRICS__HOST=0.0.0.0" in (DOCKER / "Dockerfile").read_text()
