"""The name under which the daemon's Status totals carry the host cache's counters (host/file_cache.py).

A module of its own so that `deepctx status` reads them without importing the cache, which pulls in the ELF
reader and numpy: a tenth of a second of CPU at every start of the CLI, whatever its command."""

from __future__ import annotations

# the daemon's Status totals carry file_cache.stats() under this prefix (host_cache_hits ...; deepctx status)
STATUS_PREFIX = "host_cache_"
