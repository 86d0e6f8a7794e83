//! The holder's arguments for an allowlist image box: the box sees its
//! proxy's `box/` directory and nothing else of it, and the agent relays
//! the box's loopback port to the socket there.

use std::path::{Path, PathBuf};

use tinybox_sdk::protocol::egress::{CA_BUNDLE_IN_BOX, EgressEndpoint};

use super::*;

fn args(egress: Option<&EgressEndpoint>) -> Vec<String> {
    let dirs = Dirs::new(Path::new("/store/ws/ns-box-0"));
    Holder { dirs: &dirs, agent: Path::new("/store/agent"), share_net: false, cgroups: &[], cgroup_v2: true, egress }
        .args()
}

#[test]
fn an_allowlist_image_box_binds_only_its_proxy_s_box_directory_and_the_agent_relays_to_it() {
    let endpoint = EgressEndpoint {
        socket: PathBuf::from("/store/egress/ns-box-0/box/proxy.sock"),
        relay: PathBuf::from("/usr/bin/tinybox-egress"),
        port: 3128,
    };
    let a = args(Some(&endpoint));
    let at = a.iter().position(|x| x == PROXY_DIR_IN_BOX).expect("the proxy's box directory is bound");
    assert_eq!(a[at - 2..=at], ["--ro-bind", "/store/egress/ns-box-0/box", PROXY_DIR_IN_BOX]);
    assert!(!a.iter().any(|x| x == "/store/egress/ns-box-0"), "the proxy's own directory is never bound: {a:?}");
    assert!(!a.iter().any(|x| x.contains("tinybox-egress")), "the host's relay program is not the box's: {a:?}");
    assert_eq!(
        a[a.len() - 5..],
        ["--listen", "/run/tinybox/ctl/agent.sock", "--relay", "3128", "/run/tinybox/egress/proxy.sock"]
    );
    assert_eq!(
        Path::new(CA_BUNDLE_IN_BOX).parent(),
        Some(Path::new(PROXY_DIR_IN_BOX)),
        "the CA bundle is in what is bound"
    );

    let plain = args(None);
    assert!(!plain.iter().any(|x| x == "--relay" || x == PROXY_DIR_IN_BOX), "{plain:?}");
    assert_eq!(plain.last().map(String::as_str), Some("/run/tinybox/ctl/agent.sock"));
}
