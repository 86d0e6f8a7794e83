//! Workspace rules no reviewer should have to check by hand: no driver
//! depends on core, the module and the conformance kit build on core and
//! the sdk only, core takes the egress crate without its proxy, every Rust
//! file opens with a `//!` line saying what it is for, every live test's
//! skip names its test, docs/architecture.md names every crate and it
//! or docs/files.md every source file, and every dependency arrow points
//! down the floors that document gives the crates.
//! Dependencies are read from `cargo metadata` (every Cargo.toml,
//! as cargo itself reads them).

use std::path::{Path, PathBuf};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

fn manifest(p: &Value) -> PathBuf {
    PathBuf::from(p["manifest_path"].as_str().expect("manifest_path"))
}

/// The workspace crates `p` depends on (its path dependencies): of every
/// kind, or only normal ones (not dev or build).
fn our_deps(p: &Value, normal_only: bool) -> Vec<String> {
    let mut deps: Vec<String> = p["dependencies"]
        .as_array()
        .expect("dependencies")
        .iter()
        .filter(|d| d.get("path").is_some_and(|p| !p.is_null()))
        .filter(|d| !normal_only || d["kind"].is_null())
        .map(|d| d["name"].as_str().expect("name").to_owned())
        .collect();
    deps.sort();
    deps.dedup();
    deps
}

fn package<'a>(all: &'a [Value], name: &str) -> &'a Value {
    all.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no package {name} in the workspace"))
}

#[test]
fn no_driver_depends_on_core() {
    let all = tinybox_tests::workspace_packages();
    let drivers = root().join("drivers");
    let under: Vec<&Value> = all.iter().filter(|p| manifest(p).starts_with(&drivers)).collect();
    assert!(under.len() >= 5, "the drivers' manifests were not found: {under:?}");
    for p in under {
        let deps = our_deps(p, false);
        assert!(
            !deps.iter().any(|d| d == "tinybox-core"),
            "{} ({}) depends on tinybox-core; a driver talks to core only through the protocol in tinybox-sdk",
            p["name"],
            manifest(p).display()
        );
    }
}

/// The image store is core's: a driver gets a prepared root filesystem
/// through the protocol, never by reading the store; and the crate
/// stands on no other workspace crate (ADR 0028).
#[test]
fn the_image_store_stands_alone_and_no_driver_takes_it() {
    let all = tinybox_tests::workspace_packages();
    let image = package(&all, "tinybox-image");
    assert!(our_deps(image, false).is_empty(), "tinybox-image depends on {:?}", our_deps(image, false));
    let drivers = root().join("drivers");
    for p in all.iter().filter(|p| manifest(p).starts_with(&drivers)) {
        assert!(!our_deps(p, false).iter().any(|d| d == "tinybox-image"), "{} depends on tinybox-image", p["name"]);
    }
}

#[test]
fn the_module_and_the_kit_build_on_core_and_the_sdk_only() {
    let all = tinybox_tests::workspace_packages();
    for name in ["tinybox-module", "tinybox-verify"] {
        assert_eq!(
            our_deps(package(&all, name), true),
            ["tinybox-core", "tinybox-sdk"],
            "{name}'s workspace dependencies"
        );
    }
    for name in ["tinybox-core", "tinybox-sdk"] {
        let deps = our_deps(package(&all, name), false);
        assert!(!deps.iter().any(|d| d == "tinybox-verify"), "{name} depends on the kit: {deps:?}");
    }
}

/// Core (and through it the module and the kit) links the egress crate's
/// allowlist parser and log reader only: the proxy, its resolver and its
/// TLS parser run in the `tinybox-egress` program, never in a caller's
/// process.
#[test]
fn core_takes_the_egress_crate_without_its_proxy() {
    let all = tinybox_tests::workspace_packages();
    for name in ["tinybox-core", "tinybox-sdk", "tinybox-module", "tinybox-verify", "tinybox-cli"] {
        let p = package(&all, name);
        for dep in p["dependencies"].as_array().expect("dependencies") {
            if dep["name"] != "tinybox-egress" || !dep["kind"].is_null() {
                continue;
            }
            assert_eq!(
                dep["uses_default_features"], false,
                "{name} takes tinybox-egress with its default (proxy) feature"
            );
            assert_eq!(dep["features"], serde_json::json!([]), "{name} turns on tinybox-egress features");
        }
    }
    let core = package(&all, "tinybox-core");
    assert!(
        our_deps(core, true).iter().any(|d| d == "tinybox-egress"),
        "core parses allowlists with the proxy's own parser"
    );
}

