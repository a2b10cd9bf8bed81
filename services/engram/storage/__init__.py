"""StorageService: Markdown documents in spaces, with versions, quotas and events."""
