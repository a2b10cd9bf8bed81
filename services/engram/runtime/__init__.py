"""Shared runtime: settings, server bootstrap, interceptors, error mapping, logging, metrics."""
