//! `tinybox drivers verify`: the conformance kit's claim probes, run
//! through the CLI against real sandboxes. A driver that declares more than
//! it delivers must fail with the probes that caught it; honest drivers
//! (namespace, docker, passthrough, the Python procuser in contrib) pass.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tinybox_tests::{Cli, have, install_test_driver, skip};

/// `tinybox drivers verify NAME --json` with drivers also found in `dirs`:
/// (exit status, the parsed report, stderr).
fn verify_json(cli: &Cli, dirs: &[&Path], name: &str) -> (i32, Value, String) {
    verify_json_with(cli, dirs, &[name])
}

/// `tinybox drivers verify ARGS --json` (ARGS: the name, then flags).
fn verify_json_with(cli: &Cli, dirs: &[&Path], args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["--json", "drivers", "verify"];
    all.extend_from_slice(args);
    let out = cli.cmd_with_drivers(dirs, &all).stdin(std::process::Stdio::null()).output().expect("run tinybox");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    (out.status.code().unwrap_or(-1), v, stderr)
}

/// Every isolation claim of the process and kernel levels: the checklists
/// of docs/specs/isolation-levels.md.
const LEVEL_CLAIMS: &[&str] = &[
    "isolation.process.cannot_signal_caller",
    "isolation.process.env_round_trip",
    "isolation.process.cannot_ptrace_caller",
    "isolation.process.cannot_read_caller_files",
    "isolation.process.cannot_write_caller_files",
    "isolation.kernel.host_processes",
    "isolation.kernel.env_clean",
    "isolation.kernel.only_stdio_fds",
    "isolation.kernel.host_files_hidden",
    "isolation.kernel.no_host_devices",
    "isolation.kernel.mounts_stay_inside",
    "isolation.kernel.nothing_privileged_written",
    "isolation.kernel.no_terminal_injection",
];

/// What a sandbox declaring `network_deny` claims.
const NETWORK_CLAIMS: &[&str] = &["network.deny", "network.no_route_to_host", "network.no_host_sockets"];

/// The status of claim `name` in a report.
fn status<'a>(v: &'a Value, name: &str) -> &'a str {
    let claims = v["report"]["claims"].as_array().expect("claims");
    let c = claims.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no claim {name} in {v}"));
    c["status"].as_str().expect("status")
}

fn assert_status(v: &Value, name: &str, want: &str) {
    assert_eq!(
        status(v, name),
        want,
        "claim {name}: {}",
        serde_json::to_string_pretty(&v["report"]["claims"]).unwrap()
    );
}

/// Every operation the kit timed succeeded, and create, exec and rm are among them.
fn assert_operations(v: &Value) {
    let ops = v["report"]["operations"].as_array().expect("operations");
    for op in ["create", "exec", "rm"] {
        let o = ops.iter().find(|o| o["op"] == op).unwrap_or_else(|| panic!("no {op} latency in {v}"));
        assert_eq!(o["ok"], true, "{op}: {o}");
        assert!(o["latency_ms"].is_u64(), "{op}: {o}");
    }
}

/// No box is left behind in the store.
fn assert_no_boxes(cli: &Cli) {
    let (code, out, _) = cli.run(&["--json", "ls"]);
    assert_eq!(code, 0);
    assert_eq!(serde_json::from_str::<Value>(&out).expect("ls json"), Value::Array(vec![]), "boxes left: {out}");
}

