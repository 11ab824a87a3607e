"""``lockstep topics``: create, describe, verify the topic catalog, or print it as manifests."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from lockstep.agents.app import run_async
from lockstep.cli.base import (
    LockstepGroup,
    bootstrap_option,
    check_cluster,
    kafka_overrides,
    settings_for,
)


@click.group(cls=LockstepGroup)
def topics() -> None:
    """Create, describe or verify the topic catalog."""


@topics.command("create")
@bootstrap_option
@click.pass_context
def topics_create(ctx: click.Context, bootstrap: str | None) -> None:
    """Create missing topics (idempotent), then verify partitions and co-partitioning."""
    from lockstep.cli.output import render_topics
    from lockstep.kafka.admin import admin_client, ensure_topics
    from lockstep.topics.catalog import catalog

    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    check_cluster(settings)

    async def main() -> str:
        admin = admin_client(settings.kafka.confluent_config())
        specs = catalog(settings.topics, settings.kafka.max_record_bytes)
        report = await asyncio.to_thread(ensure_topics, admin, specs)
        return render_topics(report.states, report.created)

    click.echo(run_async(main()))


@topics.command("manifest")
@click.option("--format", "fmt", type=click.Choice(["strimzi", "json"]), default="strimzi",
              show_default=True,
              help="strimzi: KafkaTopic resources as YAML; json: the same as a Kubernetes List.")
@click.option("--cluster", default="my-cluster", show_default=True,
              help="The Strimzi Kafka cluster the topics belong to (label strimzi.io/cluster).")
@click.option("--namespace", default=None,
              help="metadata.namespace of every resource (default: none, kubectl's).")
@click.option("--configmap", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Take the LOCKSTEP_* settings from this ConfigMap manifest, "
                                 "as its pods see them, instead of the environment.")
@click.pass_context
def topics_manifest(ctx: click.Context, fmt: str, cluster: str, namespace: str | None,
                    configmap: Path | None) -> None:
    """Print the topic catalog as Strimzi KafkaTopic resources, from the settings.

    Every topic (media, pipeline, every pool's requests.POOL, and the side topics
    deadletter, late and slo.events) with the partitions, replicas and retention of
    LOCKSTEP_TOPICS__*. Needs no cluster.
    """
    from lockstep.kafka.manifests import (
        catalog_of,
        configmap_environ,
        kafka_topics,
        render_json,
        strimzi_manifest,
    )

    environ = (configmap_environ(configmap.read_text(encoding="utf-8"), str(configmap))
               if configmap is not None else None)
    settings = settings_for(ctx, environ=environ)
    if fmt == "json":
        click.echo(render_json(kafka_topics(catalog_of(settings), cluster=cluster,
                                            namespace=namespace)), nl=False)
        return
    command = " ".join([
        "lockstep topics manifest --format strimzi",
        *([f"--configmap {configmap}"] if configmap is not None else []),
        *([f"--namespace {namespace}"] if namespace else []), f"--cluster {cluster}"])
    click.echo(strimzi_manifest(settings, cluster=cluster, namespace=namespace,
                                command=command), nl=False)


@topics.command("describe")
@bootstrap_option
@click.pass_context
def topics_describe(ctx: click.Context, bootstrap: str | None) -> None:
    """Show each topic of the catalog as the cluster has it; exit 1 on any mismatch."""
    from lockstep.cli.output import render_topics
    from lockstep.kafka.admin import admin_client, verify_topics
    from lockstep.topics.catalog import catalog

    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    check_cluster(settings)

    async def main() -> tuple[str, bool]:
        admin = admin_client(settings.kafka.confluent_config())
        specs = catalog(settings.topics, settings.kafka.max_record_bytes)
        states = await asyncio.to_thread(verify_topics, admin, specs, strict=False)
        return render_topics(states), all(not s.problems for s in states)

    text, ok = run_async(main())
    click.echo(text)
    sys.exit(0 if ok else 1)


@topics.command("verify")
@bootstrap_option
@click.pass_context
def topics_verify(ctx: click.Context, bootstrap: str | None) -> None:
    """Exit 0 if the cluster matches the catalog; otherwise print the problems and exit 1."""
    from lockstep.kafka.admin import admin_client, verify_topics
    from lockstep.topics.catalog import catalog

    settings = settings_for(ctx, kafka=kafka_overrides(bootstrap))
    check_cluster(settings)
    admin = admin_client(settings.kafka.confluent_config())
    specs = catalog(settings.topics, settings.kafka.max_record_bytes)
    states = verify_topics(admin, specs, strict=False)
    problems = [f"{s.spec.name}: {', '.join(s.problems)}" for s in states if s.problems]
    for line in problems:
        click.echo(line, err=True)
    sys.exit(1 if problems else 0)
