"""A server interceptor in front of every RPC: refuses connections the relay did not make, holds each
caller to its share of RPCs in progress (daemon/rpc_limits.py: RESOURCE_EXHAUSTED past it), and turns
undecodable request bytes into INVALID_ARGUMENT (grpcio's own answer would be INTERNAL)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from deepctx.daemon.auth import PEERS, PeerRegistry
from deepctx.daemon.rpc_limits import OverLimit, RpcLimits, Slot

log = logging.getLogger("deepctx.rpc")


class RpcGuard(grpc.ServerInterceptor):
    def __init__(self, registry: PeerRegistry = PEERS, limits: RpcLimits | None = None) -> None:
        self.registry = registry
        self.limits = limits
        self.refused = 0  # RPCs on connections the relay did not make
        self.malformed = 0  # requests that did not decode

    def _admit(self, context: grpc.ServicerContext) -> Slot:
        caller = self.registry.lookup(context.peer())
        if caller is None:
            self.refused += 1
            log.warning("rpc from an unknown connection refused", extra={"peer": context.peer()})
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          "unknown connection: deepctxd answers only on its public socket")
        if self.limits is None:
            return Slot(None, caller.uid)
        try:
            slot = self.limits.acquire(caller.uid)
        except OverLimit as e:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        if not context.add_callback(slot.release):  # released when the RPC ends, however it ends
            slot.release()
        return slot

    def _decode(self, decode: Callable[[bytes], Any] | None, raw: bytes, context: grpc.ServicerContext) -> Any:
        if decode is None:
            return raw
        try:
            return decode(raw)
        except Exception as e:
            self.malformed += 1
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {type(e).__name__}")

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
                          handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        decode = handler.request_deserializer
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            def unary_unary(raw: bytes, context: grpc.ServicerContext) -> Any:
                slot = self._admit(context)
                try:
                    return inner_uu(self._decode(decode, raw, context), context)
                finally:
                    slot.release()

            return grpc.unary_unary_rpc_method_handler(unary_unary, None, handler.response_serializer)
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            def unary_stream(raw: bytes, context: grpc.ServicerContext) -> Iterator[Any]:
                slot = self._admit(context)
                try:
                    yield from inner_us(self._decode(decode, raw, context), context)
                finally:
                    slot.release()

            return grpc.unary_stream_rpc_method_handler(unary_stream, None, handler.response_serializer)
        if handler.stream_unary is not None:
            inner_su = handler.stream_unary

            def stream_unary(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
                slot = self._admit(context)
                try:
                    return inner_su(requests, context)
                finally:
                    slot.release()

            return grpc.stream_unary_rpc_method_handler(stream_unary, decode, handler.response_serializer)
        inner_ss = handler.stream_stream

        def stream_stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            slot = self._admit(context)
            try:
                yield from inner_ss(requests, context)
            finally:
                slot.release()

        return grpc.stream_stream_rpc_method_handler(stream_stream, decode, handler.response_serializer)
