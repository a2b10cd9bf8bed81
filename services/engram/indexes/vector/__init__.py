"""Vector indexes: the embedded NumpyVectorIndex and QdrantVectorIndex for production."""
