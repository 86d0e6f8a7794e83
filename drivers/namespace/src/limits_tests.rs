//! Limits, against the recording fake host: a cgroup per box that every
//! command enters first, and what create makes and destroy finds again by
//! name alone (the state directory's workspaces, an interrupted create's
//! cgroups, a delegated parent), and a record from before the filter or
//! the cgroup version key.

use super::*;

#[tokio::test]
async fn limits_make_a_cgroup_per_box_that_every_command_enters_first_and_destroy_removes() {
    let dirs = "/sys/fs/cgroup/pids/tinybox.ns1.box-0\n/sys/fs/cgroup/memory/x/tinybox.ns1.box-0\n";
    let host = FakeHost::new()
        .on(|a| a[3] == "tinybox-cgroup", Reply::ok(dirs))
        .otherwise(Reply::ok(format!("\nx86_64\n{WS}")));
    let mut p = create_params(local(WS), None);
    p.resources = Resources { pids: Some(64), memory_bytes: Some(1 << 26), cpus: Some(0.5), disk_bytes: None };
    let made = create(&host, &site(), p).await.unwrap();
    let setup = &host.calls()[1].params.argv;
    assert_eq!(setup[..3], words(&["sh", "-c", crate::cgroup::SETUP]));
    let name = crate::cgroup::name("/store", "ns1", "box-0");
    assert_eq!(setup[3..], words(&["tinybox-cgroup", &name, "64", "67108864", "50000", "", "", ""]));
    let cgroups: Vec<String> = dirs.lines().map(str::to_owned).collect();
    assert_eq!(made.handle["cgroups"], serde_json::json!(cgroups));

    let host = FakeHost::new();
    exec(&host, exec_params(made.handle.clone(), None)).await.unwrap();
    let argv = host.argvs().remove(0);
    let head = start(&cgroups);
    assert_eq!(argv[..head.len()], head[..], "the cgroup is entered before anything else runs");
    assert_eq!(argv[head.len()], "bwrap", "by the one shell that feeds bwrap its seccomp program");
    assert!(start_script().starts_with(crate::cgroup::ENTER), "the cgroups first, then the program");
    for dir in &cgroups {
        let inside = crate::cgroup::in_box(dir, false).unwrap();
        assert!(
            argv.windows(3).any(|w| w == [words(&["--ro-bind"]), vec![dir.clone()], vec![inside.clone()]].concat())
        );
    }

    let host = FakeHost::new();
    destroy(&host, &site(), target(made.handle)).await.unwrap();
    let rm = &host.calls()[0].params.argv;
    assert_eq!(rm[..4], words(&["sh", "-c", crate::cgroup::REMOVE, "tinybox-cgroup-rm"]));
    assert_eq!(rm[4..], cgroups[..]);
    assert_eq!(host.calls().len(), 1, "the caller's workspace stays");
}

#[tokio::test]
async fn a_cgroup_that_cannot_be_made_refuses_the_box_and_removes_what_create_made() {
    let host = FakeHost::new()
        .on(|a| a[3] == "tinybox-cgroup", Reply::fail(1, "tinybox: cannot make /sys/fs/cgroup/pids/x\n"))
        .otherwise(Reply::ok("\nx86_64\n/tmp/tinybox-box-0.Ab12Cd"));
    let mut p = create_params(None, None);
    p.resources.pids = Some(64);
    let err = create(&host, &site(), p).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("cannot apply the box's limits on the host"), "{err}");
    assert_eq!(host.argvs().last().unwrap(), &words(&["rm", "-rf", "--", "/tmp/tinybox-box-0.Ab12Cd"]));
}

#[tokio::test]
async fn a_box_from_before_the_filter_or_on_another_machine_is_refused() {
    let host = FakeHost::new();
    let old = serde_json::json!({ "workspace": WS, "owned": false, "egress": false });
    let err = exec(&host, exec_params(old, None)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unsupported);
    assert!(err.message.contains("remove it and create it again"), "{err}");
    assert!(host.calls().is_empty());

    let host = FakeHost::new().otherwise(Reply::ok("\nriscv64\n/tmp/tinybox-box-0.Ab12Cd"));
    let err = create(&host, &site(), create_params(None, None)).await.unwrap_err();
    assert!(err.message.contains("this host is riscv64"), "{err}");
    assert_eq!(host.argvs().last().unwrap(), &words(&["rm", "-rf", "--", "/tmp/tinybox-box-0.Ab12Cd"]));
}

