//! The host check every namespace create starts with (`PROBE`), and what
//! its exit code means: each missing part named, with what to do.

use tinybox_sdk::capture::Captured;
use tinybox_sdk::protocol::{DriverError, EgressEndpoint};

/// Checks the host can run boxes and makes the workspace when none was
/// given: at `$4`, the box's own place (a leftover of an earlier box of
/// that id in this store is cleared first), or, with no such place, a
/// `mktemp` directory. A root caller over a workspace someone else owns runs bwrap as
/// that owner, so the checks run as the owner too. Prints the owner to run
/// as (or an empty line), the machine, and the workspace path, in that
/// order. Exit codes name what is missing.
pub const PROBE: &str = r#"
ws="$1"
if [ -z "$ws" ] && [ -n "$4" ]; then
    ws="$4"
    mkdir -p -- "${ws%/*}" && rm -rf -- "$ws" && mkdir -m 700 -- "$ws" || exit 10
    ws=$(cd -- "$ws" && pwd -P) || exit 10
fi
if [ -z "$ws" ]; then ws=$(mktemp -d "${TMPDIR:-/tmp}/tinybox-$2.XXXXXX") || exit 3; fi
[ -d "$ws" ] || exit 3
command -v bwrap >/dev/null 2>&1 || exit 4
runas=
if [ "$(id -u)" = 0 ]; then
    owner=$(stat -c %u:%g -- "$ws") || exit 3
    if [ "${owner%%:*}" != 0 ]; then
        command -v setpriv >/dev/null 2>&1 || exit 8
        runas=$owner
    fi
fi
as_owner() {
    if [ -n "$runas" ]; then setpriv --reuid="${runas%%:*}" --regid="${runas#*:}" --clear-groups -- "$@"; else "$@"; fi
}
# A root of what a box binds (bwrap.rs), never `/`: bwrap copies every
# mount beneath a bound directory and remounts each, and under `/` those
# include docker's container roots, which come and go meanwhile.
in_box_root() {
    as_owner bwrap --unshare-user --unshare-pid --ro-bind /usr /usr \
        --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 "$@"
}
in_box_root true || exit 5
in_box_root --ro-bind "$ws" /tmp true || exit 9
if [ "$3" = egress ]; then
    command -v slirp4netns >/dev/null 2>&1 || exit 6
    command -v unshare >/dev/null 2>&1 || exit 6
    command -v setpriv >/dev/null 2>&1 || exit 6
    sbin=/usr/sbin:/sbin:/usr/bin:/bin
    { PATH=$sbin command -v iptables-nft-restore || PATH=$sbin command -v iptables-restore; } >/dev/null 2>&1 || exit 12
    { PATH=$sbin command -v ip6tables-nft-restore || PATH=$sbin command -v ip6tables-restore; } >/dev/null 2>&1 || exit 12
    # The fence must go up where the box's does: in a namespace of this user's own.
    as_owner sh -c 'ipt=$(PATH=$1 command -v iptables-nft-restore || PATH=$1 command -v iptables-restore)
        printf "*filter\nCOMMIT\n" | XTABLES_LOCKFILE=$(mktemp -u) unshare --user --map-current-user --net --keep-caps -- "$ipt"' \
        tinybox-fence-check "$sbin" >/dev/null 2>&1 || exit 13
    as_owner sh -c '[ -r /dev/net/tun ] && [ -w /dev/net/tun ]' || exit 7
fi
if [ "$3" = allowlist ]; then
    as_owner sh -c '[ -x "$1" ] && [ -S "$2" ] && [ -w "$2" ]' tinybox-egress-check "$5" "$6" || exit 11
fi
printf '%s\n%s\n%s' "$runas" "$(uname -m)" "$ws"
"#;

