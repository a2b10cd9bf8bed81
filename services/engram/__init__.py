"""Engram: multi-tenant memory and knowledge spaces for AI agents, served over gRPC."""

__version__ = "0.1.0"
