"""What deepctxd runs around the Profiler service: the relay on the public socket and the RPC guard
(caller identity), the fleet exporter fed by the window store, and the /metrics listener."""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc

from deepctx.daemon.config import Config
from deepctx.daemon.fleet.exporter import FleetExporter, sinks_from
from deepctx.daemon.metrics import DaemonSnapshot, MetricsServer, ProcessTotals, window_listener
from deepctx.daemon.relay import Relay
from deepctx.daemon.rpc_guard import RpcGuard
from deepctx.daemon.store import WindowStore

log = logging.getLogger("deepctx.server")


class ServiceParts:
    def __init__(self, config: Config, store: WindowStore | None, processes: ProcessTotals,
                 totals: Callable[[], dict[str, int]], attached: Callable[[], int]) -> None:
        self.config = config
        self.store = store
        self.processes = processes
        self._totals = totals
        self._attached = attached
        self.relay = Relay(config.socket, config.socket_mode, max_connections=config.max_connections,
                           max_per_user=config.max_connections_per_user)
        self.guard = RpcGuard()
        sinks = sinks_from(config.clickhouse_url, config.clickhouse_database, config.pyroscope_url,
                           config.pyroscope_app)
        self.fleet = FleetExporter(sinks, config.fleet_queue_windows) if sinks else None
        self.metrics = MetricsServer(config.metrics_address, processes, self.snapshot) if config.metrics_address else None
        if store is not None:
            store.add_listener(window_listener(processes))
            if self.fleet is not None:
                store.add_listener(self.fleet.on_window)

    @property
    def interceptors(self) -> list[grpc.ServerInterceptor]:
        return [self.guard]

    def prepare(self) -> str:
        """Before the gRPC server binds: the private directory; returns the address it listens on."""
        return self.relay.prepare()

    def start(self) -> None:
        """After the gRPC server started: the public socket, the exporter, the metrics listener."""
        self.relay.start()
        if self.fleet is not None:
            self.fleet.start()
        if self.metrics is not None:
            self.metrics.start()
            log.info("metrics served", extra={"address": self.config.metrics_address})

    def stop_accepting(self) -> None:
        """Before the gRPC server stops: no new clients; running captures still reach theirs."""
        self.relay.stop_accepting()

    def stop(self) -> None:
        """After the gRPC server stopped."""
        self.relay.stop()
        if self.metrics is not None:
            self.metrics.stop()
        if self.fleet is not None:
            self.fleet.stop()
        if self.store is not None:
            self.store.close()

    def snapshot(self) -> DaemonSnapshot:
        counters = {"relay_accepted": self.relay.counters.accepted, "relay_refused": self.relay.counters.refused,
                    "relay_failed": self.relay.counters.failed, "rpc_unknown_peer": self.guard.refused,
                    "rpc_malformed": self.guard.malformed}
        if self.fleet is not None:
            counters.update(self.fleet.counters.as_dict())
        return DaemonSnapshot(attached_targets=self._attached(), totals=dict(self._totals()),
                              store=self.store.stats() if self.store is not None else None,
                              connections=self.relay.active(), counters=counters)
