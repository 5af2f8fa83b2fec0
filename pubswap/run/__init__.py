"""Run infrastructure: checkpoints (per round and in-round), metrics on resume, object-store run_dirs,
the lease, time accounting, loggers and plots, fault-drill hooks. No algorithm lives here."""
