"""AuthzService and the enforcement library every service uses at its boundary."""
