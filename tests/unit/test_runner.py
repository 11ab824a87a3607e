import asyncio

import pytest

from lockstep.agents.runner import parse_roles, pools_in
from lockstep.errors import ConfigError

pytestmark = pytest.mark.unit


def test_roles_are_parsed_in_pipeline_order_and_all_means_every_role() -> None:
    assert parse_roles("worker,align") == ["align", "worker"]
    assert parse_roles("all") == ["align", "route", "worker"]


def test_worker_pool_entries_name_the_worker_role_and_its_pools() -> None:
    text = "route,worker:vl,worker:text,worker:vl"
    assert parse_roles(text) == ["route", "worker"]
    assert pools_in(text) == ["vl", "text"]
    assert pools_in("align,route") == []


@pytest.mark.parametrize("text", ["align:vl", "worker:", "worker: "])
def test_a_pool_on_another_role_or_an_empty_pool_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="worker:POOL"):
        pools_in(text)


def test_unknown_roles_are_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match="choose from align, route, worker"):
        parse_roles("align,infer")


def test_the_roles_producer_sends_at_once_unless_a_linger_is_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from lockstep.config.settings import load_settings
    from lockstep.kafka.clients import producer
    from lockstep.kafka.probes import PASSTHROUGH_LINGER_MS, _passthrough_producer

    async def lingers() -> tuple[float, float, float]:
        # aiokafka keeps the linger on its accumulator, in seconds (no public accessor).
        kafka = load_settings().kafka
        monkeypatch.setenv("LOCKSTEP_KAFKA__LINGER_MS", "7")
        tuned = load_settings().kafka
        made = (producer(kafka), producer(tuned), _passthrough_producer(tuned))
        for p in made:
            await p.stop()  # never started: nothing to flush, only the client to close
        return tuple(p._message_accumulator._linger_time  # type: ignore[return-value]
                     for p in made)

    monkeypatch.setenv("LOCKSTEP_KAFKA__BOOTSTRAP_SERVERS", "localhost:9")
    default, tuned, limit = asyncio.run(lingers())
    assert (default, tuned) == (0.0, 0.007)
    # the pass-through keeps a throughput client's linger
    assert limit == PASSTHROUGH_LINGER_MS / 1000
