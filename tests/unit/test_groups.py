"""One consumer group per role, whatever else a process runs."""

from __future__ import annotations

import pytest

from lockstep.agents.app import group_id
from lockstep.config.settings import Settings

pytestmark = pytest.mark.unit


def test_each_role_has_one_group_named_after_it() -> None:
    s = Settings()
    assert group_id(s, "align") == "lockstep-align"
    assert group_id(s, "route") == "lockstep-route"


def test_a_worker_group_is_named_after_its_pool_alone() -> None:
    s = Settings(worker={"pool": "text"})
    assert group_id(s, "worker") == "lockstep-worker-text"
    assert group_id(s, "worker", "vl") == "lockstep-worker-vl"


def test_the_app_id_prefixes_every_group() -> None:
    s = Settings(app_id="fleet-a")
    assert {group_id(s, r) for r in ("align", "route")} == {"fleet-a-align", "fleet-a-route"}
