"""The composition root: the only place that chooses adapters and wires processes.

`engram dev` runs `embedded.embedded_engram` (every service, embedded backends);
`engram serve <service>` runs one of `production.PROCESSES`. Only the CLI, tests and
benchmarks import this package; nothing below it does (checked by import-linter).
"""
