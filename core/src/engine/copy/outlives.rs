//! Whether a copy into a box lands somewhere the box keeps. A sandbox may
//! give each command a fresh view of all but a few paths (a namespace box
//! keeps only `/workspace`: every command gets its own `/tmp`); a copy
//! anywhere else would exit 0 and be gone. Which paths a box keeps is its
//! driver's word for that box (`CreateResult::persistent_paths`, recorded
//! on the box's instance), never a sandbox's name here: a driver that
//! keeps more for a box says so when it makes it.

use super::CopyError;
use crate::model::BoxInfo;

/// Refuses a copy into `box_path` of box `info` when its driver declared
/// the paths it keeps and none holds it. A box without the declaration
/// (older drivers, boxes made before it) keeps everything.
pub(super) fn check(info: &BoxInfo, box_path: &str) -> Result<(), CopyError> {
    let Some(instance) = &info.workspace else { return Ok(()) };
    let Some(keeps) = &instance.persistent_paths else { return Ok(()) };
    let at = absolute(box_path, instance.workdir.as_deref());
    if keeps.iter().any(|k| holds(k, &at)) {
        return Ok(());
    }
    Err(CopyError::NotKept {
        sandbox: instance.placement.sandbox.to_string(),
        box_id: info.id.clone(),
        path: box_path.to_owned(),
        keeps: keeps.clone(),
    })
}

/// `path` in the box as an absolute path with no `.`, `..` or empty
/// component, read as the box reads it before any symlink (a relative path
/// is the working directory's).
fn absolute(path: &str, workdir: Option<&str>) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    let joined = if path.starts_with('/') { path.to_owned() } else { format!("{}/{path}", workdir.unwrap_or("/")) };
    for c in joined.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c.to_owned()),
        }
    }
    parts
}

/// Whether the kept path `kept` is `at` or above it.
fn holds(kept: &str, at: &[String]) -> bool {
    let kept = absolute(kept, None);
    at.len() >= kept.len() && at[..kept.len()] == kept[..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_read_as_the_box_reads_them() {
        let ws = Some("/workspace");
        let keep = |p: &str| holds("/workspace", &absolute(p, ws));
        assert!(keep("/workspace") && keep("/workspace/") && keep("/workspace/a/b") && keep("a/b") && keep("."));
        assert!(keep("/tmp/../workspace/x") && keep("//workspace//x"));
        assert!(!keep("/tmp/x") && !keep("/workspacex") && !keep("/") && !keep("../tmp") && !keep("/workspace/../x"));
        assert!(holds("/", &absolute("/tmp/x", None)));
    }
}
