//! `tinybox-driver-namespace --overlay-root LOWER UPPER WORK MERGED -- CMD...`:
//! mounts an image box's root and becomes CMD (bwrap).
//!
//! It runs under util-linux's `unshare` ([`unshare_argv`]): a mount
//! namespace of its own whose mounts propagate nowhere, and for a caller
//! who is not root a user namespace of its own too, the caller mapped to
//! its root, so the image's files (the caller's on the host) are root's
//! inside. Then kernel overlayfs, with `userxattr` in a user namespace (the layer's overlay
//! attributes live in `user.overlay.*`, which the caller may write; its
//! whiteouts are 0:0 character devices, which the kernel lets anyone make).
//! Debian 12's bwrap 0.8 has no `--overlay`; docs/adr/0029 says why this.
//! The mount exists only in that namespace: no other process of the host
//! sees the box's root, and nothing is left mounted when the box ends.

use std::ffi::CString;
use std::os::unix::process::CommandExt as _;
use std::process::Command;

use rustix::mount::MountFlags;

/// The `unshare` that [`main`] runs under, for a caller who is `root` or not.
pub fn unshare_argv(root: bool) -> Vec<String> {
    let mut v = vec!["unshare".to_owned()];
    if !root {
        v.extend(["--user".to_owned(), "--map-root-user".to_owned()]);
    }
    v.extend(["--mount".to_owned(), "--propagation".to_owned(), "private".to_owned(), "--".to_owned()]);
    v
}

/// Why overlayfs cannot be given `path`: its options are separated by
/// `,` and its lower layers by `:`, and `\` escapes; a path holding any of
/// them, or a control character, is refused rather than misread.
pub fn refuse(path: &str) -> Option<String> {
    path.chars().find(|c| matches!(c, ',' | ':' | '\\') || c.is_control()).map(|c| {
        format!(
            "the path {path:?} has {c:?}, which overlayfs's mount options cannot carry; keep tinybox's store under a directory without ',', ':' or '\\'"
        )
    })
}

/// The overlay's option string for these layers.
pub fn options(lower: &str, upper: &str, work: &str, userns: bool) -> Result<String, String> {
    for p in [lower, upper, work] {
        if let Some(why) = refuse(p) {
            return Err(why);
        }
    }
    let mut o = format!("lowerdir={lower},upperdir={upper},workdir={work}");
    if userns {
        o.push_str(",userxattr");
    }
    Ok(o)
}

/// Runs the mode; only returns (with the status to exit with) on failure.
pub fn main(args: &[String]) -> i32 {
    let [lower, upper, work, merged, sep, cmd @ ..] = args else {
        eprintln!("tinybox: --overlay-root takes LOWER UPPER WORK MERGED -- CMD...");
        return 2;
    };
    if sep != "--" || cmd.is_empty() {
        eprintln!("tinybox: --overlay-root takes LOWER UPPER WORK MERGED -- CMD...");
        return 2;
    }
    // Root of a user namespace of its own (unshare_argv) unless the host's.
    let userns = std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.split_whitespace().collect::<Vec<_>>() != ["0", "0", "4294967295"])
        .unwrap_or(true);
    let opts = match options(lower, upper, work, userns) {
        Ok(o) => o,
        Err(why) => {
            eprintln!("tinybox: {why}");
            return 125;
        }
    };
    let data = CString::new(opts).expect("refused control characters");
    if let Err(e) = rustix::mount::mount("overlay", merged.as_str(), "overlay", MountFlags::empty(), data.as_c_str()) {
        eprintln!("tinybox: cannot mount the box's root at {merged} (overlayfs over {lower}): {e}");
        return 125;
    }
    let err = Command::new(&cmd[0]).args(&cmd[1..]).exec();
    eprintln!("tinybox: cannot run {}: {err}", cmd[0]);
    126
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_overlayfs_would_misread_is_refused_by_name() {
        for bad in ["/s/a,upperdir=/etc", "/s/a:b", "/s/a\\b", "/s/a\nb"] {
            let e = options(bad, "/u", "/w", true).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        assert_eq!(options("/l", "/u", "/w", true).unwrap(), "lowerdir=/l,upperdir=/u,workdir=/w,userxattr");
        assert_eq!(options("/l", "/u", "/w", false).unwrap(), "lowerdir=/l,upperdir=/u,workdir=/w");
    }
}
