//! Nothing a microVM box writes into its workspace reaches the host with
//! privilege (set-id bits, file capabilities, root ownership the caller did
//! not choose, device nodes), as the caller over its own workspace and as
//! root over a user's.

use super::*;

#[test]
fn nothing_a_box_writes_into_the_workspace_reaches_the_host_with_privilege() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    need_microvm!("microvm_box::privilege::nothing_a_box_writes_into_the_workspace_reaches_the_host_with_privilege");
    // (who runs tinybox, who owns the workspace): a caller over its own
    // workspace, and root over an unprivileged user's, the case where a
    // box run by root once planted root-owned setuid programs.
    let mut cases: Vec<(Principal, Principal)> = Principal::all(
        "microvm_box::privilege::nothing_a_box_writes_into_the_workspace_reaches_the_host_with_privilege",
    )
    .into_iter()
    .map(|p| (p.clone(), p))
    .collect();
    if let Some(user) = cases.iter().map(|c| c.0.clone()).find(|p| matches!(p, Principal::User { .. })) {
        cases.push((Principal::Me, user));
    }
    let setcap = tinybox_tests::microvm::file_capability_probe();
    for (runner, owner) in cases {
        let label = format!("{} over a workspace of {:?}", runner.label(), owner);
        let (env, _reaper) = env_for(&runner);
        let ws = env.workspace.path().to_owned();
        std::fs::write(ws.join("pre"), "from the host\n").unwrap();
        std::fs::set_permissions(ws.join("pre"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::copy(&setcap, ws.join("setcap")).unwrap();
        std::fs::set_permissions(ws.join("setcap"), std::fs::Permissions::from_mode(0o755)).unwrap();
        owner.own_tree(&ws);
        let ws_meta = std::fs::metadata(&ws).unwrap();
        let (uid, gid) = (ws_meta.uid(), ws_meta.gid());

        let id = env.create(TCG);
        let attack = "cd /workspace; \
            cp /bin/busybox x; chown 0:0 x; chmod 4755 x; \
            cp /bin/busybox g; chmod 2755 g; chmod g+s g; \
            mkdir d; chown 0:0 d; chmod 2775 d; mkdir d/e; touch d/f; chmod 6755 d/f; \
            chown 0:0 pre; mknod dev c 1 3; mkfifo fifo; ln -s /etc/shadow link; \
            ./setcap x d/f pre; \
            echo from the box > note; echo from the box >> pre; \
            stat -c '%n %a %u' x g d d/f";
        let out = exec(&env, &id, &["sh", "-c", attack]);
        let said = text(&out.stdout);
        // Inside, the box keeps the modes and owners it set: its own view is whole.
        for line in ["x 4755 0", "g 2755 0", "d 2775 0", "d/f 6755 0"] {
            assert!(
                said.lines().any(|l| l == line),
                "{label}: the guest's view lost {line:?}: {said}{}",
                text(&out.stderr)
            );
        }

        // Outside: every entry is a plain file or directory of the workspace's
        // owner, with no setuid or setgid bit and no file capability.
        let mut made = Vec::new();
        let mut todo = vec![ws.clone()];
        while let Some(dir) = todo.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                let m = std::fs::symlink_metadata(&path).unwrap();
                let name = path.strip_prefix(&ws).unwrap().display().to_string();
                assert_eq!(m.mode() & 0o6000, 0, "{label}: {name} is {:o} on the host", m.mode());
                assert_eq!((m.uid(), m.gid()), (uid, gid), "{label}: {name} is not the workspace owner's");
                let xattrs = tinybox_tests::microvm::xattr_names(&path);
                assert!(
                    !xattrs.iter().any(|x| x == "security.capability"),
                    "{label}: {name} has a file capability: {said}"
                );
                assert!(
                    m.file_type().is_file() || m.file_type().is_dir(),
                    "{label}: the box made {name} a {:?} on the host",
                    m.file_type()
                );
                if m.is_dir() {
                    todo.push(path.clone());
                }
                made.push((name, m.mode() & 0o7777, m.is_dir()));
            }
        }
        made.sort();
        let expected: Vec<(String, u32, bool)> = [
            ("d", 0o750, true),
            ("d/e", 0o750, true),
            ("d/f", 0o640, false),
            ("dev", 0o640, false),
            ("fifo", 0o640, false),
            ("g", 0o640, false),
            ("link", 0o640, false),
            ("note", 0o640, false),
            ("pre", 0o644, false),
            ("setcap", 0o755, false),
            ("x", 0o640, false),
        ]
        .into_iter()
        .map(|(n, m, d)| (n.to_owned(), m, d))
        .collect();
        assert_eq!(made, expected, "{label}: the host's modes");

        // The owner reads and writes what the box wrote, and sees the box's
        // appends to its own file.
        let host = owner
            .command(std::path::Path::new("/bin/sh"), &["-c", "cat note pre && echo from the host >> note"])
            .current_dir(&ws)
            .output()
            .unwrap();
        assert!(host.status.success(), "{label}: {}", text(&host.stderr));
        assert_eq!(text(&host.stdout), "from the box\nfrom the host\nfrom the box\n", "{label}");
        assert_eq!(exec_ok(&env, &id, &["cat", "/workspace/note"]), "from the box\nfrom the host\n", "{label}");
        let inspect = run_ok(&env, &["inspect", &id]);
        assert!(inspect.contains(&format!("land as {uid}:{gid}, mode 0640")), "{label}: {inspect}");
        remove_and_check_clean(&env, &id);
    }
}
