"""``python -m lockstep`` runs the CLI."""

from lockstep.cli.main import main

main()
