"""Drives a tinybox server with the official e2b SDK, as any E2B user
would: settings from E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY only.
Prints one JSON object of what it saw, waits for a line on stdin (the
test checks the box from outside meanwhile), kills the sandbox, prints
"killed". The test (tests/tests/e2b_sdk.rs) asserts on what it printed."""

import asyncio
import json
import sys

from e2b import AsyncSandbox, Sandbox, SandboxQuery, TimeoutException
from e2b.sandbox.commands.command_handle import CommandExitException, PtySize


def caught(f):
    try:
        f()
        return None
    except Exception as e:  # the refusal's words are what the test checks
        return f"{type(e).__name__}: {e}"


seen = {}
sbx = Sandbox.create(template="base", metadata={"owner": "e2b-test"}, envs={"GREETING": "hello"}, timeout=120)
seen["id"] = sbx.sandbox_id

r = sbx.commands.run("echo hi")
seen["echo"] = [r.stdout, r.stderr, r.exit_code]
r = sbx.commands.run('echo "$GREETING"; python3 -c "print(6*7)"; echo oops >&2')
seen["env_python"] = [r.stdout, r.stderr, r.exit_code]
try:
    sbx.commands.run("echo before; exit 3")
    seen["exit3"] = None
except CommandExitException as e:
    seen["exit3"] = [e.exit_code, e.stdout]
r = sbx.commands.run("pwd", cwd="/tmp")
seen["cwd"] = r.stdout

sbx.files.write("/tmp/e2b/dir/hello.txt", "hello file")
seen["read"] = sbx.files.read("/tmp/e2b/dir/hello.txt")
blob = bytes(range(256)) * 4
sbx.files.write("/tmp/blob.bin", blob)
seen["bytes_roundtrip"] = bytes(sbx.files.read("/tmp/blob.bin", format="bytes")) == blob
seen["list"] = sorted(e.name for e in sbx.files.list("/tmp/e2b/dir"))
seen["exists"] = [sbx.files.exists("/tmp/e2b/dir/hello.txt"), sbx.files.exists("/tmp/e2b/none")]
seen["make_dir"] = [sbx.files.make_dir("/tmp/made"), sbx.files.make_dir("/tmp/made")]
moved = sbx.files.rename("/tmp/blob.bin", "/tmp/made/blob.bin")
seen["renamed"] = moved.path
sbx.files.remove("/tmp/made")
seen["removed"] = sbx.files.exists("/tmp/made")
sbx.files.write("/tmp/gz.txt", "sent gzipped", gzip=True)
seen["gzip_read"] = sbx.files.read("/tmp/gz.txt")
seen["read_missing"] = caught(lambda: sbx.files.read("/tmp/e2b/none"))

bg = sbx.commands.run("sleep 60", background=True)
seen["listed_pid"] = bg.pid in [p.pid for p in sbx.commands.list()]
seen["killed_bg"] = bg.kill()
try:
    bg.wait()
    seen["bg_end"] = None
except CommandExitException as e:
    seen["bg_end"] = [e.exit_code, e.error]
seen["after_kill"] = bg.pid in [p.pid for p in sbx.commands.list()]

terminal = sbx.pty.create(PtySize(rows=24, cols=80), timeout=60)
sbx.pty.send_stdin(terminal.pid, b"echo pty-$((6*7)); [ -t 0 ] && echo on-a-tty; exit\n")
typed = []
ended = terminal.wait(on_pty=lambda d: typed.append(d))
text = b"".join(typed).decode(errors="replace")
seen["pty"] = [ended.exit_code, "pty-42" in text, "on-a-tty" in text]

info = sbx.get_info()
seen["metadata"] = info.metadata
seen["state"] = str(info.state.value)
seen["listed"] = [s.sandbox_id for s in Sandbox.list().next_items()]
mine = Sandbox.list(query=SandboxQuery(metadata={"owner": "e2b-test"})).next_items()
others = Sandbox.list(query=SandboxQuery(metadata={"owner": "someone else"})).next_items()
seen["filtered"] = [[s.sandbox_id for s in mine], [s.sandbox_id for s in others]]
sbx.set_timeout(90)
seen["pause"] = caught(lambda: sbx.pause())
seen["over_ceiling"] = caught(lambda: Sandbox.create(timeout=10 ** 6))
seen["running"] = sbx.is_running()


async def async_session():
    a = await AsyncSandbox.create()
    r = await a.commands.run("echo async")
    await a.files.write("/tmp/a.txt", "async file")
    text = await a.files.read("/tmp/a.txt")
    await a.kill()
    return [r.stdout, text]


seen["async"] = asyncio.run(async_session())

print(json.dumps(seen), flush=True)
sys.stdin.readline()
running = sbx.commands.run("sleep 60", background=True)
sbx.kill()
try:
    running.wait()
    during = None
except TimeoutException as e:
    during = str(e)
seen_after = [s.sandbox_id for s in Sandbox.list().next_items()]
print(json.dumps({"killed": True, "listed_after": seen_after, "running_when_killed": during}), flush=True)
