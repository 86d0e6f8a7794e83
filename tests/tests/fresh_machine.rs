//! A fresh Debian machine that has bubblewrap and slirp4netns but not
//! iptables: the namespace sandbox's isolation claims all hold there, so
//! the newcomer's first box must run on it — not on passthrough because
//! the optional egress fence cannot. The missing tool narrows the
//! declaration by that one feature (plain egress refused before dispatch,
//! and the driver's health naming iptables); once iptables is there, the fence is declared again.
//!
//! The machine without iptables is this one, in a mount namespace of the
//! test's own where iptables' and ip6tables' programs are covered by
//! /dev/null (root only: making the namespace needs CAP_SYS_ADMIN).

use std::path::PathBuf;
use std::process::Command;

use tinybox_tests::{Cli, have, skip};

const TEST: &str =
    "fresh_machine::without_iptables_the_namespace_sandbox_is_still_picked_and_only_plain_egress_is_refused";

/// The files iptables' restore programs are (each link resolved), to cover.
fn iptables_programs() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = tinybox_sdk::fence::SBIN
        .iter()
        .flat_map(|d| {
            ["iptables-nft-restore", "iptables-restore", "ip6tables-nft-restore", "ip6tables-restore"]
                .map(|n| std::path::Path::new(d).join(n))
        })
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    found.sort();
    found.dedup();
    found
}

/// `tinybox ARGS` as `cli` runs it, inside a mount namespace where `cover`
/// are /dev/null.
fn without(cli: &Cli, cover: &[PathBuf], args: &[&str]) -> (i32, String, String) {
    let inner = cli.cmd(args);
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "--", "sh", "-c"]);
    c.arg(r#"while [ "$1" != -- ]; do mount --bind /dev/null "$1" || exit 99; shift; done; shift; exec "$@""#);
    c.arg("sh").args(cover).arg("--").arg(inner.get_program()).args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let out = c.stdin(std::process::Stdio::null()).output().expect("run unshare");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn namespace_features(json: &str) -> Vec<String> {
    let drivers: Vec<serde_json::Value> = serde_json::from_str(json).unwrap();
    let ns = drivers.iter().find(|d| d["name"] == "namespace").expect("the namespace driver is listed");
    ns["capabilities"]["features"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_owned()).collect()
}

#[test]
fn without_iptables_the_namespace_sandbox_is_still_picked_and_only_plain_egress_is_refused() {
    if rustix::process::getuid().as_raw() != 0 {
        return skip(TEST, "covering iptables in a mount namespace of the test's own needs root");
    }
    if !have("bwrap") || !have("slirp4netns") || !have("unshare") {
        return skip(TEST, "needs bwrap, slirp4netns and unshare");
    }
    let cover = iptables_programs();
    if cover.is_empty() {
        return skip(TEST, "no iptables here to take away (install iptables)");
    }
    let cli = Cli::new();
    let (code, out, err) = without(&cli, &cover, &["--json", "drivers"]);
    assert_eq!(code, 0, "{err}");
    let features = namespace_features(&out);
    assert!(!features.contains(&"egress_fence".to_owned()), "declared a fence it cannot put up: {features:?}");
    assert!(features.contains(&"network_allowlist".to_owned()), "the rest of the declaration stays: {features:?}");
    let drivers: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let health = &drivers.iter().find(|d| d["name"] == "namespace").unwrap()["health"];
    assert_eq!(health["ok"], true, "{health}");
    assert!(
        health["detail"].as_str().unwrap().contains("install iptables"),
        "its health names what is missing: {health}"
    );

    // The newcomer's first box: picked on its own, verified on first use.
    let (code, id, err) = without(&cli, &cover, &["create"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("using sandbox namespace"), "the first box did not run on namespace: {err}");
    let (code, out, err) = without(&cli, &cover, &["exec", id.trim(), "--", "echo", "in a namespace box"]);
    assert_eq!((code, out.as_str()), (0, "in a namespace box\n"), "{err}");

    // Plain egress is the one thing refused, before dispatch, naming the feature.
    let before = cli.store_bytes();
    let (code, _, err) = without(&cli, &cover, &["create", "--sandbox", "namespace", "--network", "egress"]);
    assert_ne!(code, 0);
    assert!(err.contains("sandbox namespace does not support network egress"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(cli.store_bytes(), before, "a refused create changed the store");

    // With iptables (this machine as it is), the fence is declared again.
    let (code, out, err) = cli.run(&["--json", "drivers"]);
    assert_eq!(code, 0, "{err}");
    assert!(namespace_features(&out).contains(&"egress_fence".to_owned()));
    let (code, _, err) = cli.run(&["rm", id.trim()]);
    assert_eq!(code, 0, "{err}");
}
