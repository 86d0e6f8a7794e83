//! Where one box's egress proxy keeps its files: `<store>/egress/<namespace>-<box>/`,
//! found again from the box's record alone, so `rm` stops the proxy and
//! removes the directory even after an interrupted create; and the
//! program that runs there.

use std::path::{Path, PathBuf};

use tinybox_egress::layout;
use tinybox_sdk::model::BoxId;

/// The proxy's (and the relay's) program, found as drivers are.
pub const PROGRAM: &str = "tinybox-egress";
/// The store's directory holding every box's proxy directory.
pub const EGRESS_DIR: &str = "egress";

/// One box's proxy directory. The namespace and the box id are validated
/// names, so the last component is one plain path component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyDir {
    path: PathBuf,
}

impl ProxyDir {
    pub fn of(store_dir: &Path, namespace: &str, box_id: &BoxId) -> ProxyDir {
        ProxyDir { path: store_dir.join(EGRESS_DIR).join(format!("{namespace}-{box_id}")) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn policy(&self) -> PathBuf {
        self.path.join(layout::POLICY)
    }

    pub fn socket(&self) -> PathBuf {
        self.path.join(layout::SOCKET)
    }

    pub fn decisions(&self) -> PathBuf {
        self.path.join(layout::DECISIONS)
    }

    pub fn pid(&self) -> PathBuf {
        self.path.join(layout::PID)
    }

    pub fn stderr(&self) -> PathBuf {
        self.path.join(layout::STDERR)
    }

    pub fn lock(&self) -> PathBuf {
        self.path.join(layout::LOCK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_box_s_directory_comes_from_the_store_its_namespace_and_its_id() {
        let dir = ProxyDir::of(Path::new("/s"), "ns1", &BoxId::new("box-3").unwrap());
        assert_eq!(dir.path(), Path::new("/s/egress/ns1-box-3"));
        assert_eq!(dir.socket(), Path::new("/s/egress/ns1-box-3/box/proxy.sock"), "in what a box may see");
        assert_eq!(dir.policy(), Path::new("/s/egress/ns1-box-3/policy.json"));
        assert_eq!(dir.decisions(), Path::new("/s/egress/ns1-box-3/decisions.jsonl"));
        assert_eq!(dir.pid(), Path::new("/s/egress/ns1-box-3/pid"));
    }
}
