"""The indexer: chunks and embeds documents into the keyword and vector indexes."""
