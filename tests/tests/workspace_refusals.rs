//! A workspace is a project directory a box writes to: `tinybox create`
//! refuses the whole machine, a system directory (also through a symlink)
//! and the store itself, with one line naming the value and the rule, and
//! leaves the store as it was. Run as this user and, when we are root,
//! rootless as the unprivileged test user too.

use tinybox_tests::boxes::{BoxEnv, Principal};

#[test]
fn the_machine_a_system_directory_and_the_store_are_refused_as_workspaces() {
    const TEST: &str = "workspace_refusals::the_machine_a_system_directory_and_the_store_are_refused_as_workspaces";
    const SYSTEM: &str = "a workspace is a project directory (a box writes to it), never / or a system directory";
    const STORE: &str = "never the store, inside it, or a directory holding it";
    for who in Principal::all(TEST) {
        let env = BoxEnv::new(&who);
        let link = env.workspace.path().join("innocent");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        who.own(&link);
        let store = env.store.path().to_str().unwrap().to_owned();
        let cases = [
            ("/".to_owned(), "the whole machine", SYSTEM),
            ("/etc".to_owned(), "the machine's configuration and secrets", SYSTEM),
            (link.to_str().unwrap().to_owned(), "(which leads to /etc)", SYSTEM),
            ("/proc".to_owned(), "the kernel's view of every process", SYSTEM),
            (store.clone(), "tinybox's own records (the store)", STORE),
        ];
        let before = tinybox_tests::tree_contents(env.store.path());
        for (workspace, what, rule) in cases {
            let out = env.run(&["create", "--sandbox", "namespace", "--workspace", &workspace]);
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            let label = format!("{} --workspace {workspace}", who.label());
            assert!(!out.status.success(), "{label}: not refused: {err}");
            assert_eq!(out.stdout, b"", "{label}: no box id");
            let lines: Vec<&str> = err.lines().collect();
            assert_eq!(lines.len(), 1, "{label}: one line: {err}");
            assert!(lines[0].starts_with(&format!("tinybox: workspace {workspace} ")), "{label}: names it: {err}");
            assert!(lines[0].contains(what) && lines[0].contains(rule), "{label}: says why: {err}");
            assert_eq!(tinybox_tests::tree_contents(env.store.path()), before, "{label}: the store changed");
        }
        let out = env.run(&["--json", "ls"]);
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(), serde_json::json!([]));
    }
}
