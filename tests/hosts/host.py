"""A foreign host for the tinybox TinyBus module, in Python with ctypes.

    python3 host.py LIB STORE WORKDIR SANDBOX [SANDBOX...]

Loads the built library, checks the ABI and the manifest, runs a box end to
end on each sandbox named (create, exec with an awkward argument vector,
stdin, binary output, streaming, inspect, ls, rm), feeds it bad input, and
prints "PASS <what>" per check and "RESULT<TAB>tag<TAB>json" per interesting
result for tests/tests/module_python_host.rs. Any failed check raises, so
the interpreter exits non-zero with the traceback on stderr.
"""

import base64
import ctypes
import json
import os
import sys


class Module:
    def __init__(self, path):
        lib = ctypes.CDLL(path)
        lib.tinybox_abi_version.restype = ctypes.c_uint32
        lib.tinybox_abi_version.argtypes = []
        # Returned strings are kept as raw pointers so they can be freed.
        lib.tinybox_manifest.restype = ctypes.c_void_p
        lib.tinybox_manifest.argtypes = []
        lib.tinybox_call.restype = ctypes.c_void_p
        lib.tinybox_call.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        lib.tinybox_free.restype = None
        lib.tinybox_free.argtypes = [ctypes.c_void_p]
        self.lib = lib

    def _take(self, ptr):
        assert ptr, "the library returned NULL"
        try:
            return ctypes.string_at(ptr).decode("utf-8")
        finally:
            self.lib.tinybox_free(ptr)

    def manifest(self):
        return json.loads(self._take(self.lib.tinybox_manifest()))

    def raw(self, method, params):
        """method and params as bytes (or None for NULL); the decoded reply."""
        return json.loads(self._take(self.lib.tinybox_call(method, params)))

    def call(self, method, **params):
        return self.raw(method.encode(), json.dumps(params).encode())

    def ok(self, method, **params):
        reply = self.call(method, **params)
        assert "ok" in reply, f"{method} {params}: {reply}"
        return reply["ok"]


def check(what, cond, detail=""):
    if not cond:
        raise AssertionError(f"{what}: {detail}")
    print(f"PASS {what}", flush=True)


def result(tag, value):
    print(f"RESULT\t{tag}\t{json.dumps(value)}", flush=True)


def output(r, stream):
    """A stream's bytes, whichever way the library encoded them."""
    if stream in r:
        return r[stream].encode()
    return base64.b64decode(r.get(stream + "_base64", ""))


def end_to_end(m, store, workdir, sandbox):
    created = m.ok("create", store=store, sandbox=sandbox, workspace=workdir)
    box = created["id"]
    check(f"{sandbox}: create", created["workspace"]["placement"]["sandbox"] == sandbox, created)
    result(f"{sandbox}.create", created)

    argv = ["sh", "-c", 'printf "[%s]" "$@"; echo; echo to-stderr >&2; exit 3', "sh",
            "a b", "it's", 'say "hi"', "$HOME", "*", "", "tab\there", "ünïcødé"]
    r = m.ok("exec", store=store, id=box, argv=argv)
    result(f"{sandbox}.exec", r)
    want = "[a b][it's][say \"hi\"][$HOME][*][][tab\there][ünïcødé]\n"
    check(f"{sandbox}: argv arrives as given", r["stdout"] == want, r)
    check(f"{sandbox}: stderr captured", r["stderr"] == "to-stderr\n", r)
    check(f"{sandbox}: exit code", r["exit_code"] == 3 and r["status"] == {"code": 3, "signal": None}, r)

    r = m.ok("exec", store=store, id=box, argv=["cat"], stdin="line one\nline two\n")
    check(f"{sandbox}: stdin as text", r["stdout"] == "line one\nline two\n", r)
    blob = bytes(range(256))
    r = m.ok("exec", store=store, id=box, argv=["cat"], stdin_base64=base64.b64encode(blob).decode())
    check(f"{sandbox}: binary stdin and stdout round-trip", output(r, "stdout") == blob and "stdout" not in r, r)

    r = m.ok("exec", store=store, id=box, argv=["sh", "-c", "echo $FROM_CALL"], env={"FROM_CALL": "yes"})
    check(f"{sandbox}: command env", r["stdout"] == "yes\n", r)

    r = m.ok("exec", store=store, id=box, argv=["sleep", "30"], timeout_secs=0.5)
    check(f"{sandbox}: timeout stops the command", r["timed_out"] and r["exit_code"] == 124, r)

    # Streaming: the first line is read while the command still runs. The
    # command waits for a file this host makes only after reading that line,
    # so output delivered only at the end would never let it finish.
    flag = f"go-{sandbox}"
    h = m.ok("exec.start", store=store, id=box, timeout_secs=60,
             argv=["sh", "-c", 'echo first; while [ ! -e "$1" ]; do sleep 0.05; done; read x; echo second $x', "sh",
                   flag], stdin="go\n")["exec"]
    got = b""
    while b"first\n" not in got:
        piece = m.ok("exec.read", exec=h, wait_ms=30000)
        assert not piece["done"], f"the command ended before its first line was read: {piece}"
        got += output(piece, "stdout")
    check(f"{sandbox}: output streams while the command runs", got == b"first\n", got)
    open(os.path.join(workdir, flag), "w").close()
    while True:
        piece = m.ok("exec.read", exec=h, wait_ms=30000)
        got += output(piece, "stdout")
        if piece["done"] and piece["stdout_eof"] and piece["stderr_eof"]:
            break
    end = m.ok("exec.wait", exec=h)
    check(f"{sandbox}: streamed output", got == b"first\nsecond go\n" and end["exit_code"] == 0, (got, end))
    # Cancelled once it has started (its first line read), as a host would
    # stop a command it watches.
    h = m.ok("exec.start", store=store, id=box, argv=["sh", "-c", "echo started; exec sleep 30"])["exec"]
    got = b""
    while b"started\n" not in got:
        piece = m.ok("exec.read", exec=h, wait_ms=30000)
        assert not piece["done"], piece
        got += output(piece, "stdout")
    m.ok("exec.cancel", exec=h)
    end = m.ok("exec.wait", exec=h)
    check(f"{sandbox}: a cancelled exec ends", end["cancelled"] and end["exit_code"] == 130, end)

    view = m.ok("inspect", store=store, id=box)
    result(f"{sandbox}.inspect", view)
    check(f"{sandbox}: inspect", view["id"] == box and "state" in view, view)
    listed = m.ok("ls", store=store)
    check(f"{sandbox}: ls", [b["id"] for b in listed] == [box], listed)
    gone = m.ok("rm", store=store, id=box)
    check(f"{sandbox}: rm", gone == {"removed": [box], "failed": []}, gone)
    check(f"{sandbox}: ls after rm", m.ok("ls", store=store) == [])


