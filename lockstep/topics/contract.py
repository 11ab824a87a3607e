"""Machine-readable contracts generated from the code: JSON Schemas and an AsyncAPI document.

Pure. :func:`json_schema` is the JSON Schema (draft 2020-12) of one record kind, taken from
its pydantic model; :func:`asyncapi` is an AsyncAPI 3.0 document of every topic of the
catalog with its key, kind, partitions and configs at the default settings. The JSON form
of a record (:func:`to_json`, :func:`from_json`) is its MessagePack map written as JSON,
with ``bin`` fields as base64 strings. ``python -m lockstep.topics.contract_files`` writes
the files under docs/; a test regenerates and compares.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from enum import Enum
from typing import Any, Final

from pydantic import BaseModel

from lockstep.config.settings import KafkaSettings, TopicsSettings
from lockstep.topics import catalog
from lockstep.topics.codec import MODELS, STRICT_KINDS, VERSION, Kind
from lockstep.topics.edge import kind_of_topic

#: File stem of each kind's schema (docs/contracts/<stem>.schema.json) and test vectors.
STEMS: Final[Mapping[Kind, str]] = {
    Kind.VIDEO: "video", Kind.AUDIO: "audio", Kind.OCR: "ocr", Kind.SENSOR: "sensor",
    Kind.WINDOW: "window", Kind.REQUEST: "request", Kind.RESPONSE: "response",
    Kind.DEADLETTER: "deadletter", Kind.LATE: "late", Kind.SLO_EVENT: "slo-event",
}
KIND_OF_STEM: Final[Mapping[str, Kind]] = {stem: kind for kind, stem in STEMS.items()}
SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FORMAT: Final = "application/schema+json;version=draft-2020-12"
CONTENT_TYPE: Final = "application/vnd.lockstep.v1+msgpack"
KAFKA_BINDING: Final = "0.5.0"
#: What the Kafka key of each kind holds.
KEYS: Final[Mapping[Kind, tuple[str, dict[str, Any]]]] = {
    **{k: ("stream_id, UTF-8 (equals the record's stream_id)",
           {"type": "string", "minLength": 1, "maxLength": 128,
            "pattern": r"^[A-Za-z0-9._:@/\-]+$"})
       for k in (Kind.VIDEO, Kind.AUDIO, Kind.OCR, Kind.SENSOR, Kind.WINDOW, Kind.REQUEST,
                 Kind.RESPONSE, Kind.LATE)},
    Kind.DEADLETTER: ("the refused record's own key, verbatim (bytes; may be null)",
                      {"type": ["string", "null"]}),
    Kind.SLO_EVENT: ("the SLO class, UTF-8", {"type": "string", "minLength": 1}),
}


def json_schema(kind: Kind) -> dict[str, Any]:
    """The JSON Schema of one kind's record, in its JSON form (``bin`` fields as base64).

    Media tokens forbid unknown fields; the records Lockstep writes allow them (readers
    ignore what they do not know, docs/wire-format.md §10).
    """
    model = MODELS[kind]
    body = _bytes_as_base64(model.model_json_schema(mode="validation"))
    if kind not in STRICT_KINDS:
        body = _open(body)
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": f"{STEMS[kind]}.schema.json",
        "x-lockstep-kind": int(kind),
        "x-lockstep-wire": (f"Kafka record value: b'LS', version {VERSION}, kind "
                            f"0x{int(kind):02x}, then this map as MessagePack (bin for "
                            "base64 fields)"),
        **body,
    }


def _bytes_as_base64(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _bytes_as_base64(v) for k, v in node.items()}
        if out.get("type") == "string" and out.get("format") in ("base64url", "binary"):
            del out["format"]
            out["contentEncoding"] = "base64"
        return out
    if isinstance(node, list):
        return [_bytes_as_base64(v) for v in node]
    return node


def _open(node: Any) -> Any:
    """The schema without ``additionalProperties: false`` (readers ignore unknown keys)."""
    if isinstance(node, dict):
        return {k: _open(v) for k, v in node.items()
                if not (k == "additionalProperties" and v is False)}
    if isinstance(node, list):
        return [_open(v) for v in node]
    return node


def to_json(record: BaseModel) -> dict[str, Any]:
    """A record's JSON form: its fields as JSON values, ``bin`` fields as base64 strings."""
    out: dict[str, Any] = _jsonable(record)
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return {k: _jsonable(v) for k, v in value.__dict__.items()}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {(k.value if isinstance(k, Enum) else k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def from_json(kind: Kind, body: Mapping[str, Any]) -> BaseModel:
    """Validate a record's JSON form as the decoder validates its MessagePack form.

    Raises:
        pydantic.ValidationError: It breaks the contract of its kind.
    """
    text = json.dumps(body)
    if kind in STRICT_KINDS:
        return MODELS[kind].model_validate_json(text)
    return MODELS[kind].model_validate_json(text, extra="ignore")


def asyncapi(topics: TopicsSettings | None = None,
             kafka: KafkaSettings | None = None) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of every topic in the catalog, at the given settings."""
    topics = topics or TopicsSettings()
    kafka = kafka or KafkaSettings()
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for spec in catalog.catalog(topics, kafka.max_record_bytes):
        kind = kind_of_topic(spec.name)
        assert kind is not None, spec.name  # every catalog topic carries one kind
        name = MODELS[kind].__name__
        messages[name] = _message(kind)
        cid = spec.name.replace(".", "_")
        channels[cid] = {
            "address": spec.name,
            "title": spec.name,
            "description": _TOPIC_TEXT[kind] + _partitioning(spec.kind),
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
            "bindings": {"kafka": {
                "topic": spec.name, "partitions": spec.partitions,
                "replicas": spec.replication_factor,
                "topicConfiguration": {"cleanup.policy": ["delete"],
                                       **{k: _config_value(v) for k, v in spec.configs.items()}},
                "bindingVersion": KAFKA_BINDING}},
        }
        for role, action in _roles(kind):
            operations[f"{role}-{action}-{cid}"] = {
                "action": action, "channel": {"$ref": f"#/channels/{cid}"},
                "summary": f"{role} {'reads' if action == 'receive' else 'writes'} {spec.name}",
                "messages": [{"$ref": f"#/channels/{cid}/messages/{name}"}],
            }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Lockstep",
            "version": str(VERSION),
            "description": (
                "Real-time multimodal inference over Kafka: every topic, its key and record "
                "kind, at the default settings (LOCKSTEP_TOPICS__* changes partitions, "
                "replication and retention). The version is the wire format's. Each value is "
                "b'LS', the version byte, the kind byte, then one MessagePack map: see "
                "docs/wire-format.md. Operations are the pipeline's own (its roles)."),
        },
        "defaultContentType": CONTENT_TYPE,
        "servers": {"development": {
            "host": "localhost:9092", "protocol": "kafka",
            "description": ("Any Kafka cluster (KRaft); the embedded development broker "
                            "(`lockstep broker`) needs consumers' fetch.max.wait.ms at about "
                            "5 ms.")}},
        "channels": channels,
        "operations": operations,
        "components": {"messages": dict(sorted(messages.items()))},
    }


_TOPIC_TEXT: Final[Mapping[Kind, str]] = {
    Kind.VIDEO: "Video frames from producers.",
    Kind.AUDIO: "Audio chunks from producers (sent once captured: at t_us + duration_us).",
    Kind.OCR: "Text seen in the scene, from producers.",
    Kind.SENSOR: "Sensor readings from producers.",
    Kind.WINDOW: "Aligned windows (align to route).",
    Kind.REQUEST: "Routed requests of one engine pool (route to its workers).",
    Kind.RESPONSE: "One response per window (ok, dropped or expired).",
    Kind.DEADLETTER: "Records no stage could process, with a reason code.",
    Kind.LATE: "Valid tokens that missed their window, with a reason code.",
    Kind.SLO_EVENT: "SLO breach and recovery events.",
}


def _partitioning(kind: str) -> str:
    rule = (" Partition = murmur2(key) mod partitions (Kafka's default partitioner); "
            "never set by hand.")
    if kind == "media":
        return rule + " The four media.* topics have the same partition count."
    return rule


def _roles(kind: Kind) -> list[tuple[str, str]]:
    if kind in (Kind.VIDEO, Kind.AUDIO, Kind.OCR, Kind.SENSOR):
        return [("align", "receive")]
    return {
        Kind.WINDOW: [("align", "send"), ("route", "receive")],
        Kind.REQUEST: [("route", "send"), ("worker", "receive")],
        Kind.RESPONSE: [("worker", "send"), ("route", "send")],
        Kind.DEADLETTER: [("align", "send"), ("route", "send"), ("worker", "send")],
        Kind.LATE: [("align", "send")],
        Kind.SLO_EVENT: [("roles", "send"), ("roles", "receive")],
    }[kind]


def _message(kind: Kind) -> dict[str, Any]:
    model = MODELS[kind]
    text, key = KEYS[kind]
    return {
        "name": model.__name__,
        "title": f"{model.__name__} (kind {int(kind)})",
        "summary": (model.__doc__ or "").strip().splitlines()[0],
        "contentType": CONTENT_TYPE,
        "payload": {"schemaFormat": SCHEMA_FORMAT,
                    "schema": {"$ref": f"contracts/{STEMS[kind]}.schema.json"}},
        "bindings": {"kafka": {"key": {**key, "description": text},
                               "bindingVersion": KAFKA_BINDING}},
        "x-lockstep-kind": int(kind),
    }


def _config_value(value: str) -> int | str:
    return int(value) if value.lstrip("-").isdigit() else value
