"""What a worker measures, in one room: each query's progress as Spark reports it (`progress`),
the lag of each source behind its system (`source_lag`), and the snapshot of both with the
stores' counters that `GET /metrics` formats (`snapshot`)."""
