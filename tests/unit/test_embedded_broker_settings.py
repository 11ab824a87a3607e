import pytest

from lockstep.config.settings import KafkaSettings
from lockstep.kafka.embedded import EMBEDDED_LINGER_MS, EmbeddedBroker

pytestmark = pytest.mark.unit


def test_clients_of_the_embedded_broker_wait_briefly_and_linger_unless_told() -> None:
    broker = EmbeddedBroker(port=19092)
    plain = broker.client_settings(KafkaSettings())
    assert plain.bootstrap_servers == "127.0.0.1:19092"
    assert plain.fetch_max_wait_ms == 5
    assert plain.linger_ms == EMBEDDED_LINGER_MS > KafkaSettings().linger_ms == 0

    told = broker.client_settings(KafkaSettings(linger_ms=0, fetch_max_wait_ms=3))
    assert (told.linger_ms, told.fetch_max_wait_ms) == (0, 3)