def bad_input(m, store):
    cases = [
        ("NULL method", None, b"{}", "invalid_argument"),
        ("NULL params", b"ls", None, "invalid_argument"),
        ("invalid UTF-8 method", b"l\xffs", b"{}", "invalid_argument"),
        ("invalid UTF-8 params", b"ls", b'{"store": "\xc3\x28"}', "invalid_argument"),
        ("bad JSON", b"ls", b"{not json", "invalid_argument"),
        ("params not an object", b"ls", b'"ls"', "invalid_argument"),
        ("unknown method", b"launch_missiles", b"{}", "unknown_method"),
        ("invalid box name", b"inspect", json.dumps({"store": store, "id": "a b"}).encode(), "invalid_argument"),
        ("invalid sandbox name", b"create", json.dumps({"store": store, "sandbox": ".."}).encode(),
         "invalid_argument"),
        ("zero pids", b"create", json.dumps({"store": store, "sandbox": "passthrough", "pids": 0}).encode(),
         "invalid_argument"),
        ("zero memory", b"create", json.dumps({"store": store, "sandbox": "passthrough", "memory": "0"}).encode(),
         "invalid_argument"),
        ("zero ttl", b"create", json.dumps({"store": store, "sandbox": "passthrough", "ttl_secs": 0}).encode(),
         "invalid_argument"),
        ("misspelt field", b"create", json.dumps({"store": store, "sandbox": "passthrough", "cpu": 1}).encode(),
         "invalid_argument"),
        ("limit passthrough cannot apply", b"create",
         json.dumps({"store": store, "sandbox": "passthrough", "pids": 10}).encode(), "unsupported"),
        ("no such box", b"rm", json.dumps({"store": store, "id": "box-404"}).encode(), None),
    ]
    for what, method, params, code in cases:
        reply = m.raw(method, params)
        result(f"bad.{what}", reply)
        if code is None:
            # rm reports per box, as `tinybox rm --json` does.
            check(what, reply["ok"]["removed"] == [] and reply["ok"]["failed"][0]["id"] == "box-404", reply)
        else:
            check(what, reply.get("error", {}).get("code") == code and reply["error"]["message"], reply)
    check("bad input left no box", m.ok("ls", store=store) == [])


def main():
    lib, store, workdir, sandboxes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    m = Module(lib)
    check("ABI version is 1", m.lib.tinybox_abi_version() == 1)
    manifest = m.manifest()
    result("manifest", manifest)
    check("manifest", manifest["name"] == "tinybox" and manifest["abi_version"] == "1"
          and manifest["untrusted_code"] == "out_of_process", manifest)
    m.lib.tinybox_free(None)
    check("tinybox_free(NULL) is a no-op", True)
    for sandbox in sandboxes:
        end_to_end(m, store, workdir, sandbox)
    bad_input(m, store)
    print("ALL PASSED", flush=True)


if __name__ == "__main__":
    main()
