"""Writes docs/benchmarks.md from the JSON that contrib/bench/run produced."""
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone

out = sys.argv[1]


def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)


def median_ms(result):
    return result["median"] * 1000


def cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


exec_r = load("exec.json")["results"]
stream_r = load("stream.json")["results"]
rt = load("roundtrip.json")
load_path = os.path.join(out, "exec-load.txt")
load_line = ("load average " + " then ".join(l.split("load average: ")[1].split(",")[0] for l in open(load_path)
             if "load average: " in l) + " at its start and end") if os.path.exists(load_path) else "load not recorded"
gib = 1024 ** 3

direct, tinybox_exec, through_daemon = exec_r[0], exec_r[1], exec_r[2]
raw, through = stream_r[0], stream_r[1]
raw_tp = gib / raw["median"] / 1e9
thr_tp = gib / through["median"] / 1e9

def stream_rows():
    """Rows for the destinations after the headline pair, each ratio against its raw pipe."""
    rows = ""
    rest = stream_r[2:]
    for raw_dest, tb_dest in zip(rest[0::2], rest[1::2]):
        where = raw_dest["command"].split(", ", 1)[1]
        ratio = raw_dest["median"] / tb_dest["median"]
        for r, name, shown in ((raw_dest, "cat", "1.00×"), (tb_dest, "tinybox exec BOX -- cat", f"{ratio:.2f}×")):
            rows += (f"| `head -c 1G /dev/zero \\| {name}`, {where} | {r['median']:.3f} s | "
                     f"{gib / r['median'] / 1e9:.2f} GB/s | {shown} |\n")
    return rows


print(f"""# Benchmarks

Measured by `contrib/bench/run` (hyperfine for whole commands, criterion for
the in-process protocol call), every tinybox number side by side with the raw
tool in the same run. Machines here are shared and noisy: compare the ratios,
not absolute times across runs.

- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}
- machine: {os.cpu_count()} cores, {cpu()}, Linux {platform.release()}
- tinybox: {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()} (release build)
- reproduce: `contrib/bench/run`

![Every ratio of this run](benchmarks.png)

## Exec overhead (local host, passthrough sandbox)

| command | median | ratio |
|---|---|---|
| `true` directly | {median_ms(direct):.2f} ms | 1.0× |
| `tinybox exec BOX -- true` | {median_ms(tinybox_exec):.2f} ms | {tinybox_exec['median'] / direct['median']:.1f}× |
| `tinybox exec BOX -- true`, through `tinybox daemon` | {median_ms(through_daemon):.2f} ms | {through_daemon['median'] / direct['median']:.1f}× |

Overhead per exec: **{median_ms(tinybox_exec) - median_ms(direct):.1f} ms** direct,
**{median_ms(through_daemon) - median_ms(direct):.1f} ms** through the daemon (target: +2 ms).
Each `tinybox exec` is a fresh process: it starts the CLI, reads the
store, and either starts `tinybox-driver-local` and handshakes (direct) or
hands its three descriptors to the daemon, whose driver session is warm;
then the descriptors reach the driver, the command runs, the status comes
back. The rows of this section and "Namespace sandbox" are one run,
`contrib/bench/exec OUT_DIR` ({load_line}), interleaved in rounds.

## Streaming 1 GiB through `exec cat`

| pipeline | median | throughput | ratio |
|---|---|---|---|
| `head -c 1G /dev/zero \\| cat` | {raw['median']:.3f} s | {raw_tp:.2f} GB/s | 1.00× |
| `head -c 1G /dev/zero \\| tinybox exec BOX -- cat` | {through['median']:.3f} s | {thr_tp:.2f} GB/s | {thr_tp / raw_tp:.2f}× |
{stream_rows()}
Target: ≥ 0.8× raw throughput. This section alone: `contrib/bench/stream
OUT_DIR` (after `cargo build --release --workspace --bins`). A pipe, a
socket or /dev/null is handed to the command as it is, so those bytes
never pass through tinybox; what remains is the fixed exec overhead
above. A file (or a terminal) is not: the command writes into a pipe that
the CLI moves into it (splice through a relay pipe, so the command's pipe
is never held while the file is written: one copy; read and write into an
append-mode file, which splice refuses; ADR 0007).

## Protocol round trip

| call | median |
|---|---|
| one small call (`cancel`) between two peers over an in-memory pipe | {rt['median']['point_estimate'] / 1000:.1f} µs |

This is the JSON-RPC cost alone (serialize, frame, dispatch, correlate) with
jsonrpsee on both ends; a real driver adds a pipe write and read each way.
""")

