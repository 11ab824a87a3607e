import pytest

from lockstep.config.settings import TopicsSettings
from lockstep.topics.catalog import MEDIA, catalog, requests_topic

pytestmark = pytest.mark.unit


def test_catalog_has_every_topic_of_the_design() -> None:
    names = [s.name for s in catalog(TopicsSettings(pools=("vl", "text")))]
    assert names == ["media.video", "media.audio", "media.ocr", "media.sensor",
                     "aligned.windows", "requests.vl", "requests.text", "responses",
                     "deadletter", "late", "slo.events"]


def test_media_topics_share_one_partition_count_and_group() -> None:
    specs = [s for s in catalog(TopicsSettings(media_partitions=6)) if s.name in MEDIA.values()]
    assert {s.partitions for s in specs} == {6}
    assert {s.group for s in specs} == {"media"}


def test_topic_configs_carry_retention_and_record_limit() -> None:
    specs = {s.name: s for s in catalog(TopicsSettings(), max_record_bytes=2_000_000)}
    assert specs["media.video"].configs["max.message.bytes"] == "2000000"
    assert int(specs["deadletter"].configs["retention.ms"]) > int(
        specs["media.video"].configs["retention.ms"])


def test_requests_topic_is_named_after_the_pool() -> None:
    assert requests_topic("text") == "requests.text"
