"""The pure domain core: rules and arithmetic with no I/O, callable from tests without a server."""
