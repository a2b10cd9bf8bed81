"""The maintenance worker: scheduled and on-demand jobs per space (dreaming, hygiene),
leases so that each job runs once per period across replicas, and the record of runs."""