# Docker: tinybox next to the raw docker commands it wraps, same run.
if os.path.exists(os.path.join(out, "docker-exec.json")):
    raw_exec, tb_exec = load("docker-exec.json")["results"]
    raw_create, tb_create = load("docker-create.json")["results"]
    run_rows = ""
    if os.path.exists(os.path.join(out, "docker-run.json")):
        raw_run, tb_run = load("docker-run.json")["results"]
        run_rows = f"""| `docker run --rm ... true` | {median_ms(raw_run):.1f} ms | 1.00× |
| `tinybox run --sandbox docker -- true` | {median_ms(tb_run):.1f} ms | {tb_run['median'] / raw_run['median']:.2f}× |
"""
    print(f"""## Docker (local host, docker sandbox)

Same image (busybox), same keepalive (`sh -c 'while :; do sleep 86400; done'`),
and the raw `docker run` is given the flags tinybox passes for a box with
the default limits and network. Target: at most 1.1× raw for each.

| command | median | ratio |
|---|---|---|
| `docker exec C true` | {median_ms(raw_exec):.1f} ms | 1.00× |
| `tinybox exec BOX -- true` | {median_ms(tb_exec):.1f} ms | {tb_exec['median'] / raw_exec['median']:.2f}× |
| `docker run -d ... sh -c KEEPALIVE` | {median_ms(raw_create):.1f} ms | 1.00× |
| `tinybox create --sandbox docker` | {median_ms(tb_create):.1f} ms | {tb_create['median'] / raw_create['median']:.2f}× |
{run_rows}
One `docker exec` per `tinybox exec`, with the caller's descriptors passed
through; the command runs under a small `sh` that records its process group
so a cancellation can reach it inside the container. `tinybox create` is
one `docker run -d` plus the CLI, the store and two driver handshakes.
`tinybox run` is one `docker run --rm -i --init` with the box's flags and
the caller's descriptors (`sandbox.run_once`, ADR 0022), plus the CLI, the
store and two driver handshakes; the raw row is `docker run --rm` with the
same security, network and limit flags.
""")
else:
    print("""## Docker

Skipped: no docker daemon answered when the benchmarks ran
(`contrib/setup/start-dockerd` starts one as root).
""")

# Namespace: tinybox next to the same bwrap command line, same run.
if os.path.exists(os.path.join(out, "namespace-exec.json")):
    raw_ns, tb_ns, tb_ns_daemon, sh_start = load("namespace-exec.json")["results"]
    shell = median_ms(sh_start) - median_ms(direct)
    bare = median_ms(raw_ns) - shell
    print(f"""
## Namespace sandbox (bwrap)

| command | median | over raw bwrap |
|---|---|---|
| `bwrap <the box's flags> true`, from a shell that opens fd 3 | {median_ms(raw_ns):.2f} ms | (1.00×) |
| that shell alone (`exec /usr/bin/true`), less `true` | {shell:.2f} ms | |
| so bwrap itself | {bare:.2f} ms | 1.00× |
| `tinybox exec BOX -- true` (local/namespace) | {median_ms(tb_ns):.2f} ms | **{median_ms(tb_ns) - bare:+.1f} ms** |
| `tinybox exec BOX -- true`, through `tinybox daemon` | {median_ms(tb_ns_daemon):.2f} ms | **{median_ms(tb_ns_daemon) - bare:+.1f} ms** |

Target: +3 ms over raw bwrap, through the daemon. The box is a root
caller's, so it has the default limits (a cgroup per controller, v1 here),
and the raw command line is the driver's own (`--print-bwrap-args`, given
the box's cgroup directories): both sides run the same bwrap, binds of the
box's cgroups included. bwrap reads its seccomp program from descriptor 3,
which takes a shell to open, so the raw row runs under one and the row
below it says what that shell costs. Direct, the CLI starts and handshakes
two drivers (local host and namespace sandbox) in parallel; through the
daemon both are warm. Either way one more hop (the namespace driver's
reverse `host.run`) and one shell on the host: it enters the box's
cgroups, opens the seccomp program (a file of the driver's) on fd 3 and
execs bwrap, as the raw row's shell does.
""")

