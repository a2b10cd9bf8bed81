"""The client's results: frozen, slotted dataclasses, one module per family, with the
converters that build them from the wire's messages.

Making a dataclass costs the interpreter ~4 M instructions (it compiles `__init__`,
`__repr__`, `__eq__`, `__hash__` and the frozen setters of each class), so these modules
are imported where a call first builds one of their results, not with the client: `engram
ls` pays for a listing's two classes, not for the forty of every service
(tests/unit/test_client_lazy.py guards it; bench/cli_startup.py measures it). An import
runs under Python's import lock, so first use from several threads is safe.
"""
