"""What a refusal looks like to a caller: an exception carrying the
server's status, its error kind and its one line (``tinybox: ...``)."""

from __future__ import annotations

from typing import Optional


class TinyboxError(Exception):
    """The server refused or failed a request.

    ``status`` is the HTTP status (``None`` when the server was never
    reached), ``kind`` the server's error word (``invalid``,
    ``unsupported``, ``box_not_found``, ...), ``message`` its line.
    """

    def __init__(self, message: str, status: Optional[int] = None, kind: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind

    def __str__(self) -> str:
        if self.status is None:
            return self.message
        return f"{self.message} (HTTP {self.status}, {self.kind})"


class AuthenticationError(TinyboxError):
    """401: no token, or not this server's (``tinybox serve env`` prints it)."""


class InvalidRequestError(TinyboxError):
    """400: a value broke a rule (over the operator's ceiling, a bad body)."""


class NotFoundError(TinyboxError):
    """404: no such box made by this server, or no such file in it."""


class UnsupportedError(TinyboxError):
    """422: the box's sandbox did not declare what was asked (a snapshot)."""


class ConflictError(TinyboxError):
    """409: the box is not ready for that yet."""


class ConnectionFailedError(TinyboxError):
    """The server could not be reached, or broke off its answer."""


_BY_STATUS = {
    400: InvalidRequestError,
    401: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    422: UnsupportedError,
}


def refusal(status: int, kind: Optional[str], message: str) -> TinyboxError:
    """The exception for a refusal the server answered with."""
    return _BY_STATUS.get(status, TinyboxError)(message, status, kind)