# microVM: tinybox's create + first exec next to the same QEMU command line
# booted by hand to the agent's hello, same run.
if os.path.exists(os.path.join(out, "microvm-boot.json")):
    raw_boot, tb_boot = load("microvm-boot.json")["results"]
    accel = open(os.path.join(out, "microvm-accel.txt")).read().strip()
    qemu_version = open(os.path.join(out, "microvm-qemu-version.txt")).read().strip()
    qargs = open(os.path.join(out, "microvm-qemu-args")).read().splitlines()
    kernel = os.path.basename(qargs[qargs.index("-kernel") + 1]) if "-kernel" in qargs else "unknown"
    how = {"tcg": "emulation (TCG)", "kvm": "KVM"}.get(accel, accel)
    runs = len(raw_boot["times"])
    raw_start = load("microvm-raw-start.json")["results"][0]
    release = kernel.split("-", 1)[-1].rsplit("-", 1)[0]
    qemu = "QEMU " + qemu_version.split(" (")[0].split()[-1]
    # The raw side's number includes the script's own start (Python); the
    # boot itself is what is left.
    boot_s = raw_boot["median"] - raw_start["median"]
    print(f"""
## microVM (local host, microvm sandbox, {"TCG emulation" if accel == "tcg" else how})

Each box is a QEMU `-M microvm` guest: a kernel ({release}) and an initramfs
with the guest agent, no disk; {qemu}, 1 vCPU, 256 MiB, no NIC, the
workspace over virtio-9p. The raw side is `contrib/bench/raw-microvm-boot`:
QEMU started by hand with the very arguments the driver prints
(`--print-qemu-args`; only `-daemonize` and `-pidfile` dropped), timed until
the guest agent's hello arrives on its port-0 socket, then QEMU killed.
Target: tinybox at most 1.2× raw. {runs} runs each (each a whole boot).

| command | median | min … max | ratio |
|---|---|---|---|
| raw QEMU boot to the agent's hello | {raw_boot['median']:.3f} s | {raw_boot['min']:.3f} … {raw_boot['max']:.3f} s | 1.00× |
| `tinybox create --sandbox microvm --accel {accel} --cpus 1 --memory 256M` + `tinybox exec BOX -- true` | {tb_boot['median']:.3f} s | {tb_boot['min']:.3f} … {tb_boot['max']:.3f} s | {tb_boot['median'] / raw_boot['median']:.2f}× |

The raw number includes the script's own start (a Python interpreter:
{median_ms(raw_start):.0f} ms, measured alone); without it, tinybox is
**{tb_boot['median'] / boot_s:.2f}×** raw. Boot time here, under {how}:
**{boot_s:.2f} s** from starting QEMU to the agent's hello, nearly all of it
the guest's own boot. tinybox adds {(tb_boot['median'] - boot_s) * 1000:.0f} ms to that: the CLI, the
store (a fresh one each run), both drivers' handshakes, QEMU's
`-daemonize`, reading the hello, then a whole first `exec`.""")
    if os.path.exists(os.path.join(out, "microvm-exec.json")):
        ns_exec, vm_exec = load("microvm-exec.json")["results"]
        guest = "emulated" if accel == "tcg" else "under KVM"
        print(f"""
Exec round trip into a running box, next to a namespace box (both in one
store, created before and removed after; {len(vm_exec['times'])} runs each):

| command | median | ratio |
|---|---|---|
| `tinybox exec BOX -- true` (local/namespace) | {median_ms(ns_exec):.1f} ms | 1.00× |
| `tinybox exec BOX -- true` (local/microvm, running box) | {median_ms(vm_exec):.1f} ms | {vm_exec['median'] / ns_exec['median']:.2f}× |

An exec in a running microVM box: the CLI and both drivers as for a
namespace box, then one virtio-serial port claimed, the command sent to
the agent, its streams relayed and its exit frame read, the guest's side
{guest}: {median_ms(vm_exec) - median_ms(ns_exec):.0f} ms more than a namespace box's exec through bwrap.""")
    print("""
Under KVM (a machine where a test guest boots under KVM), the same
comparison is `TINYBOX_BENCH_ACCEL=kvm contrib/bench/run` (the same commands
with `--accel kvm`, 20 runs), or by hand:

    export TINYBOX_HOME=$(mktemp -d)
    dir=$(mktemp -d) ws=$(mktemp -d)   # mktemp makes DIR mode 0700
    tinybox-driver-microvm --print-qemu-args "$dir" "$ws" > args
    hyperfine --runs 20 \\
        --prepare true 'contrib/bench/raw-microvm-boot --accel kvm args' \\
        --prepare 'tinybox rm box-0 || true' \\
        'tinybox exec $(tinybox create --sandbox microvm --accel kvm --cpus 1 --memory 256M) -- true'
    tinybox rm box-0

`raw-microvm-boot --accel kvm` replaces QEMU's `-accel tcg` (what the
driver prints) with `-accel kvm` and adds `-cpu host`, as the driver does
for a KVM box. `tinybox create` without `--accel` takes KVM by itself where
a test guest boots under it; `--accel kvm` makes that explicit and fails
instead of needing an opt-in to emulation.
""")
elif os.path.exists(os.path.join(out, "microvm-skipped.txt")):
    reason = open(os.path.join(out, "microvm-skipped.txt")).read().strip().rstrip(".")
    print(f"""
## microVM

Skipped: {reason}.
""")

