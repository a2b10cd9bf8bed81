"""Agent frameworks' memory interfaces over engram: thin adapters over `engram.client`.

- `engram.integrations.anthropic_memory.EngramMemoryTool`: Anthropic's memory tool
  (`memory_20250818`) on a space (extra `engram[anthropic]`).
- `engram.integrations.langgraph_store.EngramStore`: LangGraph's long-term `BaseStore` on a
  space, search on engram's hybrid search (extra `engram[langgraph]`).

Each module imports its framework's package; this package imports none.
"""
