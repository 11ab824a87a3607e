"""The catalog's layout from settings, and how the cluster's topics are judged against it."""

from __future__ import annotations

import pytest

from lockstep.cli.output import render_topics
from lockstep.config.settings import TopicsSettings, load_settings
from lockstep.errors import ConfigError
from lockstep.kafka.admin import compare
from lockstep.topics.catalog import catalog

pytestmark = pytest.mark.unit


def _counts(**overrides: int) -> dict[str, int]:
    counts = {s.name: s.partitions for s in catalog(TopicsSettings())}
    counts.update({k.replace("_", "."): v for k, v in overrides.items()})
    return counts


def test_side_topics_take_their_partitions_and_retention_from_settings() -> None:
    specs = {s.name: s for s in catalog(TopicsSettings(side_partitions=3, side_retention_ms=90_000,
                                                       pipeline_retention_ms=120_000))}
    for name in ("deadletter", "late", "slo.events"):
        assert specs[name].partitions == 3 and specs[name].kind == "side"
        assert specs[name].configs["retention.ms"] == "90000"
    assert specs["responses"].configs["retention.ms"] == "120000"
    assert specs["media.video"].configs["retention.ms"] == "3600000"


def test_min_insync_replicas_follows_the_replication_factor_unless_set() -> None:
    assert "min.insync.replicas" not in catalog(TopicsSettings())[0].configs
    assert catalog(TopicsSettings(replication_factor=3))[0].configs["min.insync.replicas"] == "2"
    explicit = TopicsSettings(replication_factor=3, min_insync_replicas=3)
    assert catalog(explicit)[0].configs["min.insync.replicas"] == "3"
    with pytest.raises(ConfigError, match="min_insync_replicas"):
        load_settings(environ={}, topics={"replication_factor": 2, "min_insync_replicas": 3})


def test_more_partitions_on_a_topic_of_its_own_is_a_warning_not_a_problem() -> None:
    states = {s.spec.name: s for s in compare(catalog(TopicsSettings()),
                                              _counts(aligned_windows=6, deadletter=3, late=3))}
    for name in ("aligned.windows", "deadletter", "late"):
        assert states[name].problems == ()
        assert "more than the catalog's" in states[name].warnings[0]
    assert all(not s.problems for s in states.values())
    table = render_topics(list(states.values()))
    assert "warning: has 6 partitions" in table


def test_media_topics_must_match_the_catalog_exactly_for_co_partitioning() -> None:
    states = {s.spec.name: s for s in compare(
        catalog(TopicsSettings()), _counts(media_video=6, media_audio=6, media_ocr=6,
                                           media_sensor=6))}
    assert states["media.video"].problems == ("has 6 partitions, catalog says 4",)
    assert states["media.video"].warnings == ()


def test_fewer_partitions_than_the_catalog_or_a_missing_topic_is_a_problem() -> None:
    counts = _counts(responses=2)
    del counts["late"]
    states = {s.spec.name: s for s in compare(catalog(TopicsSettings()), counts)}
    assert states["responses"].problems == ("has 2 partitions, catalog says 4",)
    assert states["late"].problems == ("missing",)