# Warm pools: a hand-out beside a cold create, per sandbox, same run.
pool_rows = ""
for name in ("pool-docker.json", "pool-microvm.json"):
    if os.path.exists(os.path.join(out, name)):
        taken, cold = load(name)["results"]
        pool_rows += (f"| `{taken['command'].split(' --store')[0]}` (hand-out) | {median_ms(taken):.1f} ms | "
                      f"{cold['median'] / taken['median']:.0f}× faster than a cold create |\n")
        pool_rows += f"| cold create | {median_ms(cold):.1f} ms | |\n"
if pool_rows:
    print(f"""
## Warm pools

`contrib/bench/pools` (run by `contrib/bench/run`): `tinybox create --pool
NAME` hands out a box made ahead (one record change, no driver started),
beside `tinybox create` of the same box cold, in one hyperfine run per
sandbox. The whole process is timed.

| command | median | |
|---|---|---|
{pool_rows}
Targets: a hand-out ≤ 5 ms; ≥ 20× a cold docker create; ≥ 200× a cold
microVM boot under emulation.
""")

# Store size: the same exec and create in stores of 10 and 10,000 boxes.
if os.path.exists(os.path.join(out, "store-exec.json")):
    direct_s, small_e, large_e, legacy_e = load("store-exec.json")["results"]
    small_c, large_c = load("store-create.json")["results"]
    print(f"""
## Store size (ADR 0018)

`contrib/bench/store-size` (run by `contrib/bench/run`): passthrough boxes,
box-0 made by the CLI and the other records copies of it under their own
names. The last exec row is a store in the one-document layout earlier
builds wrote, which this build reads as it is until a change migrates it.

| command | median | over the 10-box store |
|---|---|---|
| `true` (direct) | {median_ms(direct_s):.1f} ms | |
| `tinybox exec box-0 -- true`, 10 boxes | {median_ms(small_e):.1f} ms | |
| `tinybox exec box-0 -- true`, 10,000 boxes | {median_ms(large_e):.1f} ms | {median_ms(large_e) - median_ms(small_e):+.1f} ms |
| `tinybox exec box-0 -- true`, 10,000 boxes, one-document layout | {median_ms(legacy_e):.1f} ms | {median_ms(legacy_e) - median_ms(small_e):+.1f} ms |
| `tinybox create --sandbox passthrough`, 10 boxes | {median_ms(small_c):.1f} ms | |
| `tinybox create --sandbox passthrough`, 10,000 boxes | {median_ms(large_c):.1f} ms | {median_ms(large_c) - median_ms(small_c):+.1f} ms |

Target: at 10,000 boxes within 2 ms of the same command at 10. A create
writes its record twice (reserved, then created), each fsynced with its
directory, which is most of what it costs beyond an exec.
""")

