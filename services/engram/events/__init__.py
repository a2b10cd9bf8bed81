"""Document events: the outbox, its relay, and the publishers it feeds."""
