"""Plumbing shared by the adapters of one backend (connections, error mapping)."""