# ssh sync: tinybox sync next to rsync, same sshd, same tree, same run.
if os.path.exists(os.path.join(out, "ssh-sync-unchanged.json")):
    rs_nop, tb_nop, tb_nop1 = load("ssh-sync-unchanged.json")["results"]
    rs_full, tb_full, tb_full1 = load("ssh-sync-full.json")["results"]
    tree = load("fingerprint-tree.json")
    fp = load("fingerprint.json")
    fp_s = fp["median"]["point_estimate"] / 1e9
    fp_cached_s = load("fingerprint-cached.json")["median"]["point_estimate"] / 1e9
    report = load("ssh-sync-report.json")
    print(f"""
## ssh sync (loopback sshd)

Tree: {tree['files']} files, {tree['bytes'] / 1e6:.1f} MB (this repository's sources and a few crates'
sources). Same sshd on 127.0.0.1, same key. rsync opens a fresh `ssh`
connection per run (its default); tinybox shares one per host (its
default, ssh's ControlMaster kept 60 s, ADR 0011) — and is shown without it too.

| command | median | ratio |
|---|---|---|
| `rsync -a` (nothing to do) | {median_ms(rs_nop):.0f} ms | 1.00× |
| `tinybox sync BOX` (unchanged) | {median_ms(tb_nop):.0f} ms | {tb_nop['median'] / rs_nop['median']:.2f}× |
| `tinybox sync BOX` (unchanged, no multiplexing) | {median_ms(tb_nop1):.0f} ms | {tb_nop1['median'] / rs_nop['median']:.2f}× |
| `rsync -a --whole-file` (into an empty directory) | {median_ms(rs_full):.0f} ms | 1.00× |
| `tinybox sync BOX` (into an empty directory) | {median_ms(tb_full):.0f} ms | {tb_full['median'] / rs_full['median']:.2f}× |
| `tinybox sync BOX` (into an empty directory, no multiplexing) | {median_ms(tb_full1):.0f} ms | {tb_full1['median'] / rs_full['median']:.2f}× |

Targets: unchanged ≤ 0.5× rsync; full transfer at least as fast (≤ 1.0×).
An unchanged sync is one ssh session (`cat` of the far side's marker, plain
words, so no shell probe) and a local fingerprint; rsync starts itself on
the far side and exchanges a file list. A full sync is the marker read, the
login-shell probe and one `tar -x` stream ({report['files']} files): three
sessions, which is what multiplexing makes cheap.

Fingerprint (scan + blake3 merkle, warm page cache): **{fp_s * 1000:.1f} ms** for the tree —
{tree['bytes'] / 1e6 / fp_s:.0f} MB/s, {tree['files'] / fp_s:.0f} files/s; with a warm leaf cache (what an
unchanged sync does: only files whose inode, size, mtime or ctime changed are read again):
**{fp_cached_s * 1000:.1f} ms**.
""")
    if os.path.exists(os.path.join(out, "ssh-sync-100k-unchanged.json")):
        rs_big, tb_big = load("ssh-sync-100k-unchanged.json")["results"]
        rs_bigf, tb_bigf, tar_bigf, *sorted_bigf = load("ssh-sync-100k-full.json")["results"]
        sorted_row = "".join(
            f"| `tar --sort=name -c \\| ssh tar -x` (tinybox's entry order) | {median_ms(x):.0f} ms | {x['median'] / rs_bigf['median']:.2f}× |\n"
            for x in sorted_bigf
        )
        print(f"""
A synthetic tree of 100,000 small files (1,000 directories of 100), same sshd:

| command | median | ratio |
|---|---|---|
| `rsync -a` (nothing to do) | {median_ms(rs_big):.0f} ms | 1.00× |
| `tinybox sync BOX` (unchanged) | {median_ms(tb_big):.0f} ms | {tb_big['median'] / rs_big['median']:.2f}× |
| `rsync -a --whole-file` (into an empty directory) | {median_ms(rs_bigf):.0f} ms | 1.00× |
| `tinybox sync BOX` (into an empty directory) | {median_ms(tb_bigf):.0f} ms | {tb_bigf['median'] / rs_bigf['median']:.2f}× |
| `tar -c \\| ssh tar -x` (into an empty directory) | {median_ms(tar_bigf):.0f} ms | {tar_bigf['median'] / rs_bigf['median']:.2f}× |
{sorted_row}""")
elif os.path.exists(os.path.join(out, "ssh-skipped.txt")):
    print("""
## ssh sync

Skipped: needs root (to run sshd on loopback), /usr/sbin/sshd and rsync.
""")