#[test]
fn a_driver_that_overclaims_fails_with_the_probes_that_caught_it() {
    let cli = Cli::new();
    let dir = tempfile::tempdir().unwrap();
    install_test_driver(dir.path(), "overclaims");
    let (code, v, err) = verify_json(&cli, &[dir.path()], "overclaims");
    assert_eq!(code, 1, "an overclaiming driver must not verify: {err}");
    assert_eq!(v["passed"], false);
    // It runs everything unconfined on the host: each declared claim's probe catches it.
    assert_status(&v, "isolation.process.cannot_signal_caller", "fail");
    assert_status(&v, "isolation.kernel.host_processes", "fail");
    assert_status(&v, "isolation.kernel.env_clean", "fail");
    // It is the caller: the caller's files, the host's secrets, its devices.
    assert_status(&v, "isolation.process.cannot_read_caller_files", "fail");
    assert_status(&v, "isolation.process.cannot_write_caller_files", "fail");
    assert_status(&v, "isolation.process.cannot_ptrace_caller", "fail");
    assert_status(&v, "isolation.kernel.host_files_hidden", "fail");
    assert_status(&v, "network.no_host_sockets", "fail");
    // Its box writes the caller's directory as the caller, and holds the
    // terminal the kit handed to exec as it was: as root it types into it,
    // as another user it still runs in the caller's session.
    assert_status(&v, "isolation.kernel.nothing_privileged_written", "fail");
    assert!(detail(&v, "isolation.kernel.nothing_privileged_written").contains("is setuid"), "{v}");
    assert_status(&v, "isolation.kernel.no_terminal_injection", "fail");
    let fails = v["report"]["claims"].as_array().unwrap().iter().filter(|c| c["status"] == "fail").count();
    // It shares the host's kernel: the hardware probe sees the same release.
    assert_status(&v, "isolation.hardware.own_kernel", "fail");
    assert_status(&v, "limit.pids", "fail");
    assert_status(&v, "network.deny", "fail");
    // It declares an egress fence, and its egress box reaches the kit's listener on the host.
    assert_status(&v, "network.egress_fence.host_unreachable", "fail");
    assert!(detail(&v, "network.egress_fence.host_unreachable").contains("reached the kit's listener"), "{v}");
    // It declares terminals but hands a command asked for on one the pipes it was given.
    assert_status(&v, "feature.terminal", "fail");
    assert!(detail(&v, "feature.terminal").contains("are not terminals"), "{v}");
    assert_status(&v, "snapshot.filesystem", "not_claimed");
    assert_operations(&v);
    assert_no_boxes(&cli);

    // The text report names the failing probe and says FAIL.
    let out = cli
        .cmd_with_drivers(&[dir.path()], &["drivers", "verify", "overclaims"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let line =
        text.lines().find(|l| l.starts_with("limit.pids")).unwrap_or_else(|| panic!("no limit.pids row: {text}"));
    assert!(line.contains("FAIL") && line.contains("under a cap of"), "{line}");
    assert!(text.contains("NOT VERIFIED"), "{text}");

    // The result is kept for this driver binary and shown by `tinybox drivers`.
    let out = cli.cmd_with_drivers(&[dir.path()], &["drivers"]).stdin(std::process::Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text.lines().find(|l| l.starts_with("overclaims")).unwrap_or_else(|| panic!("no overclaims row: {text}"));
    assert!(row.contains(&format!("FAIL ({fails} claims)")), "{row}");
    let out = cli
        .cmd_with_drivers(&[dir.path()], &["--json", "drivers"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = rows.as_array().unwrap().iter().find(|r| r["name"] == "overclaims").unwrap();
    assert_eq!(row["verified"]["passed"], false, "{row}");
    assert_eq!(row["verified"]["fails"], fails, "{row}");
    let namespace = rows.as_array().unwrap().iter().find(|r| r["name"] == "namespace").unwrap();
    assert_eq!(namespace["verified"], Value::Null, "never verified in this store: {namespace}");
    assert_eq!(namespace["trust"], "unverified", "{namespace}");
    assert_eq!(row["trust"], "failed", "{row}");
    let namespace = text.lines().find(|l| l.starts_with("namespace")).unwrap_or_else(|| panic!("{text}"));
    assert!(namespace.ends_with("UNVERIFIED"), "said plainly: {namespace}");
}

/// The detail of claim `name` in a report.
fn detail<'a>(v: &'a Value, name: &str) -> &'a str {
    let claims = v["report"]["claims"].as_array().expect("claims");
    let c = claims.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no claim {name} in {v}"));
    c["detail"].as_str().expect("detail")
}

#[test]
fn a_driver_without_filesystem_confinement_fails_kernel_by_the_filesystem_claims() {
    const TEST: &str = "verify::a_driver_without_filesystem_confinement_fails_kernel_by_the_filesystem_claims";
    if !have("unshare") {
        return skip(TEST, "unshare (util-linux) is not installed");
    }
    let probe = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--net", "--", "true"])
        .output()
        .expect("run unshare");
    if !probe.status.success() {
        return skip(TEST, &format!("unshare cannot make namespaces here: {}", String::from_utf8_lossy(&probe.stderr)));
    }
    let cli = Cli::new();
    let dir = tempfile::tempdir().unwrap();
    install_test_driver(dir.path(), "unconfined-ns");
    let (code, v, err) = verify_json(&cli, &[dir.path()], "unconfined-ns");
    assert_eq!(code, 1, "a kernel claim without filesystem confinement must not verify: {err}\n{v}");
    assert_eq!(v["passed"], false);
    // The old checklist: its namespaces and clean environment really meet these.
    for claim in [
        "isolation.process.cannot_signal_caller",
        "isolation.process.cannot_ptrace_caller",
        "isolation.kernel.host_processes",
        "isolation.kernel.env_clean",
        "isolation.kernel.only_stdio_fds",
        "isolation.kernel.mounts_stay_inside",
        "network.deny",
        "network.no_route_to_host",
    ] {
        assert_status(&v, claim, "pass");
    }
    // The filesystem items: its root is the host's root.
    for claim in [
        "isolation.process.cannot_read_caller_files",
        "isolation.process.cannot_write_caller_files",
        "isolation.kernel.host_files_hidden",
        "isolation.kernel.nothing_privileged_written",
        "network.no_host_sockets",
    ] {
        assert_status(&v, claim, "fail");
    }
    let privileged = detail(&v, "isolation.kernel.nothing_privileged_written");
    assert!(privileged.contains("is setuid") && privileged.contains("is setgid"), "{privileged}");
    let read = detail(&v, "isolation.process.cannot_read_caller_files");
    assert!(read.contains("0600 file") && read.contains("/etc/shadow"), "{read}");
    let wrote = detail(&v, "isolation.process.cannot_write_caller_files");
    assert!(wrote.contains("/etc/tinybox-kit-") && wrote.contains("removed again"), "{wrote}");
    assert!(detail(&v, "isolation.kernel.host_files_hidden").contains("/etc/shadow"), "{v}");
    assert!(detail(&v, "isolation.kernel.mounts_stay_inside").contains("its own mount namespace"), "{v}");
    // The kit removed what the box made in the host's /etc.
    let made = wrote.split_whitespace().find(|w| w.starts_with("/etc/tinybox-kit-")).expect("the path made");
    assert!(!Path::new(made).exists(), "{made} left behind");
    assert_no_boxes(&cli);
}

#[test]
fn passthrough_claims_nothing_and_passes() {
    let cli = Cli::new();
    let (code, v, err) = verify_json(&cli, &[], "passthrough");
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["passed"], true);
    // It declares only the terminal feature: commands run on a terminal core makes.
    assert_status(&v, "feature.terminal", "pass");
    for c in v["report"]["claims"].as_array().unwrap().iter().filter(|c| c["name"] != "feature.terminal") {
        assert_eq!(c["status"], "not_claimed", "passthrough declares nothing else: {c}");
    }
    assert_operations(&v);
    assert_no_boxes(&cli);
}

#[test]
fn namespace_passes_its_claims() {
    const TEST: &str = "verify::namespace_passes_its_claims";
    if !have("bwrap") {
        return skip(TEST, "bwrap is not installed (apt-get install bubblewrap)");
    }
    let cli = Cli::new();
    let (code, v, err) = verify_json(&cli, &[], "namespace");
    assert_eq!(code, 0, "{err}\n{v}");
    for claim in LEVEL_CLAIMS.iter().chain(NETWORK_CLAIMS) {
        assert_status(&v, claim, "pass");
    }
    // Root can make a cgroup per box, and the limits are claimed and
    // probed; an unprivileged caller no cgroup is delegated to declares none (ADR 0015).
    let limits = if rustix::process::geteuid().is_root() { "pass" } else { "not_claimed" };
    for claim in ["limit.pids", "limit.memory", "limit.cpu"] {
        assert_status(&v, claim, limits);
    }
    // Snapshots and forks are of boxes made from an image (ADR 0029): the
    // kit proves them on a box of its own image, and says so.
    for claim in ["snapshot.filesystem", "feature.fork"] {
        assert_status(&v, claim, "pass");
        let c = v["report"]["claims"].as_array().unwrap().iter().find(|c| c["name"] == claim).unwrap();
        assert!(c["detail"].as_str().unwrap().starts_with("on a box made from an image"), "{c}");
    }
    assert_status(&v, "feature.terminal", "pass");
    // Without an egress target the allowlist claims cannot be probed: they
    // are skipped, saying what is missing (tests/tests/verify_egress.rs
    // gives one), and the verdict is not held against it.
    for c in v["report"]["claims"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str().is_some_and(|n| n.starts_with("network.allowlist.")))
    {
        assert_eq!(c["status"], "skipped", "{c}");
        assert!(c["detail"].as_str().unwrap().contains("--egress-target FILE"), "{c}");
    }
    assert_status(&v, "network.allowlist.sni_mismatch_refused", "skipped");
    assert_operations(&v);
    assert_no_boxes(&cli);
}

#[test]
fn docker_passes_its_claims() {
    const TEST: &str = "verify::docker_passes_its_claims";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip(TEST, &why);
    }
    let cli = Cli::new();
    let (code, v, err) = verify_json(&cli, &[], "docker");
    assert_eq!(code, 0, "{err}\n{v}");
    for claim in LEVEL_CLAIMS.iter().chain(NETWORK_CLAIMS) {
        assert_status(&v, claim, "pass");
    }
    for claim in [
        "limit.cpu",
        "limit.memory",
        "limit.pids",
        "network.deny",
        "snapshot.filesystem",
        "feature.fork",
        "feature.port_forward",
        "feature.terminal",
    ] {
        assert_status(&v, claim, "pass");
    }
    let ops: Vec<&str> =
        v["report"]["operations"].as_array().unwrap().iter().filter_map(|o| o["op"].as_str()).collect();
    assert!(ops.contains(&"snapshot") && ops.contains(&"fork"), "{ops:?}");
    // Its boxes are an image's; the privilege probe binds a host directory of its own.
    assert!(ops.contains(&"create (privilege)") && ops.contains(&"rm (privilege)"), "{ops:?}");
    assert!(detail(&v, "isolation.kernel.nothing_privileged_written").contains("in a box of its own over"), "{v}");
    assert_operations(&v);
    assert_no_boxes(&cli);
    // The snapshot and fork probes' images went with them: none of this
    // store's namespace is left on the daemon, and the store lists none.
    let removed = v["report"]["operations"].as_array().unwrap().iter().filter(|o| o["op"] == "rm (snapshot)");
    assert_eq!(removed.clone().count(), 2, "one per probe that took a snapshot: {v}");
    assert!(removed.into_iter().all(|o| o["ok"] == true), "{v}");
    for claim in ["snapshot.filesystem", "feature.fork"] {
        let said = detail(&v, claim);
        let snapshot = said.split_whitespace().find(|w| w.starts_with("sha-")).expect("the probe names its snapshot");
        let snapshot = snapshot.trim_end_matches(|c: char| !c.is_ascii_hexdigit());
        let (code, _, _) = tinybox_tests::docker::docker(&["image", "inspect", snapshot]);
        assert_ne!(code, 0, "{claim}: verify left snapshot image {snapshot} ({said})");
    }
    let (code, out, _) = cli.run(&["--json", "snapshot", "ls"]);
    assert_eq!(code, 0);
    assert_eq!(serde_json::from_str::<Value>(&out).expect("snapshot ls json"), Value::Array(vec![]), "{out}");
}

fn procuser_driver() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib/drivers/procuser/tinybox-driver-procuser")
}

