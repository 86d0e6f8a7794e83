//! docs/specs/http-api.yml lists exactly the `/v1` routes the router serves.

use std::collections::BTreeSet;

/// (method, path) of every operation in the document: a path is a line
/// `  /v1/...:` under `paths:`, an operation a `    METHOD:` under it.
fn documented(yaml: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut in_paths = false;
    let mut path: Option<String> = None;
    for line in yaml.lines() {
        if line == "paths:" {
            in_paths = true;
            continue;
        }
        if !in_paths {
            continue;
        }
        if let Some(p) = line.strip_prefix("  /").and_then(|l| l.strip_suffix(':')) {
            path = Some(format!("/{p}"));
        } else if let (Some(p), Some(m)) = (&path, line.strip_prefix("    ").and_then(|l| l.strip_suffix(':')))
            && ["get", "post", "put", "delete", "patch"].contains(&m)
        {
            out.insert((m.to_owned(), p.clone()));
        }
    }
    out
}

#[test]
fn the_openapi_document_lists_exactly_the_served_routes() {
    let yaml = include_str!("../../docs/specs/http-api.yml");
    let served: BTreeSet<(String, String)> =
        crate::ROUTES.iter().map(|(m, p)| ((*m).to_owned(), (*p).to_owned())).collect();
    let doc = documented(yaml);
    assert!(doc.len() >= 10, "too few operations read from the document: {doc:?}");
    assert_eq!(doc, served, "docs/specs/http-api.yml and tinybox_api::ROUTES differ");
}

#[test]
fn the_reader_finds_operations_under_paths_only() {
    let yaml = "components:\n  /x:\n    get:\npaths:\n  /v1/a/{id}:\n    parameters: []\n    get:\n    post:\n";
    let got = documented(yaml);
    assert_eq!(got, BTreeSet::from([("get".into(), "/v1/a/{id}".into()), ("post".into(), "/v1/a/{id}".into())]));
}
