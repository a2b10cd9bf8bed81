"""The indexes: their ports, the engines behind them (tantivy and OpenSearch for keywords;
the embedded vector index and Qdrant for vectors) and the index-progress store. The indexer
writes them and search reads them; both import them from here."""
