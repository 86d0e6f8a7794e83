"""tinybox's own Python SDK, thin over ``tinybox serve``'s HTTP API
(docs/specs/http-api.yml), stdlib only. ``TINYBOX_API_URL`` and
``TINYBOX_API_TOKEN`` (``eval "$(tinybox serve env)"``) say where::

    from tinybox import Sandbox
    with Sandbox.create(memory="256M") as box:
        print(box.isolation, box.verified, box.limits)
        print(box.commands.run("echo hi").stdout)
"""

from ._http import Client
from .errors import (
    AuthenticationError,
    ConflictError,
    ConnectionFailedError,
    InvalidRequestError,
    NotFoundError,
    TinyboxError,
    UnsupportedError,
)
from .sandbox import CommandResult, CommandStream, EntryInfo, OutputChunk, Sandbox, Snapshot, WriteInfo

__all__ = [
    "AuthenticationError",
    "Client",
    "CommandResult",
    "CommandStream",
    "ConflictError",
    "ConnectionFailedError",
    "EntryInfo",
    "InvalidRequestError",
    "NotFoundError",
    "OutputChunk",
    "Sandbox",
    "Snapshot",
    "TinyboxError",
    "UnsupportedError",
    "WriteInfo",
]
