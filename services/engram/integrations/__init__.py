"""Agent frameworks' memory interfaces over engram: thin adapters over `engram.client`.

- `engram.integrations.anthropic_memory.EngramMemoryTool`: Anthropic's memory tool
  (`memory_20250818`) on a space (extra `engram[anthropic]`).

Each module imports its framework's package; this package imports none.
"""
