//! The privilege item of the kernel checklist (docs/specs/isolation-levels.md):
//! nothing a box writes into a host directory carries privilege there.
//!
//! In a box over a host directory — the kit's first box when the sandbox
//! takes `local_dir` only, else a box of its own over a directory the kit
//! makes — the probe tries every way it has to plant privilege: a copy of
//! a binary made setuid and setgid, setgid directories, `chown 0`, device
//! nodes, a file capability (`setcap`, `setfattr`, or python3's
//! `os.setxattr` of `security.capability`), a hard link to a setuid
//! program of the box's. The host then walks what arrived: every entry must
//! be a plain file or directory, owned by the workspace directory's owner
//! and group, with neither set-id bit and no `security.capability`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tinybox_core::Result;
use tinybox_core::model::BoxSpec;
use tinybox_sdk::model::{BoxId, SourceKind, WorkspaceSource};

use super::levels::{nonce, quote};
use super::{Kit, Status};

type Verdict = (Status, String);

/// `security.capability` as a v2 `vfs_cap_data`: effective, cap_net_raw permitted.
const FILE_CAPABILITY: &str = "0100000200200000000000000000000000000000";

/// The probe, in a fresh directory `$1` it makes in its working directory.
fn script(dir: &str) -> String {
    format!(
        r#"d={dir}; mkdir "$d" && cd "$d" || {{ echo nodir; echo done; exit 0; }}
{{ b=$(command -v sh); case $b in /*) ;; *) b=/bin/sh;; esac
echo plain > plain && echo made=plain
cp "$b" bin; chown 0:0 bin; chmod 6755 bin; chmod u+s bin; chmod g+s bin
echo x > suid; chmod 4755 suid; echo x > sgid; chmod 2755 sgid
mkdir sgiddir; chmod 2775 sgiddir; mkdir -m 2775 sgiddir2; mkdir -m 6755 setiddir
echo x > owned; chown 0:0 owned; chown 0 owned; chgrp 0 owned
mknod chardev c 1 3; mknod blockdev b 7 0
t() {{ if ! command -v "$1" >/dev/null; then echo "cap=no $1"; elif "$@"; then echo "cap=$1 succeeded"; else echo "cap=$1 refused"; fi; }}
t setcap cap_net_raw+ep bin
t setfattr -n security.capability -v 0x{FILE_CAPABILITY} bin
t python3 -c 'import os, sys; os.setxattr("bin", "security.capability", bytes.fromhex(sys.argv[1]))' {FILE_CAPABILITY}
l="no setuid program in the box"
for s in /usr/bin/su /bin/su /usr/bin/passwd /usr/bin/mount /bin/mount /bin/busybox; do
if [ -u "$s" ]; then if ln "$s" hardlink; then l="made to $s"; else l="refused to $s"; fi; break; fi; done; echo "link=$l"
}} 2>/dev/null; echo done"#
    )
}

/// Kernel: nothing a box writes into a host directory is privileged there
/// (see the module's opening).
pub(super) async fn nothing_privileged(kit: &mut Kit<'_>, id: &BoxId, spec: &BoxSpec) -> Result<Verdict> {
    if let Some(WorkspaceSource::LocalDir { path }) = &spec.source {
        return probe_in(kit, id, path).await;
    }
    if !kit.caps.sources.contains(&SourceKind::LocalDir) {
        let kinds: Vec<String> = kit.caps.sources.iter().map(|s| s.to_string()).collect();
        let accepts = if kinds.is_empty() { "no source kind".to_owned() } else { kinds.join(", ") };
        return Ok((
            Status::Pass,
            format!(
                "trivially: the sandbox cannot bind a host directory (it accepts {accepts}), so nothing a box writes lands among the host's files; nothing else was checked"
            ),
        ));
    }
    let dir =
        super::kit_workspace().map_err(|e| tinybox_core::Error::io("cannot make a workspace for the probe", e))?;
    let box_spec = kit.spec(Some(WorkspaceSource::LocalDir { path: dir.path().to_owned() }));
    let own = match kit.create("create (privilege)", box_spec).await {
        Ok(own) => own,
        Err(e) => {
            return Ok((
                Status::Skipped,
                format!("a box over a host directory, which the sandbox accepts, could not be made: {e}"),
            ));
        }
    };
    let verdict = probe_in(kit, &own, dir.path()).await;
    kit.remove("rm (privilege)", &own).await;
    let (status, detail) = verdict?;
    Ok((status, format!("in a box of its own over {}: {detail}", dir.path().display())))
}

async fn probe_in(kit: &Kit<'_>, id: &BoxId, ws: &Path) -> Result<Verdict> {
    let name = format!("tinybox-kit-priv-{}", nonce());
    let out = super::run(kit.tb, id, &["sh", "-c", &script(&quote(&name))], &[], std::future::pending()).await?;
    let owner = std::fs::metadata(ws)
        .map(|m| (m.uid(), m.gid()))
        .map_err(|e| tinybox_core::Error::io("cannot stat the workspace", e))?;
    let root = ws.join(&name);
    let mut entries = Vec::new();
    walk(&root, Path::new("."), &mut entries);
    let _ = std::fs::remove_dir_all(&root);
    if !out.stdout.lines().any(|l| l.trim() == "done") {
        return Ok((Status::Fail, format!("the probe did not finish ({}): {}", out.status, out.stderr_line())));
    }
    let (status, detail) = privilege_verdict(&out.stdout, &entries, owner);
    Ok((status, format!("{detail} (in {name})")))
}

/// One entry the box wrote, as the host sees it.
#[derive(Debug, Clone)]
struct Entry {
    /// Relative to the probe's directory (`.`).
    name: String,
    mode: u32,
    /// Plain file or directory.
    plain: bool,
    kind: String,
    owner: (u32, u32),
    file_capability: bool,
}

/// Every entry under `path`, itself included, without following links.
fn walk(path: &Path, name: &Path, into: &mut Vec<Entry>) {
    let Ok(m) = std::fs::symlink_metadata(path) else { return };
    let t = m.file_type();
    use std::os::unix::fs::FileTypeExt;
    let kind = match () {
        _ if t.is_file() => "file",
        _ if t.is_dir() => "directory",
        _ if t.is_symlink() => "symbolic link",
        _ if t.is_char_device() => "character device",
        _ if t.is_block_device() => "block device",
        _ if t.is_fifo() => "fifo",
        _ if t.is_socket() => "socket",
        _ => "file of unknown type",
    };
    let shown = name.strip_prefix(".").ok().filter(|n| !n.as_os_str().is_empty()).unwrap_or(name);
    into.push(Entry {
        name: shown.display().to_string(),
        mode: m.mode(),
        plain: t.is_file() || t.is_dir(),
        kind: kind.into(),
        owner: (m.uid(), m.gid()),
        file_capability: has_file_capability(path),
    });
    if t.is_dir()
        && let Ok(children) = std::fs::read_dir(path)
    {
        for child in children.flatten() {
            walk(&child.path(), &name.join(child.file_name()), into);
        }
    }
}

/// Whether `path` (not followed) carries a `security.capability` attribute.
fn has_file_capability(path: &Path) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    let Ok(len) = rustix::fs::llistxattr(path, &mut buf[..]) else { return false };
    buf[..len].split(|b| *b == 0).any(|n| n == b"security.capability")
}

/// The verdict from what the box said it made and what the host found.
fn privilege_verdict(stdout: &str, entries: &[Entry], owner: (u32, u32)) -> Verdict {
    if stdout.lines().any(|l| l.trim() == "nodir") {
        return (Status::Pass, "the box could not make a directory in its workspace: it writes nothing there".into());
    }
    if entries.is_empty() {
        return (Status::Pass, "nothing the box wrote in its workspace reached the host's directory".into());
    }
    let mut wrong = Vec::new();
    for e in entries {
        if e.mode & 0o6000 != 0 {
            let bits = match e.mode & 0o6000 {
                0o6000 => "setuid and setgid",
                0o4000 => "setuid",
                _ => "setgid",
            };
            wrong.push(format!("{} is {bits} (mode {:04o})", e.name, e.mode & 0o7777));
        }
        if !e.plain {
            wrong.push(format!("{} is a {}", e.name, e.kind));
        }
        if e.file_capability {
            wrong.push(format!("{} has a file capability (security.capability)", e.name));
        }
        if e.owner != owner {
            wrong.push(format!(
                "{} is owned by {}:{}, not the workspace's owner {}:{}",
                e.name, e.owner.0, e.owner.1, owner.0, owner.1
            ));
        }
    }
    if !wrong.is_empty() {
        return (Status::Fail, format!("on the host, {}", wrong.join("; ")));
    }
    let caps: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("cap=")).collect();
    let link = stdout.lines().find_map(|l| l.strip_prefix("link=")).unwrap_or("not tried");
    (
        Status::Pass,
        format!(
            "on the host, all {} entries the box wrote (a copy of sh made setuid and setgid, setgid directories, files chowned to 0, device nodes, a file capability: {}; a hard link: {link}) are plain files or directories of the workspace's owner {}:{}, with no set-id bit and no security.capability",
            entries.len(),
            if caps.is_empty() { "not tried".to_owned() } else { caps.join(", ") },
            owner.0,
            owner.1
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, mode: u32) -> Entry {
        Entry { name: name.into(), mode, plain: true, kind: "file".into(), owner: (7, 8), file_capability: false }
    }

    #[test]
    fn only_plain_unprivileged_entries_of_the_owner_pass() {
        let ok = [entry("d", 0o40755), entry("d/bin", 0o100755)];
        let (s, d) = privilege_verdict("cap=no setcap\ndone\n", &ok, (7, 8));
        assert_eq!(s, Status::Pass, "{d}");
        assert!(d.contains("all 2 entries") && d.contains("no setcap"), "{d}");
        let v = |e: Entry| privilege_verdict("done\n", &[ok[0].clone(), e], (7, 8));
        let (s, d) = v(entry("d/bin", 0o106755));
        assert_eq!(s, Status::Fail);
        assert!(d.contains("d/bin is setuid and setgid (mode 6755)"), "{d}");
        assert!(v(entry("d/sgiddir", 0o42775)).1.contains("setgid (mode 2775)"));
        assert_eq!(
            v(Entry { plain: false, kind: "character device".into(), ..entry("d/chardev", 0o20644) }).0,
            Status::Fail
        );
        assert_eq!(v(Entry { file_capability: true, ..entry("d/bin", 0o100755) }).0, Status::Fail);
        let (s, d) = v(Entry { owner: (0, 0), ..entry("d/owned", 0o100644) });
        assert_eq!(s, Status::Fail);
        assert!(d.contains("owned by 0:0, not the workspace's owner 7:8"), "{d}");
    }

    #[test]
    fn a_box_whose_writes_never_arrive_passes_saying_so() {
        assert!(privilege_verdict("done\n", &[], (0, 0)).1.contains("reached the host"));
        assert!(privilege_verdict("nodir\ndone\n", &[], (0, 0)).1.contains("could not make a directory"));
    }

    #[test]
    fn the_host_walk_sees_modes_and_kinds_without_following_links() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("t");
        std::fs::create_dir(&top).unwrap();
        std::fs::write(top.join("f"), "x").unwrap();
        std::fs::set_permissions(top.join("f"), std::fs::Permissions::from_mode(0o2755)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", top.join("l")).unwrap();
        let mut entries = Vec::new();
        walk(&top, Path::new("."), &mut entries);
        let mut names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        names.sort();
        assert_eq!(names, [".", "f", "l"]);
        let link = entries.iter().find(|e| e.name == "l").unwrap();
        assert!(!link.plain && link.kind == "symbolic link");
        let f = entries.iter().find(|e| e.name == "f").unwrap();
        assert_eq!(f.mode & 0o7777, 0o2755);
        let owner = std::fs::metadata(dir.path()).map(|m| (m.uid(), m.gid())).unwrap();
        assert_eq!(privilege_verdict("done\n", &entries, owner).0, Status::Fail);
    }
}
