"""SLO series that alerts can rely on: created at zero, labelled with a class, shed = missed."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from rich.console import Console

from lockstep.config.settings import MetricsSettings, Settings, SloSettings
from lockstep.errors import ConfigError
from lockstep.observe.metrics import parse, summarize
from lockstep.observe.top import default_urls, render
from lockstep.telemetry.metrics import Telemetry
from lockstep.telemetry.slo import SloMonitor

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _watched(slo: SloSettings | None = None) -> tuple[Telemetry, SloMonitor]:
    slo = slo or SloSettings()
    t, monitor = Telemetry(), SloMonitor(slo)
    t.watch(monitor, {c: slo.budget_tree(c) for c in slo.classes},
            default_class=slo.default_class)
    return t, monitor


def test_every_class_has_its_slo_counters_at_zero_before_anything_happens() -> None:
    t, _ = _watched()
    value = t.registry.get_sample_value
    for slo_class in ("cabin", "surgical", "ar"):
        assert value("lockstep_e2e_expired_total", {"slo_class": slo_class}) == 0
        assert value("lockstep_slo_degraded", {"slo_class": slo_class}) == 0
        for stage in ("e2e", "transport", "infer"):
            labels = {"stage": stage, "slo_class": slo_class}
            assert value("lockstep_slo_violations_total", labels) == 0
            assert value("lockstep_slo_breaches_total", labels) == 0


def test_an_observation_without_a_class_is_labelled_with_the_default_class() -> None:
    t, _ = _watched(SloSettings(default_class="ar"))
    t.stage("transport", 0.002)
    t.e2e(0.01, route="full", slo_class="", budget_s=0.2)
    t.expired(slo_class="")
    value = t.registry.get_sample_value
    assert value("lockstep_stage_latency_seconds_count",
                 {"stage": "transport", "route": "", "pool": "", "slo_class": "ar"}) == 1
    assert value("lockstep_e2e_latency_seconds_count", {"route": "full", "slo_class": "ar"}) == 1
    assert value("lockstep_e2e_expired_total", {"slo_class": "ar"}) == 1
    assert 'slo_class=""' not in generate_latest(t.registry).decode()


def test_a_batch_of_observations_is_what_the_same_observations_one_by_one_give() -> None:
    (one, one_slo), (batch, batch_slo) = _watched(), _watched()
    values = [0.001, 0.011, 0.0125, 0.3, 0.0, 0.012]  # around the 12 ms stage budget
    for v in values:
        one.stage("transport", v)
    batch.stages("transport", values)
    batch.stages("transport", [])

    def samples(t: Telemetry) -> list[str]:
        return [line for line in generate_latest(t.registry).decode().splitlines()
                if "_created" not in line]
    assert samples(batch) == samples(one)
    assert batch.registry.get_sample_value(
        "lockstep_slo_violations_total", {"stage": "transport", "slo_class": "cabin"}) == 2
    assert batch.stage_stats()["transport"] == one.stage_stats()["transport"]
    later = time.monotonic_ns() // 1000 + 1_000_000
    assert batch_slo.evaluate(later) == one_slo.evaluate(later)
    key = ("transport", "cabin")
    assert batch_slo._tracks[key].samples.values() == values


def test_an_unwatched_telemetry_labels_with_the_settings_default_class() -> None:
    t = Telemetry()
    t.stage("transport", 0.001)
    assert t.registry.get_sample_value(
        "lockstep_stage_latency_seconds_count",
        {"stage": "transport", "route": "", "pool": "", "slo_class": "cabin"}) == 1


def test_shed_requests_count_against_attainment() -> None:
    t, _ = _watched()
    for _ in range(2):
        t.e2e(0.05, route="full", slo_class="cabin", budget_s=0.12)
    t.expired(slo_class="cabin")
    assert t.slo_attainment() == pytest.approx(2 / 3)


def test_shed_requests_alone_raise_an_e2e_breach() -> None:
    slo = SloSettings(breach={"min_samples": 5, "breach_after": 1})
    t, monitor = _watched(slo)
    for _ in range(10):
        t.e2e(0.05, route="full", slo_class="cabin", budget_s=0.12)
        t.expired(slo_class="cabin")  # every other request shed: P99 is a shed one
    [breach] = monitor.evaluate(time.monotonic_ns() // 1000)
    assert (breach.kind, breach.stage, breach.slo_class) == ("breach", "e2e", "cabin")


def test_top_and_the_report_count_shed_requests_as_missed() -> None:
    t, _ = _watched()
    for _ in range(20):
        t.e2e(0.05, route="full", slo_class="cabin", budget_s=0.12)
    for _ in range(10):
        t.expired(slo_class="cabin")
    for _ in range(3):
        t.expired(slo_class="surgical")  # a class whose every request was shed
    summary = summarize(parse(generate_latest(t.registry).decode()), SloSettings())
    classes = {c.slo_class: c for c in summary.classes}
    assert classes["cabin"].attainment == pytest.approx(20 / 30)
    assert classes["cabin"].responses == 20 and classes["cabin"].expired == 10
    assert classes["surgical"].attainment == 0.0 and classes["surgical"].responses == 0
    assert "ar" not in classes  # nothing happened there
    e2e = next(r for r in summary.stages if r.stage == "e2e")
    assert e2e.count == 33 and e2e.over  # not "ok" while a third was shed
    console = Console(record=True, width=160)
    console.print(render(summary, title="since start", sources=["http://h:9464/metrics"]))
    out = console.export_text()
    assert "66.7%" in out and "0.0%" in out and "metrics from http://h:9464/metrics" in out


def test_the_queue_capacity_and_dead_letters_are_exported() -> None:
    t = Telemetry()
    t.set_queue_capacity("vl", 256)
    t.dead_letter("align", "DecodeError")
    assert t.registry.get_sample_value("lockstep_queue_capacity", {"pool": "vl"}) == 256
    assert t.registry.get_sample_value("lockstep_dead_letters_total",
                                       {"stage": "align", "error": "DecodeError"}) == 1


def test_metrics_listen_on_loopback_unless_told_otherwise() -> None:
    assert MetricsSettings().host == "127.0.0.1"
    port = Telemetry().serve(MetricsSettings().host, 0)
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_each_role_has_its_own_default_port_and_a_set_port_wins() -> None:
    metrics, pools = MetricsSettings(), ("vl", "text")
    ports = {metrics.port_for(["align"], [], pools), metrics.port_for(["route"], [], pools),
             metrics.port_for(["worker"], ["vl"], pools),
             metrics.port_for(["worker"], ["text"], pools)}
    assert ports == {9464, 9465, 9466, 9467}
    assert metrics.port_for(["align", "route", "worker"], ["vl", "text"], pools) == 9464
    assert metrics.port_for(["worker"], ["other"], pools) == 0  # any free port
    assert MetricsSettings(port=0).port_for(["align"], [], pools) == 0
    assert MetricsSettings(port=9999).port_for(["worker"], ["vl"], pools) == 9999


def test_top_reads_every_role_of_this_host_by_default() -> None:
    assert default_urls(Settings()) == [f"http://127.0.0.1:{p}/metrics"
                                        for p in (9464, 9465, 9466, 9467)]
    assert default_urls(Settings(metrics={"port": 9500, "host": "0.0.0.0"})) == [
        "http://127.0.0.1:9500/metrics"]


def test_a_taken_port_is_a_one_line_config_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            Telemetry().serve("127.0.0.1", port)
    assert str(caught.value) == (f"metrics port {port} is in use (set --metrics-port or "
                                 "LOCKSTEP_METRICS__PORT, 0 = any)")


def _run_commands(text: str) -> list[tuple[list[str], list[str]]]:
    """(roles in pipeline order, pools) of every `lockstep run` line of a file."""
    out = []
    for match in re.finditer(r"lockstep run --roles ([\w:,-]+)(?: --pool ([\w,-]+))?", text):
        entries = match[1].split(",")
        names = {e.split(":")[0] for e in entries}
        pools = [e.split(":")[1] for e in entries if ":" in e] + (
            match[2].split(",") if match[2] else [])
        out.append(([r for r in ("align", "route", "worker") if r in names], pools))
    return out


@pytest.mark.parametrize("path", ["Procfile", "README.md"])
def test_the_documented_one_process_per_role_commands_never_share_a_port(path: str) -> None:
    text = (ROOT / path).read_text()
    if path.endswith(".md"):  # the shell blocks: commands meant to run together
        text = "\n".join(re.findall(r"```sh\n(.*?)```", text, re.S))
    commands = [c for c in _run_commands(text) if len(c[0]) == 1]
    assert len(commands) >= 4
    settings = Settings()
    ports = [settings.metrics.port_for(roles, pools or [settings.worker.pool],
                                       settings.topics.pools) for roles, pools in commands]
    assert len(set(ports)) == len(ports) and 0 not in ports, list(zip(commands, ports, strict=True))


def test_the_procfile_gives_every_role_the_readmes_settings_for_the_embedded_broker() -> None:
    readme = (ROOT / "README.md").read_text()
    wanted = ["LOCKSTEP_KAFKA__FETCH_MAX_WAIT_MS=5", "LOCKSTEP_KAFKA__LINGER_MS=2",
              "LOCKSTEP_TOPICS__MEDIA_PARTITIONS=1", "LOCKSTEP_TOPICS__PIPELINE_PARTITIONS=1"]
    assert all(w in readme for w in wanted)
    roles = [line for line in (ROOT / "Procfile").read_text().splitlines()
             if "lockstep run" in line and not line.startswith("#")]
    assert len(roles) >= 4 and all(w in line for line in roles for w in wanted), roles
