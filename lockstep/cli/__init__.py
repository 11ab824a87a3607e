"""The ``lockstep`` command line: one module per command (:mod:`lockstep.cli.main` is the group)."""
