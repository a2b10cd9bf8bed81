"""Keyword (BM25) chunk indexes: tantivy embedded, OpenSearch in production."""
