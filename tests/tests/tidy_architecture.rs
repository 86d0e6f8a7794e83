//! docs/architecture.md keeps up with the code, and the arrows between the
//! rooms point the way it says: every workspace crate has a section of the
//! code map (a `### \`dir/\`` heading), every top-level module of a
//! crate's library or binary (a `mod` in its root file) is named in its
//! crate's section, and each crate depends only on the rooms its kind may
//! stand on — drivers on the sdk and the agent, core on the sdk, egress
//! and the image store, front ends on core and the sdk — whatever floor
//! the document gives it (tidy.rs checks the floors; a front end taking a
//! driver, or a driver the egress crate, stands on a lower floor too).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

fn doc() -> String {
    std::fs::read_to_string(root().join("docs/architecture.md")).expect("read docs/architecture.md")
}

/// A crate's directory relative to the workspace root, as `drivers/ssh`.
fn crate_dir(p: &Value) -> String {
    let manifest = PathBuf::from(p["manifest_path"].as_str().expect("manifest_path"));
    let dir = manifest.parent().expect("a crate directory");
    dir.strip_prefix(root()).unwrap_or(dir).display().to_string()
}

/// The text of the code map's section headed by `` ### `dir/` ``, up to
/// the next heading of the same or a higher level.
fn section<'a>(doc: &'a str, dir: &str) -> Option<&'a str> {
    let heading = format!("### `{dir}/`");
    let start = doc.lines().position(|l| l.starts_with(&heading))?;
    let lines: Vec<&str> = doc.lines().collect();
    let end = (start + 1..lines.len())
        .find(|&i| lines[i].starts_with("## ") || lines[i].starts_with("### "))
        .unwrap_or(lines.len());
    let from = lines[..start].iter().map(|l| l.len() + 1).sum::<usize>();
    let to = lines[..end].iter().map(|l| l.len() + 1).sum::<usize>().min(doc.len());
    Some(&doc[from..to])
}

/// Whether a backticked span of `text` holds `word` whole (`engine/`,
/// `engine`, `engine.rs` and `tinybox_sdk::engine` all hold `engine`).
fn names(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.split('`').skip(1).step_by(2).any(|span| {
        span.match_indices(word).any(|(at, _)| {
            !span[..at].chars().next_back().is_some_and(ident)
                && !span[at + word.len()..].chars().next().is_some_and(ident)
        })
    })
}

/// The file modules a root file declares (`mod x;`, `pub mod x;`,
/// `pub(crate) mod x;`), leaving out test modules (`tests`, `*_tests`, or
/// one under `#[cfg(test)]`).
fn top_level_modules(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut under_test = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[cfg(test)]") {
            under_test = true;
            continue;
        }
        let rest = line.strip_prefix("pub(crate) ").or_else(|| line.strip_prefix("pub ")).unwrap_or(line);
        if let Some(name) = rest.strip_prefix("mod ").and_then(|r| r.strip_suffix(';'))
            && !under_test
            && name != "tests"
            && !name.ends_with("_tests")
        {
            found.push(name.trim().to_owned());
        }
        if !line.starts_with("#[") {
            under_test = false;
        }
    }
    found
}

/// Every library and binary root of a package.
fn roots(p: &Value) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = p["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter(|t| {
            t["kind"]
                .as_array()
                .expect("kind")
                .iter()
                .any(|k| ["lib", "bin", "cdylib", "rlib"].contains(&k.as_str().unwrap_or("")))
        })
        .map(|t| PathBuf::from(t["src_path"].as_str().expect("src_path")))
        .collect();
    roots.sort();
    roots.dedup();
    roots
}

#[test]
fn every_crate_has_a_section_of_the_code_map() {
    let doc = doc();
    let all = tinybox_tests::workspace_packages();
    assert!(all.len() >= 10, "too few workspace packages: {}", all.len());
    let missing: Vec<String> = all
        .iter()
        .map(crate_dir)
        .filter(|dir| section(&doc, dir).is_none())
        .map(|dir| format!("### `{dir}/` (crate ...)"))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's code map has no section for these crates (add one, with its invariants): {missing:#?}"
    );
}

