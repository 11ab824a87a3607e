import pytest

from lockstep.errors import ConfigError
from lockstep.runner import parse_roles, pools_in

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
