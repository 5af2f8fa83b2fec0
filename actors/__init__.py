"""Ray actors: ClientActor (rollout engine + trainer) and ServerActor (public pool, swap, global adapter)."""