#[test]
fn the_python_procuser_driver_passes_its_claims() {
    const TEST: &str = "verify::the_python_procuser_driver_passes_its_claims";
    if !rustix::process::geteuid().is_root() {
        return skip(TEST, "procuser switches users, which needs root");
    }
    for tool in ["python3", "setpriv", "prlimit"] {
        if !Path::new("/usr/bin").join(tool).is_file() && !have(tool) {
            return skip(TEST, &format!("{tool} is not installed"));
        }
    }
    // Installed as a third party would: an executable on the driver path.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(procuser_driver(), dir.path().join("tinybox-driver-procuser")).unwrap();
    // A user of its own: RLIMIT_NPROC (its pids limit) counts every process
    // of the uid, and `nobody` also runs passt for the microVM suites.
    const USER: &str = "tinybox-procuser";
    if std::process::Command::new("id").arg(USER).output().map(|o| !o.status.success()).unwrap_or(true) {
        return skip(TEST, &format!("no user {USER} (contrib/setup/start-test-user makes it)"));
    }
    let cli = Cli::new();
    let out = cli
        .cmd_with_drivers(&[dir.path()], &["--json", "drivers", "verify", "procuser"])
        .env("TINYBOX_PROCUSER_USER", USER)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run tinybox");
    let (code, err) = (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {err}"));
    assert_eq!(code, 0, "{err}\n{v}");
    assert_eq!(v["report"]["declared"]["isolation"], "process");
    // Its whole level: another user cannot signal, trace, read or write
    // the caller's. Variables set on the command and on the box arrive
    // exactly (it once passed them to GNU env as `env K=V -- CMD`: exit 127).
    for claim in LEVEL_CLAIMS.iter().filter(|c| c.starts_with("isolation.process.")) {
        assert_status(&v, claim, "pass");
    }
    assert_status(&v, "limit.memory", "pass");
    assert_status(&v, "limit.pids", "pass");
    // Claimed only what it enforces.
    assert_status(&v, "isolation.kernel.host_processes", "not_claimed");
    assert_status(&v, "network.deny", "not_claimed");
    assert_status(&v, "limit.cpu", "not_claimed");
    assert_operations(&v);
    assert_no_boxes(&cli);
}

/// A driver that handshakes correctly and then answers everything with an
/// empty result: before the handshake, for unknown methods, for bad params.
const SLOPPY_DRIVER: &str = r#"#!/usr/bin/env python3
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg.get("method") == "handshake" and msg["params"]["protocol"].startswith("0."):
        result = {"name": "sloppy", "version": "0", "protocol": msg["params"]["protocol"], "role": "sandbox",
                  "health": {"ok": True}, "capabilities": {"isolation": "none", "snapshot": "none",
                  "features": [], "limits": [], "network_deny": False, "sources": ["local_dir"]}}
    else:
        result = None
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#;

#[test]
fn a_driver_that_breaks_the_protocol_fails_the_wire_claims_by_name() {
    if !tinybox_tests::have("python3") {
        tinybox_tests::skip(
            "verify::a_driver_that_breaks_the_protocol_fails_the_wire_claims_by_name",
            "python3 is not installed",
        );
        return;
    }
    let cli = Cli::new();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tinybox-driver-sloppy");
    std::fs::write(&path, SLOPPY_DRIVER).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, v, err) = verify_json(&cli, &[dir.path()], "sloppy");
    assert_eq!(code, 1, "a non-conforming driver is not verified: {err}");
    for claim in [
        "protocol.call_before_handshake",
        "protocol.incompatible_version",
        "protocol.unknown_method",
        "protocol.invalid_params",
    ] {
        assert_status(&v, claim, "fail");
    }
    assert_no_boxes(&cli);
}