/// A driver offered the store's state directory.
fn site_with_state() -> Site {
    Site {
        store: "/store/drivers/namespace".into(),
        workspaces: Some("/store/drivers/namespace/workspaces".into()),
        cgroups: Default::default(),
        local: None,
    }
}

const OWN: &str = "/store/drivers/namespace/workspaces/ns1-box-0";

#[tokio::test]
async fn a_box_given_no_workspace_gets_one_named_after_it_in_the_state_directory() {
    let host = FakeHost::new().otherwise(Reply::ok(format!("\nx86_64\n{OWN}")));
    let made = create(&host, &site_with_state(), create_params(None, None)).await.unwrap();
    let argv = host.argvs().remove(0);
    assert_eq!(argv[3..], words(&["tinybox-probe", "", "box-0", "denied", OWN, "", ""]), "made at its own place");
    assert_eq!(made.handle, handle(OWN, true, false));

    // A given directory is used as it is; no place of the box's own is made.
    let host = FakeHost::new().otherwise(Reply::ok(format!("\nx86_64\n{WS}")));
    create(&host, &site_with_state(), create_params(local(WS), None)).await.unwrap();
    assert_eq!(host.argvs().remove(0)[3..], words(&["tinybox-probe", WS, "box-0", "denied", "", "", ""]));
}

#[tokio::test]
async fn a_failed_check_removes_the_workspace_the_probe_made() {
    let host = FakeHost::new().otherwise(Reply::fail(4, ""));
    let err = create(&host, &site_with_state(), create_params(None, None)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable, "{err}");
    assert_eq!(host.argvs().last().unwrap(), &words(&["rm", "-rf", "--", OWN]));
    let host = FakeHost::new().otherwise(Reply::fail(10, "mkdir: Permission denied\n"));
    let err = create(&host, &site_with_state(), create_params(None, None)).await.unwrap_err();
    assert!(err.message.contains(&format!("cannot make the box's workspace {OWN}")), "{err}");
}

/// Found from the namespace and identifier alone: the chaos suite's
/// namespace create killed mid-way left this directory after `rm` before.
#[tokio::test]
async fn destroy_of_an_interrupted_create_finds_its_workspace_and_cgroups_by_name() {
    let cgroup = "/sys/fs/cgroup/pids/x/tinybox.abc.ns1.box-0\n";
    let host = FakeHost::new().on(|a| a[3] == "tinybox-cgroup-find", Reply::ok(cgroup)).otherwise(Reply::ok(""));
    let interrupted = BoxRef::interrupted(BoxId::new("box-0").unwrap(), "ns1");
    destroy(&host, &site_with_state(), interrupted.clone()).await.unwrap();
    let argvs = host.argvs();
    assert_eq!(argvs.len(), 3, "{argvs:?}");
    let name = crate::cgroup::name("/store/drivers/namespace", "ns1", "box-0");
    assert_eq!(argvs[0], words(&["sh", "-c", crate::cgroup::LOCATE, "tinybox-cgroup-find", &name]));
    assert_eq!(argvs[1][3..], words(&["tinybox-cgroup-rm", cgroup.trim()]));
    assert_eq!(argvs[2], words(&["sh", "-c", REMOVE_OWN, "tinybox-rm", OWN]));

    // Nothing there: not found, which core takes as nothing to remove.
    let host = FakeHost::new().on(|a| a[3] == "tinybox-rm", Reply::fail(1, "")).otherwise(Reply::ok(""));
    let err = destroy(&host, &site_with_state(), interrupted.clone()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound, "{err}");
    // A workspace that cannot be removed is a failure, not silence.
    let host = FakeHost::new().on(|a| a[3] == "tinybox-rm", Reply::fail(2, "rm: busy\n")).otherwise(Reply::ok(""));
    let err = destroy(&host, &site_with_state(), interrupted).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Failed, "{err}");
}

