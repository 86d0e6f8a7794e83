//! `tinybox-microvm-agent --user USER -- ARGV...`: becomes an image's User
//! and then `argv` (ADR 0036). The driver puts it in front of a command of
//! an image box whose config names a User other than root; it runs after
//! `--enter` has joined the command's cgroup (which needs root). USER is
//! docker's form — `NAME`, `UID`, `NAME:GROUP` or `UID:GID` — and names
//! are resolved in the image's own /etc/passwd and /etc/group, as they are
//! in the guest at the time of the command. Supplementary groups are
//! dropped (std does that when a root process sets a uid).

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

/// Becomes `spec` and then `argv`; only returns if that fails.
pub fn run_as(spec: &str, argv: &[String]) -> ExitCode {
    let (uid, gid) = match resolve(
        spec,
        &std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
        &std::fs::read_to_string("/etc/group").unwrap_or_default(),
    ) {
        Ok(ids) => ids,
        Err(e) => {
            eprintln!("tinybox: the image's user {spec:?}: {e}");
            return ExitCode::from(125);
        }
    };
    let err = Command::new(&argv[0]).args(&argv[1..]).uid(uid).gid(gid).exec();
    eprintln!("tinybox: cannot run {} as {spec}: {err}", argv[0]);
    ExitCode::from(if err.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 })
}

/// The uid and gid `spec` means with these passwd and group files.
pub fn resolve(spec: &str, passwd: &str, group: &str) -> Result<(u32, u32), String> {
    let (user, grp) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let entry = |file: &str, name: &str| -> Option<Vec<String>> {
        file.lines()
            .map(|l| l.split(':').map(str::to_owned).collect::<Vec<_>>())
            .find(|f| f.first().is_some_and(|n| n == name))
    };
    let (uid, primary) = match user.parse::<u32>() {
        Ok(uid) => {
            let by_uid = passwd.lines().map(|l| l.split(':').collect::<Vec<_>>()).find(|f| f.get(2) == Some(&user));
            (uid, by_uid.and_then(|f| f.get(3)?.parse().ok()).unwrap_or(0))
        }
        Err(_) => {
            let f = entry(passwd, user).ok_or_else(|| format!("no user {user} in the image's /etc/passwd"))?;
            let uid = f.get(2).and_then(|u| u.parse().ok()).ok_or_else(|| format!("user {user}'s entry has no uid"))?;
            (uid, f.get(3).and_then(|g| g.parse().ok()).unwrap_or(0))
        }
    };
    let gid = match grp {
        None => primary,
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => entry(group, g)
                .and_then(|f| f.get(2)?.parse().ok())
                .ok_or_else(|| format!("no group {g} in the image's /etc/group"))?,
        },
    };
    Ok((uid, gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n";
    const GROUP: &str = "root:x:0:\nstaff:x:50:\napp:x:1001:\n";

    #[test]
    fn a_user_is_read_the_way_docker_reads_it() {
        assert_eq!(resolve("app", PASSWD, GROUP), Ok((1000, 1001)), "a name takes its primary group");
        assert_eq!(resolve("app:staff", PASSWD, GROUP), Ok((1000, 50)));
        assert_eq!(resolve("1000", PASSWD, GROUP), Ok((1000, 1001)), "a known uid takes its primary group");
        assert_eq!(resolve("4242", PASSWD, GROUP), Ok((4242, 0)), "an unknown uid runs with gid 0, as docker does");
        assert_eq!(resolve("1000:1000", PASSWD, GROUP), Ok((1000, 1000)));
        assert_eq!(resolve("app:7", PASSWD, GROUP), Ok((1000, 7)));
    }

    #[test]
    fn a_name_the_image_does_not_have_is_named() {
        assert_eq!(resolve("nobody", PASSWD, GROUP), Err("no user nobody in the image's /etc/passwd".into()));
        assert_eq!(resolve("app:wheel", PASSWD, GROUP), Err("no group wheel in the image's /etc/group".into()));
    }
}
