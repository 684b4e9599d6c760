"""Runtime: the composition root that opens and closes the stores for a process role."""
