from pathlib import Path

import pytest

from lockstep.config.settings import Settings, load_settings
from lockstep.errors import ConfigError

pytestmark = pytest.mark.unit


def test_defaults_match_the_reference_slo_classes() -> None:
    s = load_settings()
    assert s.slo.classes["cabin"].e2e_ms == 120
    assert s.slo.classes["surgical"].e2e_ms == 80 and not s.slo.classes["surgical"].drop_frames
    assert s.slo.classes["ar"].fps == 25
    assert s.align.tolerance_ms == 15 and s.slo.stage_p99_ms == 12


def test_nested_environment_variables_use_the_lockstep_prefix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_ALIGN__TOLERANCE_MS", "7.5")
    monkeypatch.setenv("LOCKSTEP_WORKER__POOL", "text")
    monkeypatch.setenv("LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    s = load_settings()
    assert s.align.tolerance_ms == 7.5
    assert s.worker.pool == "text"
    assert s.kafka.require_bootstrap() == "k1:9092,k2:9092"


def test_toml_file_is_read_and_environment_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "lockstep.toml"
    config.write_text('[align]\ntolerance_ms = 9\nhop_ms = 50\n[worker]\nmax_batch = 4\n')
    monkeypatch.setenv("LOCKSTEP_ALIGN__HOP_MS", "40")
    s = load_settings(config)
    assert (s.align.tolerance_ms, s.align.hop_ms, s.worker.max_batch) == (9, 40, 4)


def test_flags_override_one_field_without_resetting_the_section(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_WORKER__MAX_BATCH", "3")
    s = load_settings(worker={"pool": "text"})
    assert (s.worker.pool, s.worker.max_batch) == ("text", 3)


@pytest.mark.parametrize(("overrides", "match"), [
    ({"align": {"tolerance_ms": -1}}, "tolerance_ms"),
    ({"align": {"unknown": 1}}, "unknown"),
    ({"worker": {"pool": "Bad Pool"}}, "pool"),
    ({"slo": {"default_class": "nope"}}, "default_class"),
    ({"kafka": {"security_protocol": "SASL_SSL"}}, "SASL_SSL needs kafka.sasl_mechanism"),
])
def test_invalid_settings_raise_config_error(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_settings(**overrides)  # type: ignore[arg-type]


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "absent.toml")


def test_sasl_options_pass_through_and_the_secret_is_hidden() -> None:
    s = Settings(kafka={"bootstrap_servers": "k:9093", "security_protocol": "SASL_PLAINTEXT",
                        "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "u",
                        "sasl_password": "p4ss", "confluent_extra": {"acks": "all"}})
    assert "p4ss" not in repr(s)
    conf = s.kafka.confluent_config()
    assert conf["sasl.password"] == "p4ss" and conf["security.protocol"] == "sasl_plaintext"
    assert conf["acks"] == "all"
    opts = s.kafka.aiokafka_options()
    assert opts["sasl_mechanism"] == "SCRAM-SHA-512" and opts["sasl_plain_password"] == "p4ss"


def test_missing_bootstrap_says_how_to_set_it() -> None:
    with pytest.raises(ConfigError, match="LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS"):
        Settings().kafka.require_bootstrap()


def test_settings_are_frozen() -> None:
    s = Settings()
    with pytest.raises(ValueError, match="frozen"):
        s.align.tolerance_ms = 3  # type: ignore[misc]


def test_streams_declare_their_slo_class_by_id_pattern_first_match_wins() -> None:
    slo = load_settings(slo={"streams": {"or-*": "surgical", "hud-*": "ar", "*-ar": "cabin"}}).slo
    assert slo.class_of("or-7") == "surgical"
    assert slo.class_of("hud-left-ar") == "ar"  # the first pattern that matches
    assert slo.class_of("car-2") == "cabin" == slo.default_class


def test_a_stream_pattern_must_name_a_known_class() -> None:
    with pytest.raises(ConfigError, match=r"not in slo\.classes"):
        load_settings(slo={"streams": {"or-*": "theatre"}})
