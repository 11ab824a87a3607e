"""``python -m lockstep`` runs the CLI."""

from lockstep.cli import main

main()
