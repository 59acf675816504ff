"""The window store: per-process profiles of continuous mode, kept per time window on disk."""

from deepctx.daemon.store.sqlite import StoreLimits, StoreStats, WindowStore
from deepctx.daemon.store.window import container_of, window_for
from deepctx.profiles.window import Window

__all__ = ["StoreLimits", "StoreStats", "Window", "WindowStore", "container_of", "window_for"]
