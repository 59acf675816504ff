"""Errors a request can end with, each mapped to one gRPC status code and a one-line message."""

from __future__ import annotations

import grpc


class RequestError(Exception):
    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(RequestError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(RequestError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyProfiled(RequestError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(RequestError):
    code = grpc.StatusCode.PERMISSION_DENIED


class FailedPrecondition(RequestError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(RequestError):
    code = grpc.StatusCode.UNAVAILABLE


class ResourceExhausted(RequestError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