/// The claims a report's declaration makes: what the kit must have probed.
fn declared_claims(v: &Value) -> Vec<String> {
    let d = &v["report"]["declared"];
    let level = |l: &str| ["none", "process", "kernel", "hardware"].iter().position(|x| *x == l).expect("a level");
    let isolation = level(d["isolation"].as_str().expect("isolation"));
    let has = |list: &str, item: &str| d[list].as_array().is_some_and(|a| a.iter().any(|x| x == item));
    let mut claims = Vec::new();
    let mut add = |yes: bool, name: &str| {
        if yes {
            claims.push(name.to_owned());
        }
    };
    for name in LEVEL_CLAIMS.iter().chain(&["isolation.hardware.own_kernel"]) {
        let at = name.split('.').nth(1).expect("a level in the name");
        add(isolation >= level(at), name);
    }
    for limit in ["cpu", "memory", "pids", "disk"] {
        add(has("features", "resource_limits") && has("limits", limit), &format!("limit.{limit}"));
    }
    for name in NETWORK_CLAIMS {
        add(d["network_deny"] == true, name);
    }
    add(has("features", "egress_fence"), "network.egress_fence.host_unreachable");
    add(has("features", "egress_fence"), "network.egress_fence.private_unreachable");
    for c in v["report"]["claims"].as_array().expect("claims") {
        let name = c["name"].as_str().expect("name");
        add(has("features", "network_allowlist") && name.starts_with("network.allowlist."), name);
    }
    add(d["snapshot"] != "none", "snapshot.filesystem");
    for feature in ["fork", "port_forward", "pause_resume", "terminal"] {
        add(has("features", feature), &format!("feature.{feature}"));
    }
    for c in v["report"]["claims"].as_array().expect("claims") {
        let name = c["name"].as_str().expect("name");
        add(name.starts_with("protocol."), name);
    }
    claims
}

