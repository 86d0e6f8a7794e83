//! `sandbox.archive` (ADR 0024): a copy into or out of a running box
//! through the daemon's archive path (`docker cp`), the daemon's own tar of
//! the path out, or its extraction of core's tar in.
//!
//! What keeps a box from steering it at this machine's files is the
//! daemon: since 19.03.1 and 18.09.7 (moby #39292, the fix for
//! CVE-2018-15664) it makes and extracts the tar chrooted into the
//! container's root, so a path component the box swaps for a symlink
//! while the copy runs resolves inside the box. The script asks the
//! daemon's version first and declines an older daemon, or an engine that
//! is not Docker's; core then copies through the box (`tar` run in it), as
//! for a sandbox without this feature. What the daemon still does outside
//! the chroot (resolving the path in the container's scope, and `lstat`
//! of the result) can at most give the daemon a host path's metadata,
//! which reaches neither the box nor the copy. The box is not frozen for
//! the copy: freezing it (`docker pause`, the ADR's first plan) was built
//! and dropped — an exec starting while the box froze wedged it on this
//! docker (runc's exec waiting on a frozen process, the shim then refusing
//! to thaw), which only a hand-written cgroup thaw undid.
//!
//! Declined too (nothing moved): a copy in to a box whose user is not
//! root, since `docker cp` writes what it extracts as root where `tar` in
//! the box writes as the box's user (a box bound to a directory runs as
//! that directory's owner, so it is always declined).

use tinybox_sdk::protocol::{ArchiveDirection, ArchiveParams, ArchiveResult, DriverError, RunParams};

use crate::host::Host;
use crate::sandbox::Handle;

/// $1 the container, $2 `in` or `out`, $3 the path in the box. The
/// daemon's version and the container's state are asked at once (two
/// docker round trips in the time of one; the version still decides
/// first), the version into a temporary file unlinked as soon as it is
/// open, so a killed script leaves nothing behind. Exits 0 when the tar
/// moved, 121 no such path, 122 (in) not a directory, 75 and 76 declined
/// (nothing moved), 124 no such container, 125 not running;
/// anything else is docker's failure, said on stderr. For `in`, `go` on
/// stdout says the checks passed and the tar may come (nothing before it
/// reads stdin).
const ARCHIVE: &str = r#"c=$1 dir=$2 path=$3
vf=$(mktemp) && exec 8>"$vf" 9<"$vf" && rm -f "$vf" || { rm -f "$vf"; echo "tinybox: no temporary file for docker's version" >&2; exit 75; }
docker version -f '{{range .Server.Components}}{{.Name}},{{end}} {{.Server.Version}}' </dev/null >&8 2>/dev/null 9<&- & vp=$!
exec 8>&-
info=$(docker container inspect -f '{{.State.Status}} {{.Config.User}}' "$c" </dev/null 2>&1 9<&-); irc=$?
wait "$vp"; vrc=$?; v=$(cat <&9); exec 9<&-
[ "$vrc" -eq 0 ] || { echo "tinybox: docker version failed" >&2; exit 75; }
case ,$v in *,Engine,*) ;; *) echo "tinybox: the daemon is not Docker's engine ($v)" >&2; exit 75 ;; esac
v=${v##* }; major=${v%%.*}; rest=${v#*.}; minor=${rest%%.*}; rest=${rest#*.}; patch=${rest%%[!0-9]*}
case $major$minor in *[!0-9]*|'') echo "tinybox: docker version $v unread" >&2; exit 75 ;; esac
[ "$major" -gt 19 ] || { [ "$major" -eq 19 ] && [ "$minor" -gt 3 ]; } || { [ "$major" -eq 19 ] && [ "$minor" -eq 3 ] && [ "${patch:-0}" -ge 1 ]; } ||
  { [ "$major" -eq 18 ] && [ "$minor" -eq 9 ] && [ "${patch:-0}" -ge 7 ]; } || { echo "tinybox: docker $v archives outside the container's root" >&2; exit 75; }
[ "$irc" -eq 0 ] || {
  case $info in *"No such"*) exit 124 ;; esac
  printf '%s\n' "$info" >&2; exit 1
}
status=${info%% *} user=${info#* }
[ "$status" = running ] || exit 125
if [ "$dir" = in ]; then
  case $user in ''|root|0|0:0|root:root|root:0|0:root) ;; *) echo "tinybox: the box runs as $user and docker cp writes as root" >&2; exit 76 ;; esac
  echo go
  err=$(docker cp - "$c:$path" 2>&1 >/dev/null)
else
  exec 3>&1
  err=$(docker cp "$c:$path" - 2>&1 1>&3 3>&-)
fi
rc=$?
[ "$rc" -eq 0 ] && exit 0
case $err in
  *"must be a directory"*|*"extraction point is not a directory"*) exit 122 ;;
  *"Could not find the file"*|*"No such container:path"*) exit 121 ;;
  *"No such container"*) exit 124 ;;
esac
printf '%s\n' "$err" >&2
exit "$rc"
"#;

/// The archive script's argv for `container`: the container and the path
/// are arguments, never part of the script.
pub fn archive_argv(container: &str, direction: ArchiveDirection, path: &str) -> Vec<String> {
    let dir = match direction {
        ArchiveDirection::In => "in",
        ArchiveDirection::Out => "out",
    };
    ["sh", "-c", ARCHIVE, "sh", container, dir, path].map(str::to_owned).to_vec()
}

/// What the archive script's exit says.
pub fn outcome(
    box_id: &str,
    container: &str,
    code: Option<i32>,
    signal: Option<i32>,
) -> Result<ArchiveResult, DriverError> {
    match (code, signal) {
        (Some(0), _) => Ok(ArchiveResult::Done),
        (Some(121), _) => Ok(ArchiveResult::NoSuchPath),
        (Some(122), _) => Ok(ArchiveResult::NotADirectory),
        (Some(75), _) => Ok(ArchiveResult::Declined {
            reason: "the box's docker daemon is not one whose archive path stays in the container's root".into(),
        }),
        (Some(76), _) => {
            Ok(ArchiveResult::Declined { reason: "docker cp would write as root, not as the box's user".into() })
        }
        (Some(124), _) => Err(DriverError::not_found(format!(
            "box {box_id} is gone: its container {container} no longer exists (removed outside tinybox); \
             `tinybox rm {box_id}` forgets it"
        ))),
        (Some(125), _) => Err(DriverError::failed(format!(
            "box {box_id} cannot be copied to or from: its container {container} is not running"
        ))),
        (Some(c), _) => Err(DriverError::failed(format!("docker cp for box {box_id} failed (status {c})"))),
        (None, s) => Err(DriverError::interrupted(format!(
            "the copy of box {box_id} was stopped (signal {}) before it ended",
            s.unwrap_or(0)
        ))),
    }
}

/// Runs one archive; see the module's documentation.
pub async fn archive(host: &dyn Host, p: ArchiveParams) -> Result<ArchiveResult, DriverError> {
    p.validate().map_err(DriverError::invalid)?;
    let handle = Handle::of(&p.target)?;
    let argv = archive_argv(&handle.container, p.direction, &p.path);
    let status = host.run(RunParams::forwarded(&p.exec_id, argv, p.stdio, None)).await?;
    outcome(p.target.box_id.as_str(), &handle.container, status.code, status.signal)
}

#[cfg(test)]
#[path = "archive_tests.rs"]
mod tests;
