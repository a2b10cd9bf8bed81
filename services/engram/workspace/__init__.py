"""WorkspaceService: the memory tools agent runtimes call (ARCHITECTURE §5), over storage and
search in this process (`engram dev`) or over gRPC (`engram serve workspace`)."""
