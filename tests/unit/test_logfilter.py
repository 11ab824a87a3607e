"""Client logs: one line per message template and interval, with a count of the rest."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from lockstep.kafka.logfilter import CLIENT_LOGGERS, RateLimitFilter, route_client_logs

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _record(msg: str, *args: object, name: str = "aiokafka",
            level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_flood_of_one_template_passes_once_per_interval() -> None:
    clock = Clock()
    limit = RateLimitFilter(10.0, clock=clock)
    passed = 0
    for i in range(1000):  # 100 s of one error every 0.1 s
        passed += limit.filter(_record("Unable connect to node %s: %s", i, "refused"))
        clock.now += 0.1
    assert passed == 10
    assert limit.suppressed_total == 990


def test_the_first_record_after_a_held_back_burst_says_how_many_were_suppressed() -> None:
    clock = Clock()
    limit = RateLimitFilter(10.0, clock=clock)
    first = _record("Got error produce response: %s", "NodeNotReadyError")
    assert limit.filter(first) and not hasattr(first, "suppressed")
    for _ in range(41):
        assert not limit.filter(_record("Got error produce response: %s", "x"))
    clock.now += 10.0
    later = _record("Got error produce response: %s", "NodeNotReadyError")
    assert limit.filter(later)
    assert later.suppressed == 41  # type: ignore[attr-defined]
    assert later.getMessage() == ("Got error produce response: NodeNotReadyError "
                                  "(41 similar suppressed in the last 10 s)")


def test_templates_levels_and_librdkafka_facilities_have_separate_budgets() -> None:
    limit = RateLimitFilter(10.0, clock=Clock())
    assert limit.filter(_record("Unable connect to node %s", 1))
    assert limit.filter(_record("Unable to update metadata from %s", 1))
    assert limit.filter(_record("Unable connect to node %s", 1, level=logging.WARNING))
    rdkafka = "%s [%s] %s"  # confluent-kafka's template: facility, client, text
    assert limit.filter(_record(rdkafka, "FAIL", "lockstep#producer-1", "refused",
                                name="librdkafka"))
    assert limit.filter(_record(rdkafka, "GETPID", "lockstep#producer-1", "retrying",
                                name="librdkafka"))
    assert not limit.filter(_record(rdkafka, "FAIL", "lockstep#producer-1", "again",
                                    name="librdkafka"))


def test_burst_lets_that_many_through_per_interval() -> None:
    limit = RateLimitFilter(5.0, burst=3, clock=Clock())
    assert [limit.filter(_record("retrying %s", i)) for i in range(5)] == [
        True, True, True, False, False]


def test_the_least_recently_seen_template_is_forgotten_past_max_keys() -> None:
    limit = RateLimitFilter(10.0, clock=Clock(), max_keys=2)
    for msg in ("a %s", "b %s", "c %s"):
        assert limit.filter(_record(msg, 1))
    assert limit.filter(_record("a %s", 2))  # forgotten, so a fresh budget
    assert not limit.filter(_record("c %s", 2))


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def root_handler() -> Iterator[Collect]:
    """A handler on the root logger; the client loggers are put back afterwards."""
    saved = {name: (lg.level, lg.propagate, list(lg.handlers))
             for name in CLIENT_LOGGERS for lg in [logging.getLogger(name)]}
    handler = Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)
    for name, (level, propagate, handlers) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.propagate = propagate
        logger.handlers[:] = handlers


def test_routed_client_loggers_reach_the_root_handlers_quiet_and_rate_limited(
        root_handler: Collect) -> None:
    # routed in the test: pytest attaches capture handlers to non-propagating loggers
    limiter = route_client_logs()
    route_client_logs()  # a second call replaces the routing, it does not double it
    limiter = route_client_logs()
    sender = logging.getLogger("aiokafka.producer.sender")  # a child of a routed logger
    for i in range(500):
        sender.warning("Got error produce response on %s, retrying", i)
        logging.getLogger("aiokafka").error("Unable connect to node with id %s", 1)
        logging.getLogger("aiokafka").info("Reconnecting %s", i)
    names = [(r.name, r.levelno) for r in root_handler.records]
    assert names == [("aiokafka.producer.sender", logging.WARNING),
                     ("aiokafka", logging.ERROR)]
    assert limiter.suppressed_total == 998
    # One handler of ours a logger, however often routed (pytest adds its capture handlers
    # to loggers that do not propagate, depending on what ran before in this worker).
    assert [len([h for h in logging.getLogger(n).handlers
                 if not type(h).__module__.startswith("_pytest")])
            for n in CLIENT_LOGGERS] == [1, 1, 1]


def test_client_loggers_are_never_more_verbose_than_the_root_logger(
        root_handler: Collect) -> None:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        route_client_logs()
        logging.getLogger("librdkafka").warning("%s [%s] %s", "FAIL", "p-1", "disconnected")
        logging.getLogger("librdkafka").error("%s [%s] %s", "FAIL", "p-1", "refused")
    finally:
        root.setLevel(level)
    assert [r.getMessage() for r in root_handler.records] == ["FAIL [p-1] refused"]
