"""Settings errors name the setting and never show a secret (SASL password, API key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep.config.settings import load_settings
from lockstep.errors import ConfigError

pytestmark = pytest.mark.unit

PASSWORD = "Hunter2-s3cret-Passw0rd"
API_KEY = "sk-live-9f8e7d6c5b4a3210"


def _message(**kwargs: object) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(**kwargs)  # type: ignore[arg-type]
    error = caught.value
    assert error.__cause__ is None and error.__suppress_context__  # no pydantic text chained
    return str(error)


def _no_part_of(secret: str, message: str) -> None:
    """Not the secret, nor any 5 characters of it in a row (pydantic shows both ends)."""
    pieces = {secret[i:i + 5] for i in range(len(secret) - 4)}
    shown = sorted(p for p in pieces if p in message)
    assert not shown, f"{shown} of the secret in: {message}"


@pytest.mark.parametrize(("environ", "names"), [
    ({"LOCKSTEP_KAFKA__SECURITY_PROTOCOL": "SASL_SSL", "LOCKSTEP_KAFKA__SASL_PASSWORD": PASSWORD},
     ["LOCKSTEP_KAFKA__SASL_MECHANISM", "LOCKSTEP_KAFKA__SASL_USERNAME"]),
    ({"LOCKSTEP_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
      "LOCKSTEP_KAFKA__SASL_MECHANISM": "PLAIN", "LOCKSTEP_KAFKA__SASL_PASSWORD": PASSWORD},
     ["LOCKSTEP_KAFKA__SASL_USERNAME"]),
    ({"LOCKSTEP_KAFKA__SECURITY_PROTOCOL": "SASL_SSL", "LOCKSTEP_KAFKA__SASL_MECHANISM": "MD5",
      "LOCKSTEP_KAFKA__SASL_USERNAME": "u", "LOCKSTEP_KAFKA__SASL_PASSWORD": PASSWORD},
     ["LOCKSTEP_KAFKA__SASL_MECHANISM"]),
    ({"LOCKSTEP_KAFKA__SASL_PASWORD": PASSWORD}, ["LOCKSTEP_KAFKA__SASL_PASWORD"]),
    ({"LOCKSTEP_KAFKA__SASL_PASSWORD": PASSWORD, "LOCKSTEP_KAFKA__SESSION_TIMEOUT_MS": "5"},
     ["LOCKSTEP_KAFKA__SESSION_TIMEOUT_MS"]),
    ({"LOCKSTEP_KAFKA": '{"sasl_password": "' + PASSWORD + '", '}, ["LOCKSTEP_KAFKA__"]),
])
def test_a_kafka_settings_error_names_the_setting_but_never_the_password(
        environ: dict[str, str], names: list[str]) -> None:
    message = _message(environ=environ)
    _no_part_of(PASSWORD, message)
    for name in names:
        assert name in message


def test_the_same_holds_for_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("LOCKSTEP_KAFKA__SASL_PASSWORD", PASSWORD)
    message = _message()
    _no_part_of(PASSWORD, message)
    assert "kafka.sasl_username (LOCKSTEP_KAFKA__SASL_USERNAME)" in message


@pytest.mark.parametrize("environ", [
    {"LOCKSTEP_WORKER__OPENAI__API_KEY": API_KEY, "LOCKSTEP_WORKER__MAX_BATCH": "0"},
    {"LOCKSTEP_WORKER__OPENAI__API_KEY": API_KEY, "LOCKSTEP_WORKER__ENGINE": "GPT 4!"},
    {"LOCKSTEP_WORKER__OPENAI__API_KEY": API_KEY,
     "LOCKSTEP_WORKER__DEGRADE_FRACTIONS": "[0.5, 1.0]"},
    {"LOCKSTEP_WORKER__OPENAI__APIKEY": API_KEY},
    {"LOCKSTEP_WORKER": '{"openai": {"api_key": "' + API_KEY + '", "max_concurrency": 0}}'},
])
def test_a_worker_settings_error_shows_no_part_of_the_openai_key(
        environ: dict[str, str]) -> None:
    message = _message(environ=environ)
    _no_part_of(API_KEY, message)
    assert "worker" in message


def test_flags_and_files_carrying_secrets_are_masked_too(tmp_path: Path) -> None:
    _no_part_of(PASSWORD, _message(environ={}, kafka={
        "security_protocol": "SASL_SSL", "sasl_password": PASSWORD}))
    _no_part_of(PASSWORD, _message(environ={}, kafka={"sasl_password": {"v": PASSWORD}}))
    config = tmp_path / "lockstep.toml"
    config.write_text(f'[kafka]\nsecurity_protocol = "SASL_SSL"\nsasl_password = "{PASSWORD}"\n'
                      f'[worker.openai]\napi_key = "{API_KEY}"\nmax_concurrency = -1\n')
    message = _message(config=config, environ={})
    _no_part_of(PASSWORD, message)
    _no_part_of(API_KEY, message)
    assert "worker.openai.max_concurrency (LOCKSTEP_WORKER__OPENAI__MAX_CONCURRENCY)" in message


def test_a_validation_error_is_one_line_naming_the_dotted_path_and_the_variable() -> None:
    message = _message(environ={"LOCKSTEP_ALIGN__TOLERANCES_MS": '{"video": -1}',
                                "LOCKSTEP_TOPICS__MEDIA_PARTITIONS": "0"})
    assert "\n" not in message
    assert "align.tolerances_ms.video (LOCKSTEP_ALIGN__TOLERANCES_MS__VIDEO)" in message
    assert "topics.media_partitions (LOCKSTEP_TOPICS__MEDIA_PARTITIONS)" in message