# tinybox cp next to docker cp and cp/tar, one hyperfine run (contrib/bench/cp).
if os.path.exists(os.path.join(out, "cp.json")):
    r = load("cp.json")["results"]
    rows = ""
    paired, exec_rows = r[:12], r[12:]
    for raw_r, tb_r in zip(paired[0::2], paired[1::2]):
        ratio = raw_r["median"] / tb_r["median"]
        for res, shown in ((raw_r, "1.00×"), (tb_r, f"{ratio:.2f}×")):
            name = res["command"].replace("|", "\\|")
            rows += f"| {name} | {res['median']:.3f} s | {res['min']:.3f} … {res['max']:.3f} s | {shown} |\n"
    # The docker exec stream alone, against docker cp the same way (rows 0, 2).
    for res, raw_r in zip(exec_rows, (r[0], r[2])):
        name = res["command"].replace("|", "\\|")
        ratio = raw_r["median"] / res["median"]
        rows += f"| {name} | {res['median']:.3f} s | {res['min']:.3f} … {res['max']:.3f} s | {ratio:.2f}× |\n"
    print(f"""
## tinybox cp

One hyperfine run (`contrib/bench/cp`, {len(r[0]['times'])} runs each): a 1 GiB file of random
bytes and a tree of 20,000 1 KiB files in 100 directories. Docker: into and
out of the box's own container, `docker cp` against the same container;
namespace: into the box's workspace, `cp -a` and `tar -c | tar -x` into the
same directory. Ratio is raw time / tinybox time (1.00× is as fast as the
raw tool; the target is ≥ 0.8×).

| command | median | min … max | ratio |
|---|---|---|---|
{rows}
`tinybox cp` moves a tar stream on the exec path's pipes: `tar` runs inside
the box (busybox's in this image), and what comes out is checked entry by
entry here before it is written. Into `/workspace` of a namespace box whose
directory is the caller's, the caller's files are written straight into
that directory here (`core/src/engine/copy/host_dir.rs`: the same checked
writer, nothing through a symlink), so no box process is started. The last
two rows are the docker exec stream alone, with no tinybox in it, against
`docker cp` the same way: a copy through a command in a docker box cannot
be faster than them.
""")
elif os.path.exists(os.path.join(out, "cp-skipped.txt")):
    print("""
## tinybox cp

Skipped: docker or bwrap is missing.
""")

# Egress by allowlist beside plain egress (contrib/bench/egress; its own module).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import egress_report  # noqa: E402

egress_section = egress_report.section(out)
if egress_section:
    print(egress_section)
