//! The whole-document writer's temporary files, seen through one document.

use super::*;
use crate::store::TemplateStore;

#[test]
fn a_document_s_stale_temporary_files_are_cleared_by_its_next_write_and_no_other_s() {
    let tmp = tempfile::tempdir().unwrap();
    let templates = TemplateStore::open(tmp.path()).unwrap();
    let stale = tmp.path().join(".templates.json.abc123.tmp");
    let other = tmp.path().join(".hosts.json.abc123.tmp");
    fs::write(&stale, b"{").unwrap();
    fs::write(&other, b"{").unwrap();
    templates.list().unwrap();
    assert!(stale.exists(), "readers leave temporary files alone");
    templates
        .save(crate::store::Template {
            name: crate::model::TemplateName::new("t").unwrap(),
            snapshot: tinybox_sdk::model::SnapshotId::new("s").unwrap(),
            sandbox: crate::model::SandboxName::passthrough(),
            host: crate::model::HostName::local(),
            created_at: None,
            workspace_dir: None,
        })
        .unwrap();
    assert!(!stale.exists());
    assert!(other.exists(), "another document's temporary files are not ours");
}
