"""The `engram` command line: servers and client commands."""