/// Every `.rs` file under `dir`, skipping build output and hidden directories.
fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            rust_files(&path, into);
        } else if name.ends_with(".rs") {
            into.push(path);
        }
    }
}

#[test]
fn every_rust_file_opens_with_a_doc_line() {
    let mut files = Vec::new();
    rust_files(&root(), &mut files);
    assert!(files.len() > 50, "too few Rust files found under {}: {}", root().display(), files.len());
    let missing: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            !text.lines().next().is_some_and(|l| l.starts_with("//!"))
        })
        .map(|f| f.strip_prefix(root()).unwrap_or(f).display().to_string())
        .collect();
    assert!(missing.is_empty(), "these files do not open with a `//!` line saying what they are for: {missing:#?}");
}

/// Whether `text` holds `word` whole: not inside a longer identifier.
fn holds_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// The code map names every crate by its directory, and it or the file
/// map (docs/files.md) every source file (by its name inside backticks, as `peer.rs`, `peer` or a verb such as
/// `tinybox daemon`), so a new file cannot land without a word on where
/// it belongs. `main.rs`, `lib.rs`, `mod.rs` and test files are named by
/// their crate or module.
#[test]
fn the_architecture_document_names_every_crate_and_source_file() {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).expect("read docs/architecture.md");
    // The code map names each crate's rooms; the file map beside it
    // (docs/files.md) names every file.
    let files = std::fs::read_to_string(root().join("docs/files.md")).expect("read docs/files.md");
    let both = format!("{doc}\n{files}");
    let spans: Vec<String> = both.split('`').skip(1).step_by(2).map(str::to_lowercase).collect();
    let mut unnamed = Vec::new();
    let all = tinybox_tests::workspace_packages();
    assert!(all.len() >= 10, "too few workspace packages: {}", all.len());
    for p in &all {
        let dir = manifest(p).parent().expect("a crate directory").to_path_buf();
        let rel = dir.strip_prefix(root()).unwrap_or(&dir).display().to_string();
        if !doc.contains(&format!("`{rel}/`")) {
            unnamed.push(format!("the crate directory `{rel}/`"));
        }
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        for f in files {
            let stem = f.file_stem().expect("a file name").to_string_lossy().to_lowercase();
            if ["main", "lib", "mod", "tests"].contains(&stem.as_str()) || stem.ends_with("_tests") {
                continue;
            }
            if !spans.iter().any(|s| holds_word(s, &stem)) {
                unnamed.push(f.strip_prefix(root()).unwrap_or(&f).display().to_string());
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "docs/architecture.md and docs/files.md do not name these (add them to the file map, a crate directory to the code map): {unnamed:#?}"
    );
}

/// The module path a test file's tests run under, as libtest names their
/// threads and the skip check reads them: `x.rs` is `x`; `x/y.rs` is
/// `x::y` when `x.rs` takes it by `#[path]`, `x::x::y` when `x.rs` wraps
/// its modules in `mod x { ... }`.
fn test_module(tests: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(tests).expect("under tests/tests").with_extension("");
    let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    match parts.as_slice() {
        [one] => one.clone(),
        [dir, leaf] => {
            let parent = std::fs::read_to_string(tests.join(format!("{dir}.rs"))).unwrap_or_default();
            match parent.contains(&format!("#[path = \"{dir}/{leaf}.rs\"]")) {
                true => format!("{dir}::{leaf}"),
                false => format!("{dir}::{dir}::{leaf}"),
            }
        }
        _ => panic!("a test file nested deeper than one directory: {}", rel.display()),
    }
}

/// Every string in the live suites that names a test of its own binary
/// (`<binary>::...`, as a skip, a `need_*!` or `Principal::all` takes it)
/// names one that exists, with its whole module path: a skip under
/// another name fails `skip`'s own check, so a machine without the part
/// would see a panic instead of `skipped: <reason>`.
#[test]
fn every_skip_names_a_test_of_its_own_file() {
    let tests = root().join("tests/tests");
    let mut files = Vec::new();
    rust_files(&tests, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let module = test_module(&tests, file);
        let binary = module.split("::").next().expect("a binary").to_owned();
        let text = std::fs::read_to_string(file).expect("read a test file");
        for literal in text.split('"').skip(1).step_by(2) {
            let name = literal.split(" (").next().unwrap_or(literal);
            let Some((path, function)) = name.rsplit_once("::") else { continue };
            let is_test_name = path.split("::").next() == Some(binary.as_str())
                && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == ':');
            if !is_test_name {
                continue;
            }
            if path != module || !text.contains(&format!("fn {function}(")) {
                let shown = file.strip_prefix(root()).unwrap_or(file).display();
                wrong.push(format!("{shown}: \"{name}\" (its tests are {module}::<function>)"));
            }
        }
    }
    assert!(wrong.is_empty(), "skip names that are not a test of their file: {wrong:#?}");
}

