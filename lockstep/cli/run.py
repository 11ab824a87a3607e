"""``lockstep run``: agent roles against a Kafka cluster, until SIGINT or SIGTERM."""

from __future__ import annotations

import click

from lockstep.agents.allocator import reexec_with_system_allocator
from lockstep.agents.app import run_async
from lockstep.cli import base
from lockstep.cli.base import bootstrap_option, kafka_overrides, settings_for, until_signalled
from lockstep.errors import RoleCrashed


@click.command()
@bootstrap_option
@click.option("--roles", required=True, metavar="ROLES",
              help="Comma-separated roles: align, route, worker (or all); worker:POOL runs "
                   "the worker of one pool (worker:vl,worker:text for two).")
@click.option("--pool", default=None, metavar="POOL[,POOL]",
              help="Engine pool(s) of the worker role (default: LOCKSTEP_WORKER__POOL, or "
                   "every routed pool when route runs in the same process).")
@click.option("--create-topics/--no-create-topics", default=False, show_default=True,
              help="Create missing topics at start instead of only verifying them.")
@click.option("--metrics-port", default=None, type=click.IntRange(0, 65535),
              help="Port for /metrics (default: LOCKSTEP_METRICS__PORT, else the first "
                   "role's: align 9464, route 9465, worker 9466 + the pool's place in "
                   "topics.pools; 0: any free port).")
@click.option("--group", "group_prefix", default=None, metavar="PREFIX",
              help="Consumer group prefix (default: LOCKSTEP_APP_ID, lockstep): the groups "
                   "are PREFIX-align, PREFIX-route and PREFIX-worker-POOL.")
@click.pass_context
def run(ctx: click.Context, bootstrap: str | None, roles: str, pool: str | None,
        create_topics: bool, metrics_port: int | None, group_prefix: str | None) -> None:
    """Run agent roles against a Kafka cluster until SIGINT/SIGTERM.

    Each role has its own consumer group (lockstep-align, lockstep-route,
    lockstep-worker-POOL), whatever else runs in the process: processes running a role
    share its group and split its partitions, so start more of them to scale a role.
    Waits for the cluster if it is not up yet. Exits 1 if a role crashes (its
    unacknowledged records are then replayed by the next process of the group). A
    process running align first re-executes itself on glibc's allocator, so a flood of
    stream ids' memory goes back once they are evicted (align.system_allocator; an
    exported PYTHONMALLOC is kept).
    """
    from lockstep.agents.runner import (
        parse_roles,
        pools_in,
        prepare_topics,
        routed_pools,
        start_roles,
    )
    from lockstep.telemetry.metrics import Telemetry

    pools = list(dict.fromkeys(
        [*pools_in(roles), *(p.strip() for p in (pool or "").split(",") if p.strip())]))
    settings = settings_for(
        ctx, kafka=kafka_overrides(bootstrap), worker={"pool": pools[0]} if pools else {},
        metrics={"port": metrics_port} if metrics_port is not None else {},
        app_id=group_prefix)
    role_list = parse_roles(roles)
    settings.kafka.require_bootstrap()
    if "align" in role_list and settings.align.system_allocator:
        reexec_with_system_allocator(base.ENTRY_ARGV)  # returns at once once re-executed
    if not pools and "route" in role_list:
        pools = routed_pools(settings)  # a whole pipeline here

    async def main() -> None:
        telemetry = Telemetry(settings.slo.stage_p99_ms / 1000.0)
        if settings.metrics.enabled:
            host = settings.metrics.host
            port = settings.metrics.port_for(role_list, pools or [settings.worker.pool],
                                             settings.topics.pools)
            port = telemetry.serve(host, port)
            click.echo(f"metrics on http://{host}:{port}/metrics", err=True)
        # A role outlives broker restarts: it waits for the cluster, however long.
        await prepare_topics(settings, create=create_topics, wait_s=None)
        running = await start_roles(settings, role_list, telemetry, worker_pools=pools or None)
        click.echo(f"running {','.join(role_list)} in groups {', '.join(running.groups)}",
                   err=True)
        try:
            await until_signalled(running.wait_crashed)
        finally:
            await running.stop()
        if running.crash_reason is not None:
            raise RoleCrashed(f"roles {','.join(role_list)} crashed: {running.crash_reason!r}")

    run_async(main())
