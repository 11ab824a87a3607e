"""``lockstep bench pipeline``: the deployment shape's capacity, costs, overload and soak.

One process per role (align, route, one worker per pool; reference engine) started by the
bench as ``lockstep run``, on Apache Kafka when a bootstrap is given and on the embedded
broker otherwise, fed by ``lockstep publish --synthetic`` producer processes. Modules:

- :mod:`.procs`: child processes and what ``/proc`` says about them (CPU, RSS);
- :mod:`.metrics`: the roles' ``/metrics`` scraped, diffed and turned into step figures;
- :mod:`.ramp`: the pure capacity search (which stream count to try next);
- :mod:`.cluster`: the broker, the topics and the role processes of one run;
- :mod:`.passthrough`: the raw consume→produce limit over the same hops;
- :mod:`.run`: the steps, half capacity, overload and soak;
- :mod:`.demo_shape`: the one-process demo's capacity;
- :mod:`.render`: the text and Markdown output.
"""
