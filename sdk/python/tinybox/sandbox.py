"""A box on a ``tinybox serve``, shaped after E2B's ``Sandbox``
(``Sandbox.create()``, ``box.commands.run()``, ``box.files.read()``,
``box.kill()``), with what confines it in plain sight: every box object
carries its ``isolation``, whether that was ``verified``, the ``limits``
and ``network`` in force, as the server reported them."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

from ._http import Client
from .errors import TinyboxError

Command = Union[str, Sequence[str]]
OnOutput = Callable[[bytes], None]


def _argv(cmd: Command) -> List[str]:
    # A string is a shell line, as E2B's commands.run takes it; a list is
    # the program and its arguments exactly, with no shell between.
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    argv = list(cmd)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise TinyboxError(f"command {cmd!r} is neither a shell line nor a non-empty list of strings")
    return argv


@dataclass
class CommandResult:
    """How a command ended and what it printed (bytes and text)."""

    exit_code: Optional[int]
    signal: Optional[int]
    timed_out: bool
    stdout_bytes: bytes
    stderr_bytes: bytes
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_dropped_bytes: int = 0
    stderr_dropped_bytes: int = 0

    @property
    def stdout(self) -> str:
        """stdout as UTF-8 text (undecodable bytes replaced; ``stdout_bytes`` has them)."""
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass
class OutputChunk:
    """A piece of a streamed command's output, as it came."""

    stream: str  # "stdout" or "stderr"
    data: bytes


