"""The k8s/ manifests: generated from the catalog, consistent with it, and schema-valid.

Core kinds are validated with kubernetes-validate (the Kubernetes OpenAPI schemas); the
KEDA and Strimzi custom resources against the trimmed CRD schemas in tests/schemas/.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from lockstep.cli.main import cli
from lockstep.config.settings import Settings, TopicsSettings, load_settings
from lockstep.kafka.manifests import (
    configmap_environ,
    kafka_topics,
    render_json,
    render_yaml,
    strimzi_manifest,
)
from lockstep.topics.catalog import catalog

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
TOPICS = K8S / "strimzi" / "topics.yaml"
SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
REGENERATE = ("lockstep topics manifest --format strimzi --configmap k8s/config.yaml "
              "--namespace kafka --cluster my-cluster")
#: The oldest Kubernetes k8s/README.md supports, and the newest the validator knows.
KUBERNETES = ("1.27", kubernetes_validate.utils.latest_version())
CRDS = {("kafka.strimzi.io/v1beta2", "KafkaTopic"): "kafkatopic-kafka.strimzi.io-v1beta2",
        ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject-keda.sh-v1alpha1",
        ("keda.sh/v1alpha1", "TriggerAuthentication"): "triggerauthentication-keda.sh-v1alpha1"}
#: Not API objects: kustomize's own files.
KUSTOMIZE = "kustomize.config.k8s.io"


def _configmap_settings() -> Settings:
    environ = configmap_environ((K8S / "config.yaml").read_text(), "k8s/config.yaml")
    return load_settings(environ=environ)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def _resources() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(K8S.rglob("*.yaml")):
        for doc in _documents(path):
            if not str(doc.get("apiVersion", "")).startswith(KUSTOMIZE):
                yield str(path.relative_to(ROOT)), doc


@cache
def _crd_schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{name}.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _validate(doc: dict[str, Any]) -> None:
    """Raise if ``doc`` breaks its kind's schema (CRD schemas for custom resources)."""
    crd = CRDS.get((doc.get("apiVersion", ""), doc.get("kind", "")))
    if crd is not None:
        jsonschema.Draft202012Validator(_crd_schema(crd)).validate(doc)
        return
    for version in KUBERNETES:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_shipped_strimzi_topics_are_the_catalog_generated_for_the_configmap() -> None:
    expected = strimzi_manifest(_configmap_settings(), cluster="my-cluster", namespace="kafka",
                                command=REGENERATE)
    assert TOPICS.read_text() == expected, (
        f"k8s/strimzi/topics.yaml is not the generated catalog; from the repository root run\n"
        f"  {REGENERATE} > k8s/strimzi/topics.yaml")


def test_the_cli_prints_the_same_manifest_as_the_shipped_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    for name in [k for k in os.environ if k.startswith("LOCKSTEP_")]:
        monkeypatch.delenv(name)
    result = CliRunner().invoke(cli, REGENERATE.split()[1:], prog_name="lockstep")
    assert result.exit_code == 0, result.output
    assert result.output == TOPICS.read_text()


def test_the_manifest_holds_every_topic_with_the_layout_of_its_settings() -> None:
    settings = load_settings(environ={}, topics={
        "media_partitions": 8, "pipeline_partitions": 5, "side_partitions": 2,
        "replication_factor": 3, "pools": ["vl", "text", "audio_x"],
        "media_retention_ms": 120_000, "pipeline_retention_ms": 180_000,
        "side_retention_ms": 240_000})
    docs = list(yaml.safe_load_all(strimzi_manifest(settings, cluster="c1")))
    specs = {d["spec"]["topicName"]: d for d in docs}
    assert set(specs) == {"media.video", "media.audio", "media.ocr", "media.sensor",
                          "aligned.windows", "requests.vl", "requests.text", "requests.audio_x",
                          "responses", "deadletter", "late", "slo.events"}
    layout = {n: (d["spec"]["partitions"], d["spec"]["config"]["retention.ms"])
              for n, d in specs.items()}
    assert layout["media.ocr"] == (8, 120_000)
    assert layout["requests.audio_x"] == layout["responses"] == (5, 180_000)
    assert layout["deadletter"] == layout["late"] == layout["slo.events"] == (2, 240_000)
    for doc in docs:
        assert doc["spec"]["replicas"] == 3
        assert doc["spec"]["config"]["min.insync.replicas"] == 2
        assert doc["metadata"]["labels"]["strimzi.io/cluster"] == "c1"
        assert "namespace" not in doc["metadata"]
        _validate(doc)
    # "_" is not allowed in an object name; topicName keeps the topic's own.
    assert specs["requests.audio_x"]["metadata"]["name"] == "requests.audio-x"


