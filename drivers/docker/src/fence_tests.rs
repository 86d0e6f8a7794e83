//! Unit tests of the docker egress fence's commands and what it reads.

use super::*;
use tinybox_sdk::testing::{FakeHost, Reply};

const BOX: Owner<'static> = Owner { container: "tinybox-ns1-box-0", box_id: "box-0", namespace: "ns1" };

fn has_pair(argv: &[String], flag: &str, value: &str) -> bool {
    argv.windows(2).any(|w| w[0] == flag && w[1] == value)
}

#[test]
fn the_helpers_are_named_from_the_box_and_never_take_a_box_s_name() {
    assert_eq!(holder_name("tinybox-ns1-box-0"), "tinybox.net-ns1-box-0");
    assert_eq!(helper_name("tinybox-ns1-box-0"), "tinybox.fence-ns1-box-0");
    // A box named `box-0-net` is `tinybox-ns1-box-0-net`, never the holder.
    assert_ne!(holder_name("tinybox-ns1-box-0"), crate::argv::container_name("ns1", "box-0-net"));
    assert!(!holder_name("tinybox-ns1-x").starts_with("tinybox-"));
}

#[test]
fn the_host_s_view_keeps_only_known_directories_and_ipv4_addresses() {
    let view = read_host_view(
        "dir /usr\ndir /lib64\ndir /etc\ndir /usr -v\naddr 192.0.2.2\naddr 172.17.0.1\naddr fd00::2\naddr x\n",
    );
    assert_eq!(view.dirs, ["/usr", "/lib64"]);
    assert_eq!(view.addrs, [Ipv4Addr::new(192, 0, 2, 2), Ipv4Addr::new(172, 17, 0, 1)]);
    assert_eq!(
        resolvers("# docker\nnameserver 10.255.255.53\nnameserver  8.8.8.8 \nnameserver fd00::53\noptions ndots:0\n"),
        [Ipv4Addr::new(10, 255, 255, 53), Ipv4Addr::new(8, 8, 8, 8)]
    );
}

#[test]
fn the_rules_are_the_sdk_s_with_the_host_s_own_addresses_between_head_and_tail() {
    let exceptions: Vec<Exception> = vec!["10.254.16.2:8080".parse().unwrap()];
    let resolvers = [Ipv4Addr::new(10, 255, 255, 53)];
    let host = [Ipv4Addr::new(192, 0, 2, 2), Ipv4Addr::new(172, 17, 0, 1)];
    let (v4, v6) = rules(&exceptions, &resolvers, &host, false);
    let fence = Fence { exceptions: exceptions.clone(), resolvers: resolvers.to_vec() };
    let sdk = fence.v4();
    let middle = format!("{}{}", host_address_rule(host[0]), host_address_rule(host[1]));
    assert_eq!(v4, format!("{}{middle}{}", sdk.head, sdk.tail));
    assert!(!v4.contains("conntrack"), "no port published, no replies let out: {v4}");
    // With a published port, replies go back to docker's side of the bridge.
    let (published, _) = rules(&exceptions, &resolvers, &host, true);
    assert_eq!(published, format!("{}{REPLIES}{middle}{}", sdk.head, sdk.tail));
    assert!(v4.contains("-A OUTPUT -d 10.255.255.53/32 -p udp --dport 53 -j ACCEPT\n"), "{v4}");
    assert!(v4.contains("-A OUTPUT -d 172.17.0.1/32 -j tinybox-refuse"), "{v4}");
    assert_eq!(v6, fence.v6());
}

#[test]
fn the_holder_publishes_the_ports_and_runs_nothing_of_the_box_s_with_no_capability() {
    let ports = [PortMapping { host: 8080, guest: 80 }];
    let a = holder_run(BOX, &["/usr", "/lib64"], &ports);
    assert_eq!(&a[..5], ["docker", "run", "-d", "--name", "tinybox.net-ns1-box-0"]);
    for (flag, value) in [
        ("--label", "tinybox.box=box-0"),
        ("--label", "tinybox.namespace=ns1"),
        ("--label", "tinybox.role=netns"),
        ("--network", "bridge"),
        ("--cap-drop", "ALL"),
        ("--security-opt", "no-new-privileges"),
        ("--publish", "127.0.0.1:8080:80"),
        ("--mount", "type=bind,source=/usr,target=/usr,readonly"),
        ("--mount", "type=bind,source=/lib64,target=/lib64,readonly"),
        ("--pull", "never"),
        ("--entrypoint", "sleep"),
    ] {
        assert!(has_pair(&a, flag, value), "{flag} {value} missing from {a:?}");
    }
    assert!(!a.iter().any(|x| x == "--cap-add"), "{a:?}");
    assert_eq!(a[a.len() - 2..], [IMAGE, "infinity"]);
}