/// The probe's (runas, machine, workspace), or the error its exit code
/// names. `given` is the caller's directory, `own` the box's own place.
pub fn read(
    out: &Captured,
    given: Option<&str>,
    own: Option<&str>,
    endpoint: Option<&EgressEndpoint>,
) -> Result<(String, String, String), DriverError> {
    if let (Some(5 | 9), Some(mount)) = (out.status.code, submount_named(&out.stderr_text())) {
        return Err(DriverError::failed(format!(
            "the host check's bwrap failed on {mount}, a mount beneath a directory it bound that changed meanwhile \
             (docker's container roots come and go so), not a refusal of the host's: try again ({})",
            out.stderr_text().trim()
        )));
    }
    match out.status.code {
        Some(0) => {
            let text = out.stdout_text();
            let mut parts = text.splitn(3, '\n');
            let (runas, machine, ws) = (parts.next(), parts.next(), parts.next());
            match (runas, machine, ws) {
                (Some(r), Some(m), Some(w)) if !w.is_empty() => Ok((r.to_owned(), m.to_owned(), w.to_owned())),
                _ => Err(DriverError::failed(format!(
                    "the host check printed {text:?}, not runas, machine and workspace"
                ))),
            }
        }
        Some(3) => Err(DriverError::invalid(format!(
            "workspace directory {} does not exist on the host",
            given.unwrap_or("(temporary)")
        ))),
        Some(4) => Err(DriverError::unavailable("bwrap is not installed on the host; install the bubblewrap package")),
        Some(5) => Err(DriverError::unavailable(format!(
            "the kernel or an AppArmor policy forbids unprivileged user namespaces on the host ({})",
            out.stderr_text()
        ))),
        Some(6) => Err(DriverError::unavailable(
            "egress needs slirp4netns, unshare and setpriv on the host; install the slirp4netns and util-linux packages",
        )),
        Some(13) => Err(DriverError::unavailable(
            "egress needs netfilter in an unprivileged network namespace for its fence, and iptables-restore failed there; the host's kernel or its policy forbids it",
        )),
        Some(12) => Err(DriverError::unavailable(
            "egress needs iptables and ip6tables on the host for its fence (no host, no private ranges); install the iptables package",
        )),
        Some(7) => Err(DriverError::unavailable(
            "egress needs read-write access to /dev/net/tun, which the host denies to this user (Debian's udev makes it 0666)",
        )),
        Some(8) => Err(DriverError::unavailable(
            "a root caller's box runs as its workspace's owner through setpriv, which the host lacks; install util-linux",
        )),
        Some(10) => Err(DriverError::failed(format!(
            "cannot make the box's workspace {} on the host: {}",
            own.unwrap_or("(none)"),
            out.stderr_text().trim()
        ))),
        Some(11) => Err(DriverError::unavailable(format!(
            "the user the box's bwrap runs as cannot reach the egress proxy's socket {} or its relay {}; a root caller's box runs as its workspace's owner, who cannot enter the store: give an allowlist box a workspace the caller owns",
            endpoint.map(|e| e.socket.display().to_string()).unwrap_or_default(),
            endpoint.map(|e| e.relay.display().to_string()).unwrap_or_default(),
        ))),
        Some(9) => Err(DriverError::invalid(format!(
            "the owner of workspace {} cannot reach it, and a root caller's box runs as that owner; choose a directory its owner can open, or one root owns",
            given.unwrap_or("(temporary)")
        ))),
        _ => Err(DriverError::failed(format!("the host check failed ({}): {}", out.status, out.stderr_text()))),
    }
}

/// Where the probe's bwraps bind something in their new root (`/newroot`
/// to bwrap): the root itself and PROBE's `in_box_root`.
const BOUND: [&str; 6] = ["", "usr", "bin", "lib", "lib64", "tmp"];

/// The mount a bwrap failure names under its new root when it is none
/// the probe bound, as the host path: a mount beneath a bound directory,
/// which bwrap copies and remounts one by one, and which vanished or
/// changed in between. That is no refusal of user namespaces, nor a
/// workspace its owner cannot reach.
pub fn submount_named(stderr: &str) -> Option<String> {
    stderr.match_indices("/newroot/").find_map(|(at, m)| {
        let rest = &stderr[at + m.len()..];
        let end = rest.find(['"', '\'', ':', ' ', '\n']).unwrap_or(rest.len());
        let path = rest[..end].trim_end_matches('/');
        (!BOUND.contains(&path)).then(|| format!("/{path}"))
    })
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
