"""SearchService: hybrid BM25 + vector search over the spaces a caller may read."""