class CommandStream:
    """A running command's output, iterated as it comes; ``result`` once it ended."""

    def __init__(self, lines: Iterator[Dict[str, Any]]):
        self._lines = lines
        self.result: Optional[CommandResult] = None
        self._out: List[bytes] = []
        self._err: List[bytes] = []

    def __iter__(self) -> Iterator[OutputChunk]:
        for line in self._lines:
            if "stdout" in line:
                data = base64.b64decode(line["stdout"])
                self._out.append(data)
                yield OutputChunk("stdout", data)
            elif "stderr" in line:
                data = base64.b64decode(line["stderr"])
                self._err.append(data)
                yield OutputChunk("stderr", data)
            elif "error" in line:
                err = line["error"]
                raise TinyboxError(err.get("message", ""), None, err.get("kind"))
            else:
                self.result = CommandResult(
                    exit_code=line.get("exit_code"),
                    signal=line.get("signal"),
                    timed_out=bool(line.get("timed_out")),
                    stdout_bytes=b"".join(self._out),
                    stderr_bytes=b"".join(self._err),
                )
        if self.result is None:
            raise TinyboxError("the command's stream ended without saying how the command ended")

    def wait(self) -> CommandResult:
        """Reads what is left and returns how the command ended."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result


class Commands:
    """``box.commands``: run a command, buffered or streamed."""

    def __init__(self, box: "Sandbox"):
        self._box = box

    def _body(self, cmd, envs, cwd, stdin, timeout) -> Dict[str, Any]:
        body: Dict[str, Any] = {"argv": _argv(cmd)}
        if envs:
            body["env"] = dict(envs)
        if cwd is not None:
            body["cwd"] = cwd
        if isinstance(stdin, str):
            body["stdin"] = stdin
        elif stdin is not None:
            body["stdin_base64"] = base64.b64encode(bytes(stdin)).decode()
        if timeout is not None:
            body["timeout_secs"] = timeout
        return body

    def run(
        self,
        cmd: Command,
        envs: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[OnOutput] = None,
        on_stderr: Optional[OnOutput] = None,
    ) -> CommandResult:
        """Runs ``cmd`` (a shell line, or an argv list) and returns when it ends.

        With ``on_stdout``/``on_stderr`` the output is streamed to them as it
        comes; otherwise each stream is kept up to the server's --max-output.
        A non-zero exit is a result, not an exception.
        """
        body = self._body(cmd, envs, cwd, stdin, timeout)
        if on_stdout is not None or on_stderr is not None:
            stream = CommandStream(self._box._client.lines(self._box._path("/exec/stream"), body))
            for chunk in stream:
                fn = on_stdout if chunk.stream == "stdout" else on_stderr
                if fn is not None:
                    fn(chunk.data)
            assert stream.result is not None
            return stream.result
        v = self._box._client.json("POST", self._box._path("/exec"), body)
        return CommandResult(
            exit_code=v.get("exit_code"),
            signal=v.get("signal"),
            timed_out=bool(v.get("timed_out")),
            stdout_bytes=base64.b64decode(v.get("stdout_base64", "")),
            stderr_bytes=base64.b64decode(v.get("stderr_base64", "")),
            stdout_truncated=bool(v.get("stdout_truncated")),
            stderr_truncated=bool(v.get("stderr_truncated")),
            stdout_dropped_bytes=int(v.get("stdout_dropped_bytes") or 0),
            stderr_dropped_bytes=int(v.get("stderr_dropped_bytes") or 0),
        )

    def stream(
        self,
        cmd: Command,
        envs: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
    ) -> CommandStream:
        """Starts ``cmd``; iterate the answer for its output as it comes."""
        body = self._body(cmd, envs, cwd, stdin, timeout)
        return CommandStream(self._box._client.lines(self._box._path("/exec/stream"), body))


@dataclass
class EntryInfo:
    """One entry of a listed directory."""

    name: str
    kind: str  # "file", "dir", "symlink" or "other"
    size: int
    mode: int
    mtime: int


@dataclass
class WriteInfo:
    path: str
    bytes: int


class Files:
    """``box.files``: read, write and list, binary-safe."""

    def __init__(self, box: "Sandbox"):
        self._box = box

    def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        """The file's content: text (UTF-8, strict) or, with ``format="bytes"``, its bytes."""
        data = self.read_bytes(path)
        if format == "bytes":
            return data
        if format != "text":
            raise TinyboxError(f"format {format!r} is neither \"text\" nor \"bytes\"")
        return data.decode("utf-8")

    def read_bytes(self, path: str) -> bytes:
        return self._box._client.bytes("GET", self._box._path("/files"), {"path": path})

    def write(self, path: str, data: Union[str, bytes], mode: Optional[int] = None) -> WriteInfo:
        """Creates or replaces ``path`` with ``data`` (text is written as UTF-8)."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        query = {"path": path}
        if mode is not None:
            query["mode"] = format(mode, "o")
        self._box._client.bytes("PUT", self._box._path("/files"), query, raw)
        return WriteInfo(path=path, bytes=len(raw))

    def list(self, path: str) -> List[EntryInfo]:
        entries = self._box._client.json("GET", self._box._path("/dir"), query={"path": path})
        return [EntryInfo(e["name"], e["kind"], e["size"], e["mode"], e["mtime"]) for e in entries]


@dataclass
class Snapshot:
    id: str
    taken_at: Optional[int] = None


@dataclass
class Sandbox:
    """A box this server made, with what confines it.

    ``isolation`` (none, process, kernel, hardware), ``verified`` (the
    sandbox's declaration passed the conformance kit),
    ``suitable_for_untrusted_code``, ``network`` and ``limits`` are what
    is in force, as the server says, not what was asked for.
    """

    id: str
    sandbox: Optional[str] = None
    host: Optional[str] = None
    isolation: Optional[str] = None
    verified: bool = False
    suitable_for_untrusted_code: bool = False
    network: Any = None
    limits: Dict[str, Any] = field(default_factory=dict)
    lifecycle: Any = None
    created_at: Optional[int] = None
    expires_at: Optional[int] = None
    workdir: Optional[str] = None
    state: Optional[str] = None
    warnings: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)
    _client: Client = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.commands = Commands(self)
        self.files = Files(self)

    @classmethod
    def _from(cls, client: Client, v: Dict[str, Any]) -> "Sandbox":
        return cls(
            id=v["id"],
            sandbox=v.get("sandbox"),
            host=v.get("host"),
            isolation=v.get("isolation"),
            verified=bool(v.get("verified")),
            suitable_for_untrusted_code=bool(v.get("suitable_for_untrusted_code")),
            network=v.get("network"),
            limits=v.get("limits") or {},
            lifecycle=v.get("lifecycle"),
            created_at=v.get("created_at"),
            expires_at=v.get("expires_at"),
            workdir=v.get("workdir"),
            state=v.get("state"),
            warnings=list(v.get("warnings") or []),
            raw=v,
            _client=client,
        )

    def _path(self, tail: str = "") -> str:
        return f"/v1/boxes/{self.id}{tail}"

    @classmethod
    def create(
        cls,
        ttl_secs: Optional[int] = None,
        memory: Union[int, str, None] = None,
        pids: Optional[int] = None,
        cpus: Optional[float] = None,
        network: Optional[str] = None,
        image: Optional[str] = None,
        client: Optional[Client] = None,
        api_url: Optional[str] = None,
        token: Optional[str] = None,
    ) -> "Sandbox":
        """Makes a box under the operator's ceiling (what is unset is the
        ceiling's; asking over it is refused, never cut)."""
        client = client or Client(api_url, token)
        ask = {"ttl_secs": ttl_secs, "memory": memory, "pids": pids, "cpus": cpus, "network": network, "image": image}
        v = client.json("POST", "/v1/boxes", {k: x for k, x in ask.items() if x is not None})
        return cls._from(client, v)

    @classmethod
    def connect(
        cls, box_id: str, client: Optional[Client] = None, api_url: Optional[str] = None, token: Optional[str] = None
    ) -> "Sandbox":
        """The box ``box_id`` of this server, inspected now."""
        client = client or Client(api_url, token)
        return cls._from(client, client.json("GET", f"/v1/boxes/{box_id}"))

    @classmethod
    def list(
        cls, client: Optional[Client] = None, api_url: Optional[str] = None, token: Optional[str] = None
    ) -> List["Sandbox"]:
        """The boxes this server made."""
        client = client or Client(api_url, token)
        return [cls._from(client, v) for v in client.json("GET", "/v1/boxes")]

    def refresh(self) -> "Sandbox":
        """Reads the box again (its ``state`` now)."""
        fresh = Sandbox._from(self._client, self._client.json("GET", self._path()))
        for name in ("sandbox", "host", "isolation", "verified", "suitable_for_untrusted_code", "network",
                     "limits", "lifecycle", "created_at", "expires_at", "workdir", "state", "raw"):
            setattr(self, name, getattr(fresh, name))
        return self

    def exec(self, argv: Sequence[str], **kw: Any) -> CommandResult:
        """Runs ``argv`` as given (no shell); ``commands.run`` with a list."""
        return self.commands.run(list(argv), **kw)

    def snapshot(self) -> Snapshot:
        """Snapshots the box, where its sandbox declared snapshots
        (elsewhere: :class:`UnsupportedError` with core's refusal)."""
        v = self._client.json("POST", self._path("/snapshots"))
        return Snapshot(id=v["id"], taken_at=v.get("taken_at"))

    def kill(self) -> None:
        """Removes the box and everything in it."""
        self._client.json("DELETE", self._path())

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()