#[test]
fn the_fence_container_joins_the_holder_with_net_admin_over_the_empty_image() {
    let a = helper_run(BOX, &["/usr"], "V4", "V6");
    assert_eq!(&a[..5], ["docker", "run", "--rm", "--name", "tinybox.fence-ns1-box-0"]);
    for (flag, value) in [
        ("--label", "tinybox.role=fence"),
        ("--network", "container:tinybox.net-ns1-box-0"),
        ("--cap-drop", "ALL"),
        ("--cap-add", "NET_ADMIN"),
        ("--cap-add", "NET_RAW"),
        ("--tmpfs", "/run"),
        ("--user", "0:0"),
        ("--entrypoint", "sh"),
    ] {
        assert!(has_pair(&a, flag, value), "{flag} {value} missing from {a:?}");
    }
    assert!(a.contains(&"--read-only".to_owned()), "{a:?}");
    assert_eq!(a[a.len() - 6..], [IMAGE, "-c", APPLY, "tinybox-fence", "V4", "V6"]);
}

fn reply_for(argv: &[String]) -> Reply {
    match (argv[0].as_str(), argv.get(1).map(String::as_str)) {
        ("sh", _) => Reply::ok("dir /usr\ndir /lib64\naddr 192.0.2.2\naddr 172.17.0.1\n"),
        ("docker", Some("exec")) => Reply::ok("nameserver 10.255.255.53\n"),
        _ => Reply::ok(""),
    }
}

#[tokio::test]
async fn the_fence_goes_up_in_the_holder_s_namespace_with_the_resolvers_and_host_addresses_it_read() {
    let host = FakeHost::replying(reply_for);
    let exceptions: Vec<Exception> = vec!["10.254.16.2".parse().unwrap()];
    let fenced = prepare(&host, BOX, &exceptions, &[]).await.unwrap();
    assert_eq!(
        fenced,
        Fenced { holder: "tinybox.net-ns1-box-0".into(), resolvers: vec![Ipv4Addr::new(10, 255, 255, 53)] }
    );
    let calls = host.calls();
    assert_eq!(calls[0].params.argv[..2], ["sh", "-c"]);
    assert_eq!(calls[0].stdin.as_deref(), Some(&EMPTY_TAR[..]), "the empty image's tar goes to docker import");
    assert_eq!(calls[1].params.argv, holder_run(BOX, &["/usr", "/lib64"], &[]));
    assert_eq!(calls[2].params.argv, docker(&["exec", "tinybox.net-ns1-box-0", "cat", "/etc/resolv.conf"]));
    let addrs = [Ipv4Addr::new(192, 0, 2, 2), Ipv4Addr::new(172, 17, 0, 1)];
    let (v4, v6) = rules(&exceptions, &fenced.resolvers, &addrs, false);
    assert_eq!(calls[3].params.argv, helper_run(BOX, &["/usr", "/lib64"], &v4, &v6));
    assert_eq!(calls.len(), 4);
}

#[tokio::test]
async fn a_host_without_iptables_is_named_and_the_holder_is_removed() {
    let host = FakeHost::replying(|argv| match argv.get(2).map(String::as_str) {
        Some("--rm") => Reply::fail(12, ""),
        _ => reply_for(argv),
    });
    let err = prepare(&host, BOX, &[], &[]).await.unwrap_err();
    assert_eq!(err.code, tinybox_sdk::protocol::ErrorCode::Unavailable);
    assert!(err.message.contains("install the iptables package"), "{err}");
    let argvs = host.argvs();
    assert_eq!(
        argvs[argvs.len() - 2..],
        [crate::argv::remove("tinybox.fence-ns1-box-0"), crate::argv::remove("tinybox.net-ns1-box-0")]
    );

    // An image of the fence's name that is not the empty one is never run.
    let host = FakeHost::replying(|argv| match argv[0].as_str() {
        "sh" => Reply::fail(13, "image tinybox-fence:empty has layers sha256:bad, not the one empty layer"),
        _ => Reply::ok(""),
    });
    let err = prepare(&host, BOX, &[], &[]).await.unwrap_err();
    assert!(err.message.contains("not the one empty layer"), "{err}");
    assert!(!host.argvs().iter().any(|a| a.get(1).is_some_and(|v| v == "run")), "{:?}", host.argvs());
}
