//! The kit runs its probes on this machine, against this machine's facts.
//! A box on an ssh host declares what the driver finds there, and a verdict
//! earned here must not vouch for it: `--untrusted` on such a host is
//! refused, naming why, and nothing is made — while the same request here
//! is verified and made.

use tinybox_tests::sshd::Sshd;
use tinybox_tests::{Cli, have, skip};

const TEST: &str = "ssh_verify::a_verdict_earned_on_this_machine_does_not_vouch_for_a_box_on_an_ssh_host";

#[test]
fn a_verdict_earned_on_this_machine_does_not_vouch_for_a_box_on_an_ssh_host() {
    if !have("bwrap") {
        return skip(TEST, "needs bwrap");
    }
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => return skip(TEST, &why),
    };
    let user = tinybox_tests::sshd::ensure_user("tbx-verify", "/bin/sh").unwrap();
    let cli = Cli::new();
    let host_add = sshd.host_add_args("far", &user);
    let (code, _, err) = cli.run(&host_add.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");

    let (code, here, err) = cli.run(&["create", "--sandbox", "namespace", "--untrusted"]);
    assert_eq!(code, 0, "verified and made on this machine: {err}");
    let before = cli.store_bytes();
    let (code, out, err) = cli.run(&["create", "--host", "far", "--sandbox", "namespace", "--untrusted"]);
    assert_ne!(code, 0, "a box on another host was vouched for by this machine's verdict: {out}");
    assert!(
        err.contains(
            "sandbox namespace is verified by the kit on this machine only, and declares otherwise for this box"
        ),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(cli.store_bytes(), before, "a refused create changed the store");
    let (code, _, err) = cli.run(&["rm", here.trim()]);
    assert_eq!(code, 0, "{err}");
}
