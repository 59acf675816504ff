"""Fleet export: stored windows to ClickHouse (call paths with metrics) and Pyroscope (pprof)."""
