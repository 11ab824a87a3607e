"""The Faust app factory.

One app per process, named after the roles it runs (``lockstep-align``,
``lockstep-worker-vl``…): processes running the same roles share a consumer group and
split its partitions, which is how operators scale a role. Lockstep creates its topics
itself (``lockstep topics create``), so Faust declares none; offsets are committed
promptly, and only for events the agents have acknowledged after the broker acknowledged
what they produced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import faust
import uvloop
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.supervisors import CrashingSupervisor

from lockstep.streams.settings import Settings

ROLES = ("align", "route", "worker")


def group_id(settings: Settings, roles: Sequence[str],
             pools: Sequence[str] | None = None) -> str:
    """The consumer group (and Faust app id) of a process running ``roles``."""
    workers = "worker-" + "-".join(pools or [settings.worker.pool])
    parts = [r if r != "worker" else workers for r in ROLES if r in roles]
    return "-".join([settings.app_id, *parts])


def broker_urls(bootstrap: str) -> list[str]:
    """Faust broker URLs from a Kafka bootstrap list (``h1:9092,h2:9092``)."""
    return [f"kafka://{hostport.strip()}" for hostport in bootstrap.split(",") if hostport.strip()]


def _credentials(settings: Settings) -> faust.SASLCredentials | faust.SSLCredentials | None:
    kafka = settings.kafka
    context = kafka.ssl_context()
    if kafka.sasl_mechanism and kafka.sasl_username and kafka.sasl_password:
        return faust.SASLCredentials(
            username=kafka.sasl_username,
            password=kafka.sasl_password.get_secret_value(),
            mechanism=kafka.sasl_mechanism,
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Faust hard-codes a 1.5 s fetch wait. Brokers that hold an empty fetch for the
        # whole wait (tansu does) then add up to that much latency to every record.
        consumer._fetch_max_wait_ms = getattr(self.app, "fetch_max_wait_ms", 1500)
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


class LockstepApp(faust.App):
    """A Faust app whose consumer honours ``kafka.fetch_max_wait_ms``."""

    fetch_max_wait_ms: int = 500

    def _new_transport(self) -> _Transport:
        return _Transport(self.conf.broker_consumer, self)


def install_uvloop() -> None:
    """Use uvloop for every event loop created from now on."""
    uvloop.install()


def create_app(settings: Settings, roles: Sequence[str],
               pools: Sequence[str] | None = None) -> LockstepApp:
    """Build (but do not start) the Faust app for ``roles``.

    Agents are registered by the role modules in :mod:`agents`.
    """
    kafka = settings.kafka
    app_id = group_id(settings, roles, pools)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    app = LockstepApp(
        app_id,
        broker=broker_urls(kafka.require_bootstrap()),
        broker_credentials=_credentials(settings),
        broker_client_id=kafka.client_id,
        broker_session_timeout=kafka.session_timeout_ms / 1000.0,
        broker_heartbeat_interval=min(3.0, kafka.session_timeout_ms / 3000.0),
        broker_commit_interval=0.1,
        broker_commit_every=100,
        consumer_auto_offset_reset="earliest",
        consumer_max_fetch_size=kafka.max_record_bytes,
        producer_acks=-1,
        producer_linger_ms=2,
        producer_max_batch_size=1_048_576,
        producer_max_request_size=kafka.max_record_bytes,
        value_serializer="raw",
        key_serializer="raw",
        topic_allow_declare=False,
        topic_disable_leader=True,
        stream_wait_empty=False,
        web_enabled=False,
        store="memory://",
        datadir=str(settings.data_dir / app_id),
        loghandlers=[],
        # An agent that fails (a produce the broker refused, an engine error) takes the
        # process down: its unacknowledged records are replayed by the next owner, which
        # an in-process restart with half-acknowledged state could not guarantee.
        agent_supervisor=CrashingSupervisor,
    )
    app.fetch_max_wait_ms = kafka.fetch_max_wait_ms
    return app