#[test]
fn microvm_passes_its_claims_under_emulation() {
    const TEST: &str = "verify::microvm_passes_its_claims_under_emulation";
    tinybox_tests::need_microvm!(TEST);
    let cli = Cli::new();
    let (code, v, err) = verify_json_with(&cli, &[], &["microvm", "--accel", "tcg"]);
    let claims = serde_json::to_string_pretty(&v["report"]["claims"]).unwrap();
    assert_eq!(v["report"]["create_options"], serde_json::json!({"accel": "tcg"}), "{v}");
    let declared = declared_claims(&v);
    for c in v["report"]["claims"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        // Every declared claim probed and borne out: no FAIL, no SKIPPED
        // but the fence's private-host claim and the allowlist's, which need
        // an egress target (tests/tests/verify_egress.rs gives one).
        let want = match declared.iter().any(|d| d == name) {
            true if name == "network.egress_fence.private_unreachable" => "skipped",
            true if name.starts_with("network.allowlist.") => "skipped",
            true => "pass",
            false => "not_claimed",
        };
        assert_eq!(c["status"], want, "claim {name}: {c}\n{claims}\n{err}");
    }
    for claim in ["isolation.kernel.host_processes", "limit.cpu", "limit.memory", "network.deny"] {
        assert!(
            declared.iter().any(|d| d == claim),
            "microvm declares {claim} under emulation: {}",
            v["report"]["declared"]
        );
    }
    if v["report"]["declared"]["isolation"] == "kernel" {
        // No KVM here: an emulated guest is never claimed to be hardware isolation.
        assert_status(&v, "isolation.hardware.own_kernel", "not_claimed");
    }
    assert_eq!(code, 0, "{err}\n{claims}");
    assert_eq!(v["passed"], true);
    assert_operations(&v);
    assert_no_boxes(&cli);
    let left = tinybox_tests::microvm::processes_under(cli.home.path());
    assert_eq!(left, vec![], "the kit left VMs running");

    // Without --accel on a machine whose KVM cannot run a guest, the driver
    // refuses every box: the kit says so, with the driver's reason, and
    // skips each claim rather than failing or crashing.
    if v["report"]["declared"]["isolation"] != "kernel" {
        return skip(TEST, "the refusal without --accel: KVM runs guests here, so boxes are made without it");
    }
    let (code, v, err) = verify_json_with(&cli, &[], &["microvm"]);
    assert_eq!(code, 0, "skipped claims are not failures: {err}\n{v}");
    assert!(v["report"].get("create_options").is_none(), "{v}");
    let ops = v["report"]["operations"].as_array().unwrap();
    assert!(ops.iter().any(|o| o["op"] == "create" && o["ok"] == false), "{v}");
    for claim in ["isolation.kernel.host_processes", "limit.cpu", "network.deny", "protocol.large_binary_stream"] {
        assert_status(&v, claim, "skipped");
        let c = v["report"]["claims"].as_array().unwrap().iter().find(|c| c["name"] == claim).unwrap();
        let detail = c["detail"].as_str().unwrap();
        assert!(detail.starts_with("no box could be made: "), "{detail}");
        assert!(detail.contains("--accel tcg"), "the driver's refusal names the way out: {detail}");
    }
    assert_no_boxes(&cli);

    // Both verdicts are kept: the one without options did not replace the
    // one earned under tcg, and `tinybox drivers` shows each for what it is.
    let out = cli.cmd(&["--json", "drivers"]).stdin(std::process::Stdio::null()).output().unwrap();
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = rows.as_array().unwrap().iter().find(|r| r["name"] == "microvm").expect("microvm listed");
    assert_eq!(row["trust"], "unproven", "no box could be made without --accel: {row}");
    assert_eq!(row["with_options"][0]["create_options"], serde_json::json!({"accel": "tcg"}), "{row}");
    assert_eq!(row["with_options"][0]["passed"], true, "{row}");
    let out = cli.cmd(&["drivers"]).stdin(std::process::Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("microvm")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("UNPROVEN (") && line.ends_with("; pass with accel=tcg"), "{line}");
}