def test_routed_pools_get_their_request_topic_even_when_topics_pools_omits_them() -> None:
    settings = load_settings(environ={}, topics={"pools": ["vl"]},
                             route={"pools": {"full": "vl", "vision_only": "vl",
                                              "text_only": "cheap", "early_exit": "cheap"}})
    names = [d["spec"]["topicName"] for d in
             yaml.safe_load_all(strimzi_manifest(settings, cluster="c"))]
    assert "requests.vl" in names and "requests.cheap" in names


def test_the_configmap_sets_replication_3_and_every_partition_count_explicitly() -> None:
    environ = configmap_environ((K8S / "config.yaml").read_text())
    for name in ("REPLICATION_FACTOR", "MEDIA_PARTITIONS", "PIPELINE_PARTITIONS",
                 "SIDE_PARTITIONS", "POOLS"):
        assert f"LOCKSTEP_TOPICS__{name}" in environ, name
    topics = _configmap_settings().topics
    assert topics.replication_factor == 3 and topics.insync_replicas() == 2
    assert environ["LOCKSTEP_METRICS__HOST"] == "0.0.0.0"


def test_scaled_objects_reach_the_partition_count_of_the_topic_they_scale_on() -> None:
    partitions = {s.name: s.partitions for s in catalog(_configmap_settings().topics)}
    scaled = [(path, d) for path, d in _resources() if d["kind"] == "ScaledObject"]
    assert {d["metadata"]["name"] for _, d in scaled} == {"worker-vl", "worker-text"}
    for path, doc in scaled:
        [trigger] = doc["spec"]["triggers"]
        topic = trigger["metadata"]["topic"]
        assert doc["spec"]["maxReplicaCount"] == partitions[topic], (
            f"{path}: maxReplicaCount must be the partition count of {topic} "
            f"({partitions[topic]}); more consumers would sit idle")
        assert trigger["metadata"]["consumerGroup"].endswith(topic.split(".", 1)[1])


def test_fixed_replicas_stay_within_the_partitions_of_their_input() -> None:
    topics = _configmap_settings().topics
    inputs = {"align": topics.media_partitions, "route": topics.pipeline_partitions}
    for path, doc in _resources():
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] in inputs:
            assert doc["spec"]["replicas"] <= inputs[doc["metadata"]["name"]], path


def test_every_shipped_manifest_validates_against_its_schema() -> None:
    kinds = set()
    for path, doc in _resources():
        try:
            _validate(doc)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as exc:
            pytest.fail(f"{path}: {doc['kind']} {doc['metadata'].get('name')}: {exc}")
        kinds.add(doc["kind"])
    assert {"Namespace", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget",
            "ScaledObject", "TriggerAuthentication", "KafkaTopic", "Secret"} <= kinds


def test_the_json_format_is_a_list_of_valid_kafka_topics() -> None:
    items = json.loads(render_json(kafka_topics(catalog(TopicsSettings()), cluster="c")))
    assert (items["apiVersion"], items["kind"], len(items["items"])) == ("v1", "List", 11)
    for doc in items["items"]:
        _validate(doc)


@pytest.mark.parametrize(("where", "change"), [
    ("ScaledObject", lambda d: d["spec"].update(maxReplicas=6)),
    ("ScaledObject", lambda d: d["spec"].update(maxReplicaCount="6")),
    ("KafkaTopic", lambda d: d["spec"].update(partitions=0)),
    ("KafkaTopic", lambda d: d["spec"].update(replica=3)),
    ("Deployment", lambda d: d["spec"]["template"]["spec"].update(containerz=[])),
    ("Service", lambda d: d["spec"]["ports"][0].update(port="metrics")),
])
def test_the_validation_rejects_a_misspelt_field_or_a_wrong_type(where: str, change: Any) -> None:
    doc = next(json.loads(json.dumps(d)) for _, d in _resources() if d["kind"] == where)
    change(doc)
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        _validate(doc)


@pytest.mark.parametrize("value", ["true", "123", "1e3", "a: b", "#x", "", "null", "-1",
                                   "CreateTime", "kafka.strimzi.io/v1beta2", "with space"])
def test_the_yaml_rendering_round_trips_values_that_need_quoting(value: str) -> None:
    doc = {"a": {"b": value, "n": 7, "t": True, "e": {}}}
    assert yaml.safe_load(render_yaml([doc], ["header"])) == doc
