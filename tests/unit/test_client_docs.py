"""docs/clients.md states every routing default as the settings have it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lockstep.config.settings import RouteSettings

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "clients.md"


def _rows() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    table = re.search(r"<!-- route-defaults -->(.*?)<!-- /route-defaults -->", text, re.S)
    assert table is not None, "the routing defaults table is missing from docs/clients.md"
    return {m[1]: m[2] for m in re.finditer(r"^\| `route\.(\w+)` \| (.*?) \|", table[1], re.M)}


def test_every_routing_setting_is_in_the_table_and_nothing_else() -> None:
    assert set(_rows()) == set(RouteSettings.model_fields)


def test_every_routing_default_in_the_table_is_the_settings_default() -> None:
    rows, defaults = _rows(), RouteSettings()
    for name in RouteSettings.model_fields:
        value = getattr(defaults, name)
        if isinstance(value, float | int):
            assert rows[name] in (f"{value}", f"{value:g}"), name
    assert all(f"`{route}`→`{pool}`" in rows["pools"] for route, pool in defaults.pools.items())
    assert all(f"{name} {domain.weight:g}" in rows["domains"]
               for name, domain in defaults.domains.items())
    assert defaults.sensor_ranges == {} and rows["sensor_ranges"].startswith("`{}`")
