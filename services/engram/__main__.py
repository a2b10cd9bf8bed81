"""`python -m engram` is the `engram` command."""

from engram.cli.app import main

main()
