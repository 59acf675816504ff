"""The fleet store's schema and client (ClickHouse): the daemon exports windows, `deepctx fleet` queries."""