#[test]
fn every_top_level_module_is_named_in_its_crate_s_section() {
    let doc = doc();
    let mut missing = Vec::new();
    let mut seen = 0;
    for p in tinybox_tests::workspace_packages() {
        let dir = crate_dir(&p);
        let Some(text) = section(&doc, &dir) else { continue }; // every_crate_has_a_section_of_the_code_map
        for file in roots(&p) {
            let source = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for module in top_level_modules(&source) {
                seen += 1;
                if !names(text, &module) {
                    let shown = file.strip_prefix(root()).unwrap_or(&file).display().to_string();
                    missing.push(format!("`{module}` ({shown}) in the section `{dir}/`"));
                }
            }
        }
    }
    assert!(seen > 100, "too few top-level modules found: {seen}");
    assert!(
        missing.is_empty(),
        "docs/architecture.md does not name these top-level modules in their crate's section: {missing:#?}"
    );
}

/// The workspace crates a crate of this room may depend on (of any kind:
/// normal, dev or build), or `None` for a room with no rule yet.
fn may_depend_on(dir: &str) -> Option<&'static [&'static str]> {
    Some(match dir {
        // The ground floor stands on nothing of ours.
        "sdk" | "egress" | "image" | "agent" => &[],
        // Drivers talk to core only through the protocol.
        d if d.starts_with("drivers/") => &["tinybox-sdk", "tinybox-agent"],
        "core" => &["tinybox-sdk", "tinybox-egress", "tinybox-image"],
        // Front ends reach everything through core's request API.
        "api" | "module" | "verify" => &["tinybox-core", "tinybox-sdk"],
        "cli" => &["tinybox-core", "tinybox-sdk", "tinybox-verify", "tinybox-api"],
        "tests" => &["tinybox-core", "tinybox-sdk", "tinybox-egress", "tinybox-image", "tinybox-verify", "tinybox-api"],
        _ => return None,
    })
}

fn workspace_deps(p: &Value) -> BTreeSet<String> {
    p["dependencies"]
        .as_array()
        .expect("dependencies")
        .iter()
        .filter(|d| d.get("path").is_some_and(|p| !p.is_null()))
        .map(|d| d["name"].as_str().expect("name").to_owned())
        .collect()
}

#[test]
fn every_arrow_points_the_way_its_room_may_stand() {
    let mut wrong = Vec::new();
    for p in tinybox_tests::workspace_packages() {
        let (name, dir) = (p["name"].as_str().expect("name").to_owned(), crate_dir(&p));
        let Some(allowed) = may_depend_on(&dir) else {
            wrong.push(format!(
                "{name} ({dir}/) is in no room of this test's rules: give it one (tidy_architecture.rs, may_depend_on)"
            ));
            continue;
        };
        for dep in workspace_deps(&p) {
            if !allowed.contains(&dep.as_str()) {
                wrong.push(format!("{name} ({dir}/) depends on {dep}; it may stand on {allowed:?} only"));
            }
        }
    }
    assert!(wrong.is_empty(), "dependency arrows pointing the wrong way (docs/architecture.md, Code map): {wrong:#?}");
}

#[test]
fn the_checks_read_sections_and_module_declarations() {
    let doc = "## Code map\n### `core/` (crate)\nholds `engine/` and `paths.rs`\n### `cli/`\n`args`\n## Next\n";
    let core = section(doc, "core").expect("core's section");
    assert!(names(core, "engine") && names(core, "paths") && !names(core, "args"));
    assert!(section(doc, "sdk").is_none());
    let lib = "//! x\npub mod a;\nmod b;\npub(crate) mod c;\n#[cfg(test)]\nmod d;\n#[cfg(test)]\n#[path = \"x.rs\"]\nmod e;\nmod tests;\nmod f_tests;\nmod inline {\n}\n";
    assert_eq!(top_level_modules(lib), ["a", "b", "c"]);
}
