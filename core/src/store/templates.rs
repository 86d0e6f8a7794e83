//! Templates: named snapshots a new box can start from.
//!
//! They live in `templates.json` beside the box document rather than in it.
//! Adding them to `boxes.json` would change its shape and stop an older
//! tinybox from loading it, orphaning every box; a second file needs no
//! migration and cannot break the first.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::StoreError;
use super::file::{DOC_VERSION, Document, JsonDoc, check_version, legacy_version};
use crate::model::{HostName, SandboxName, SnapshotId, TemplateName};

/// A snapshot saved under a name, with where it can be restored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Template {
    pub name: TemplateName,
    pub snapshot: SnapshotId,
    pub sandbox: SandboxName,
    pub host: HostName,
    /// Seconds since the Unix epoch; `None` when not recorded.
    #[serde(default)]
    pub created_at: Option<u64>,
    /// The host directory the saved box's workspace was bound from, taken
    /// from its store record: a box made from the template binds it again,
    /// even after the saved box is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_dir: Option<PathBuf>,
}

/// `templates.json`: `{"version": 1, "templates": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TemplatesDoc {
    #[serde(default = "legacy_version")]
    version: u32,
    templates: Vec<Template>,
}

impl Default for TemplatesDoc {
    fn default() -> Self {
        TemplatesDoc { version: DOC_VERSION, templates: Vec::new() }
    }
}

impl Document for TemplatesDoc {
    fn check(&self) -> Result<(), String> {
        check_version(self.version)?;
        let mut seen = std::collections::BTreeSet::new();
        match self.templates.iter().find(|t| !seen.insert(&t.name)) {
            Some(dup) => Err(format!("template {} appears twice; template names are unique", dup.name)),
            None => Ok(()),
        }
    }

    fn normalize(&mut self) {
        self.version = DOC_VERSION;
        self.templates.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

/// Templates recorded in `<dir>/templates.json`, locked through
/// `<dir>/templates.lock` so it never contends with the box document.
#[derive(Debug)]
pub struct TemplateStore {
    doc: JsonDoc<TemplatesDoc>,
}

impl TemplateStore {
    /// Templates in `dir`, created (mode 0700) if missing.
    pub fn open(dir: impl Into<PathBuf>) -> Result<TemplateStore, StoreError> {
        Ok(TemplateStore { doc: JsonDoc::open(dir, "templates")? })
    }

    /// Where the document lives.
    pub fn path(&self) -> &Path {
        self.doc.path()
    }

    /// Every template, ordered by name.
    pub fn list(&self) -> Result<Vec<Template>, StoreError> {
        let mut templates = self.doc.read()?.templates;
        templates.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(templates)
    }

    pub fn get(&self, name: &TemplateName) -> Result<Option<Template>, StoreError> {
        Ok(self.doc.read()?.templates.into_iter().find(|t| &t.name == name))
    }

    /// Records `template`, replacing one of the same name; returns the one replaced.
    pub fn save(&self, template: Template) -> Result<Option<Template>, StoreError> {
        self.doc.modify(|doc| match doc.templates.iter_mut().find(|t| t.name == template.name) {
            Some(old) => Ok(Some(std::mem::replace(old, template))),
            None => {
                doc.templates.push(template);
                Ok(None)
            }
        })
    }

    /// Forgets a template (not its snapshot), returning it if it was there.
    pub fn remove(&self, name: &TemplateName) -> Result<Option<Template>, StoreError> {
        self.doc.modify(|doc| {
            let at = doc.templates.iter().position(|t| &t.name == name);
            Ok(at.map(|i| doc.templates.remove(i)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(name: &str) -> Template {
        Template {
            name: TemplateName::new(name).unwrap(),
            snapshot: SnapshotId::new("sha-0123456789ab").unwrap(),
            sandbox: SandboxName::new("docker").unwrap(),
            host: HostName::local(),
            created_at: None,
            workspace_dir: None,
        }
    }

    #[test]
    fn the_document_is_versioned_and_sorted_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let store = TemplateStore::open(tmp.path()).unwrap();
        store.save(template("zeta")).unwrap();
        store.save(template("alpha")).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(store.path()).unwrap()).unwrap();
        assert_eq!(doc["version"], 1);
        assert_eq!(doc["templates"][0]["name"], "alpha");
        assert_eq!(doc["templates"][1]["name"], "zeta");
        assert!(tmp.path().join("templates.lock").exists());
        assert!(!tmp.path().join("boxes.json").exists());
    }

    #[test]
    fn a_template_without_created_at_loads() {
        let tmp = tempfile::tempdir().unwrap();
        let store = TemplateStore::open(tmp.path()).unwrap();
        let text = r#"{"templates": [{"name": "t", "snapshot": "s", "sandbox": "docker", "host": "local"}]}"#;
        std::fs::write(store.path(), text).unwrap();
        let got = store.get(&TemplateName::new("t").unwrap()).unwrap().unwrap();
        assert_eq!(got.created_at, None);
        assert_eq!(got.workspace_dir, None);
    }

    #[test]
    fn a_template_records_its_workspace_directory_only_when_it_has_one() {
        let tmp = tempfile::tempdir().unwrap();
        let store = TemplateStore::open(tmp.path()).unwrap();
        store.save(template("bare")).unwrap();
        store.save(Template { workspace_dir: Some("/home/me/p".into()), ..template("bound") }).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(store.path()).unwrap()).unwrap();
        assert!(doc["templates"][0].get("workspace_dir").is_none());
        assert_eq!(doc["templates"][1]["workspace_dir"], "/home/me/p");
        let got = store.get(&TemplateName::new("bound").unwrap()).unwrap().unwrap();
        assert_eq!(got.workspace_dir.as_deref(), Some(Path::new("/home/me/p")));
    }
}