#[test]
fn a_word_is_held_only_whole() {
    assert!(holds_word("`supervisor/control.rs`", "control"));
    assert!(holds_word("tinybox daemon", "daemon"));
    assert!(!holds_word("`controls`", "control"));
    assert!(!holds_word("leaf_cache", "cache"));
}

/// The floors docs/architecture.md gives the crates (`floor N: a, b`
/// lines): crate name → floor.
fn floors(doc: &str) -> Vec<(String, u32)> {
    let mut floors = Vec::new();
    for line in doc.lines() {
        let Some(rest) = line.trim().strip_prefix("floor ") else { continue };
        let Some((n, names)) = rest.split_once(':') else { continue };
        let Ok(n) = n.trim().parse::<u32>() else { continue };
        floors.extend(names.split(',').map(|c| (c.trim().to_owned(), n)));
    }
    floors
}

/// Every workspace crate is on a floor of the architecture document, once,
/// and each of its workspace dependencies (of every kind) is on a lower
/// floor: a new crate needs its place in the code map, and an arrow that
/// points sideways or up fails. A crate the table lists that does not
/// exist yet (one on its way from another branch) is not checked.
#[test]
fn every_dependency_arrow_points_down_the_architecture_s_floors() {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).expect("read docs/architecture.md");
    let floors = floors(&doc);
    assert!(floors.len() >= 10, "too few crates on the document's floors: {floors:?}");
    let floor_of = |name: &str| {
        let on: Vec<u32> = floors.iter().filter(|(c, _)| c == name).map(|(_, n)| *n).collect();
        match on.as_slice() {
            [n] => Some(*n),
            [] => None,
            _ => panic!("{name} is on more than one floor of docs/architecture.md: {on:?}"),
        }
    };
    let mut wrong = Vec::new();
    for p in tinybox_tests::workspace_packages() {
        let name = p["name"].as_str().expect("name");
        let Some(floor) = floor_of(name) else {
            wrong.push(format!("{name} is on no floor of docs/architecture.md's code map"));
            continue;
        };
        for dep in our_deps(&p, false) {
            match floor_of(&dep) {
                Some(below) if below < floor => {}
                Some(other) => wrong.push(format!("{name} (floor {floor}) depends on {dep} (floor {other})")),
                None => wrong.push(format!("{name} depends on {dep}, which is on no floor")),
            }
        }
    }
    assert!(wrong.is_empty(), "dependency arrows that do not point down the floors: {wrong:#?}");
}

#[test]
fn floors_are_read_from_the_document_s_table() {
    let doc = "x\n    floor 1: a, b\n    floor 0: c\nfloor plan: none\n";
    assert_eq!(floors(doc), [("a".to_owned(), 1), ("b".to_owned(), 1), ("c".to_owned(), 0)]);
}