/// A caller given a delegated cgroup: its parents reach SETUP, the handle
/// says which cgroup version, and an interrupted create is looked for there.
#[tokio::test]
async fn a_delegated_parent_is_where_setup_makes_the_box_cgroup_and_where_rm_looks() {
    let parent = "/sys/fs/cgroup/u";
    let delegated = Site {
        cgroups: Cgroups { unified: true, parents: [(Limit::Pids, PathBuf::from(parent))].into() },
        ..site_with_state()
    };
    let dir = format!("{parent}/tinybox.x.ns1.box-0");
    let host = FakeHost::new()
        .on(|a| a[3] == "tinybox-cgroup", Reply::ok(format!("{dir}\n")))
        .otherwise(Reply::ok(format!("\nx86_64\n{WS}")));
    let mut p = create_params(local(WS), None);
    p.resources.pids = Some(64);
    let made = create(&host, &delegated, p).await.unwrap();
    let setup = &host.calls()[1].params.argv;
    assert_eq!(setup[5..], words(&["64", "", "", parent, "", ""]));
    assert_eq!(made.handle["cgroup_v2"], true);

    let host = FakeHost::new();
    exec(&host, exec_params(made.handle.clone(), None)).await.unwrap();
    let argv = host.argvs().remove(0);
    assert!(argv.windows(3).any(|w| w == words(&["--ro-bind", &dir, "/sys/fs/cgroup"])), "v2: seen at the root");
    assert_eq!(argv[4..7], words(&["cgroup.procs", "1", &dir]), "v2 takes a whole process into cgroup.procs");

    let host = FakeHost::new().otherwise(Reply::ok(""));
    let interrupted = BoxRef::interrupted(BoxId::new("box-0").unwrap(), "ns1");
    let _ = destroy(&host, &delegated, interrupted).await;
    let name = crate::cgroup::name("/store/drivers/namespace", "ns1", "box-0");
    assert_eq!(host.argvs()[0], words(&["sh", "-c", crate::cgroup::LOCATE, "tinybox-cgroup-find", &name, parent]));
}

#[test]
fn a_record_from_before_the_cgroup_version_key_is_read_by_where_its_cgroups_are() {
    let mut v2 = handle(WS, false, false);
    v2.as_object_mut().unwrap().remove("cgroup_v2");
    v2["cgroups"] = serde_json::json!(["/sys/fs/cgroup/tinybox/tinybox.x.ns1.box-0"]);
    assert!(Handle::parse(&v2).unwrap().cgroup_v2);
    v2["cgroups"] = serde_json::json!(["/sys/fs/cgroup/pids/tinybox.x.ns1.box-0"]);
    assert!(!Handle::parse(&v2).unwrap().cgroup_v2);
}

/// The same lookup for inspect: an interrupted create's workspace is what
/// it made; none is nothing made; no state directory cannot be looked in.
#[tokio::test]
async fn inspect_of_an_interrupted_create_looks_at_the_workspace_its_name_gives() {
    let interrupted = BoxRef::interrupted(BoxId::new("box-0").unwrap(), "ns1");
    let host = FakeHost::new().otherwise(Reply::ok(""));
    let seen = inspect(&host, &site_with_state(), interrupted.clone()).await.unwrap();
    assert_eq!(host.argvs(), [words(&["test", "-d", OWN])]);
    assert_eq!(seen.state, BoxState::Ready);
    assert_eq!(seen.detail.as_deref(), Some(format!("its workspace {OWN} was made").as_str()));

    let host = FakeHost::new().otherwise(Reply::fail(1, ""));
    let seen = inspect(&host, &site_with_state(), interrupted.clone()).await.unwrap();
    assert_eq!(seen.state, BoxState::Gone);
    assert_eq!(seen.detail.as_deref(), Some(format!("no workspace {OWN} was made").as_str()));

    let err = inspect(&FakeHost::new(), &site(), interrupted).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound, "{err}");
}
