"""The contracts in docs/ are what the code says, and every test vector holds to them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import msgpack
import pytest
import yaml

from lockstep.config.settings import KafkaSettings, TopicsSettings
from lockstep.errors import BadInput, SchemaError
from lockstep.topics import catalog
from lockstep.topics.codec import HEADER_SIZE, Kind, decode, encode
from lockstep.topics.contract import KIND_OF_STEM, STEMS, asyncapi, from_json, json_schema, to_json
from lockstep.topics.contract_files import REGENERATE, differences, render
from lockstep.topics.edge import kind_of_topic
from lockstep.topics.validation import Candidate, check
from tests.factories import request, sensor

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
VALID = sorted((DOCS / "test-vectors" / "valid").glob("*.json"))
INVALID = sorted((DOCS / "test-vectors" / "invalid").glob("*.json"))


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def test_generated_contract_files_are_what_the_code_generates() -> None:
    stale = differences(DOCS)
    assert not stale, f"docs/ is stale: {', '.join(stale)}; regenerate with `{REGENERATE}`"


def test_there_is_a_schema_per_kind_and_a_valid_vector_of_every_kind() -> None:
    assert {f"contracts/{STEMS[k]}.schema.json" for k in Kind} <= render().keys()
    assert {_load(p)["kind"] for p in VALID} == set(STEMS.values())


def test_asyncapi_document_is_valid_asyncapi_3() -> None:
    spec = json.loads((ROOT / "tests" / "schemas" / "asyncapi-3.0.0.json").read_text())
    document = yaml.safe_load((DOCS / "asyncapi.yaml").read_text(encoding="utf-8"))
    errors = [e.message for e in jsonschema.Draft7Validator(spec).iter_errors(document)]
    assert not errors


def test_asyncapi_has_every_catalog_topic_with_its_partitions_and_retention() -> None:
    document = asyncapi()
    channels = {c["address"]: c for c in document["channels"].values()}
    for spec in catalog.catalog(TopicsSettings(), KafkaSettings().max_record_bytes):
        kafka = channels[spec.name]["bindings"]["kafka"]
        assert kafka["partitions"] == spec.partitions
        assert kafka["topicConfiguration"]["retention.ms"] == int(spec.configs["retention.ms"])
        kind = kind_of_topic(spec.name)
        assert kind is not None
        message = document["components"]["messages"][next(iter(channels[spec.name]["messages"]))]
        assert message["x-lockstep-kind"] == int(kind)
    assert set(channels) == {s.name for s in catalog.catalog(TopicsSettings())}


def test_asyncapi_follows_the_settings_it_is_given() -> None:
    document = asyncapi(TopicsSettings(media_partitions=12, pools=("vl", "gpu2")))
    addresses = {c["address"]: c for c in document["channels"].values()}
    assert addresses["media.audio"]["bindings"]["kafka"]["partitions"] == 12
    assert "requests.gpu2" in addresses and "requests.text" not in addresses


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_vector_decodes_to_its_json_and_re_encodes_byte_for_byte(path: Path) -> None:
    vector = _load(path)
    value = bytes.fromhex(vector["value_hex"])
    record = decode(value)
    assert value[3] == vector["kind_byte"] and type(record).__name__ == vector["model"]
    assert to_json(record) == vector["record"]
    assert encode(record) == value
    assert encode(from_json(KIND_OF_STEM[vector["kind"]], vector["record"])) == value


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_vector_json_passes_its_json_schema(path: Path) -> None:
    vector = _load(path)
    schema = _load(DOCS / "contracts" / f"{vector['kind']}.schema.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(vector["record"])


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_vector_is_refused_with_its_code_and_field(path: Path) -> None:
    vector = _load(path)
    value = bytes.fromhex(vector["value_hex"]) if vector["value_hex"] is not None else None
    key = vector["key"].encode() if vector["key"] is not None else None
    verdict = check(Candidate(path.name, value, vector["topic"], key),
                    now_us=1_800_000_000_000_000, max_future_us=5_000_000)
    assert not verdict.ok
    assert (verdict.code, verdict.field) == (vector["expect"]["code"], vector["expect"]["field"])


def test_json_schema_of_a_token_refuses_what_the_decoder_refuses() -> None:
    schema = json_schema(Kind.SENSOR)
    good = to_json(sensor())
    jsonschema.Draft202012Validator(schema).validate(good)
    for bad in ({**good, "firmware": "1"}, {**good, "seq": "7"}, {**good, "values": []},
                {k: v for k, v in good.items() if k != "t_us"}):
        assert not jsonschema.Draft202012Validator(schema).is_valid(bad)


def test_records_lockstep_writes_ignore_unknown_fields_but_tokens_do_not() -> None:
    def with_extra(record: Any) -> bytes:
        value = encode(record)
        body = msgpack.unpackb(value[HEADER_SIZE:], raw=False)
        body["added_in_a_later_release"] = 1
        body.get("window", {}).get("timeline", {})["new_stage_us"] = 5
        return value[:HEADER_SIZE] + msgpack.packb(body, use_bin_type=True)

    assert decode(with_extra(request())) == request()
    with pytest.raises(SchemaError, match="added_in_a_later_release"):
        decode(with_extra(sensor()))
    schema = json_schema(Kind.REQUEST)
    assert jsonschema.Draft202012Validator(schema).is_valid(
        {**to_json(request()), "added_in_a_later_release": 1})


def test_bytes_in_the_json_form_are_standard_base64_and_read_back() -> None:
    vector = _load(DOCS / "test-vectors" / "valid" / "video-jpeg.json")
    data = vector["record"]["data"]
    assert "-" not in data and "_" not in data and data.startswith("/9j/")  # ff d8 ff
    with pytest.raises(BadInput):
        decode(b"LS\x01\x01" + json.dumps(vector["record"]).encode())
