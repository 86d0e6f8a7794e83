//! What the handshake says about this machine. Only cheap, local checks:
//! every tinybox command starts the driver and pays for them. Whether user
//! namespaces are allowed is probed when a box is created, on its host.

use std::ffi::OsStr;

use tinybox_sdk::protocol::Health;

fn on_path(path: Option<&OsStr>, program: &str) -> bool {
    path.is_some_and(|p| std::env::split_paths(p).any(|d| d.join(program).is_file()))
}

/// `limits` is what the handshake decided about resource limits.
pub fn check(limits: &str) -> Health {
    check_with(std::env::var_os("PATH").as_deref(), limits)
}

/// What this machine lacks for plain egress behind the fence, as the
/// packages to install; `None`: nothing. Without them the driver does not
/// declare `egress_fence`: plain egress is refused before dispatch, and the
/// kit holds nothing else of the sandbox to a feature this machine cannot have.
pub fn fence_missing() -> Option<String> {
    tinybox_sdk::fence::missing_tools(tinybox_sdk::fence::NETWRAP_TOOLS)
}

/// The verdict for a driver whose `PATH` is `path`.
fn check_with(path: Option<&OsStr>, limits: &str) -> Health {
    if !on_path(path, "bwrap") {
        return Health::unavailable("bwrap is not installed; install the bubblewrap package");
    }
    let sbin = tinybox_sdk::fence::SBIN.map(std::path::Path::new);
    let egress = match tinybox_sdk::fence::missing_tools_with(path, &sbin, tinybox_sdk::fence::NETWRAP_TOOLS) {
        None => "egress via slirp4netns behind the fence".to_owned(),
        Some(missing) => format!("no plain egress here (its fence needs: install {missing})"),
    };
    Health::ok_with(format!(
        "bwrap found; {egress}; {limits}; setuid and setgid bits refused by seccomp, no nested user namespaces, \
         a root caller's box runs as its workspace's owner"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_bwrap_on_path_the_driver_is_unavailable_and_says_what_to_install() {
        let empty = tempfile::tempdir().unwrap();
        for path in [None, Some(empty.path().as_os_str())] {
            let health = check_with(path, "x");
            assert!(!health.ok, "{path:?}");
            assert_eq!(health.detail.as_deref(), Some("bwrap is not installed; install the bubblewrap package"));
        }
    }

    #[test]
    fn with_bwrap_on_path_it_is_healthy_and_says_whether_egress_is_possible() {
        let bin = tempfile::tempdir().unwrap();
        std::fs::write(bin.path().join("bwrap"), b"").unwrap();
        let empty = tempfile::tempdir().unwrap();
        let path = std::env::join_paths([empty.path(), bin.path()]).unwrap();
        let health = check_with(Some(&path), "no resource limits");
        assert!(health.ok);
        assert!(
            health.detail.as_deref().unwrap().contains("no plain egress here (its fence needs: install slirp4netns"),
            "{health:?}"
        );

        // A directory named bwrap is not a program.
        let dir_only = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir_only.path().join("bwrap")).unwrap();
        assert!(!check_with(Some(dir_only.path().as_os_str()), "x").ok);
    }
}
