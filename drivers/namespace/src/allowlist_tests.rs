//! An allowlist box against the recording fake host: its relay and proxy
//! checked as bwrap's user at create and recorded, and its command run
//! under the relay with the network loopback only.

use super::*;

fn endpoint() -> tinybox_sdk::protocol::EgressEndpoint {
    tinybox_sdk::protocol::EgressEndpoint {
        socket: "/store/egress/ns1-box-0/proxy.sock".into(),
        relay: "/opt/tb/tinybox-egress".into(),
        port: 3128,
    }
}

#[tokio::test]
async fn an_allowlist_box_checks_its_relay_and_proxy_as_bwrap_s_user_and_records_it() {
    let host = FakeHost::new().otherwise(Reply::ok(format!("\nx86_64\n{WS}")));
    let mut p = create_params(local(WS), Some(NetworkPolicy::Allowlist));
    p.egress = Some(endpoint());
    let made = create(&host, &site(), p).await.unwrap();
    let argv = host.argvs().remove(0);
    assert_eq!(
        argv[3..],
        words(&[
            "tinybox-probe",
            WS,
            "box-0",
            "allowlist",
            "",
            "/opt/tb/tinybox-egress",
            "/store/egress/ns1-box-0/proxy.sock"
        ])
    );
    assert_eq!(made.handle["allowlist"], true);
    assert_eq!(made.handle["egress"], false, "no slirp4netns: no path out but the proxy");

    // The probe's answer when bwrap's user cannot reach them.
    let host = FakeHost::new().otherwise(Reply::fail(11, ""));
    let mut p = create_params(local(WS), Some(NetworkPolicy::Allowlist));
    p.egress = Some(endpoint());
    let err = create(&host, &site(), p).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("cannot reach the egress proxy's socket /store/egress/ns1-box-0/proxy.sock"), "{err}");

    // Core always sends the endpoint with an allowlist; a create without one is refused before the host hears of it.
    let host = FakeHost::new();
    let err = create(&host, &site(), create_params(local(WS), Some(NetworkPolicy::Allowlist))).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert!(host.calls().is_empty());
}

#[tokio::test]
async fn an_allowlist_box_s_command_runs_under_the_relay_with_loopback_only() {
    let mut h = handle(WS, false, false);
    h["allowlist"] = true.into();
    let host = FakeHost::new();
    let mut p = exec_params(h.clone(), None);
    p.egress = Some(endpoint());
    exec(&host, p).await.unwrap();
    let argv = host.argvs().remove(0);
    assert!(!argv.iter().any(|a| a == "tinybox-netwrap"), "no slirp4netns for an allowlist");
    assert!(argv.iter().any(|a| a == "--unshare-net"));
    let bound = bound_sources(&argv);
    assert!(
        bound.contains("/opt/tb/tinybox-egress") && bound.contains("/store/egress/ns1-box-0/proxy.sock"),
        "{bound:?}"
    );
    let sep = argv.iter().position(|a| a == "--").unwrap();
    assert_eq!(argv[sep + 1..sep + 5], words(&[crate::bwrap::RELAY_IN_BOX, "relay", "--listen", "127.0.0.1:3128"]));
    assert_eq!(argv[argv.len() - 3..], words(&["echo", "a b", "$(x)"]), "the command itself, verbatim, last");

    let err = exec(&FakeHost::new(), exec_params(h, None)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert!(err.message.contains("no egress endpoint"), "{err}");
}
