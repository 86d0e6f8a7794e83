//! tinybox's own TypeScript SDK (sdk/typescript), compiled with `tsc`
//! (typescript 5 and @types/node 20 installed by npm under target/; the
//! SDK has no runtime dependencies) and run by Node's own test runner
//! against a live `tinybox serve` making namespace boxes, pointed at it by
//! `tinybox serve env`'s TINYBOX_API_URL and TINYBOX_API_TOKEN only. Its
//! suite (sdk/typescript/test/sdk.test.ts) checks what sdk_python.rs's
//! does — confinement attributes, exec, binary-safe files seen from inside
//! the box, directory lists, output streamed in pieces, refusals thrown
//! with the server's status, kind and words, kill — on Node's fetch. Here:
//! the package itself builds (with its declarations), every test of the
//! suite ran and passed, and no box it made is left on the server or in
//! the store.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use tinybox_tests::api::Server;
use tinybox_tests::{have, skip};

const TEST: &str = "sdk_typescript::the_typescript_sdk_drives_namespace_boxes_through_tinybox_serve";

fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/typescript")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The directory whose node_modules has tsc and Node's types, installed
/// on first use; `Err` (a reason to skip) when npm cannot install them.
fn tools(target: &Path) -> Result<PathBuf, String> {
    let dir = target.join("sdk-ts-tools");
    if dir.join("node_modules/.bin/tsc").is_file() && dir.join("node_modules/@types/node").is_dir() {
        return Ok(dir);
    }
    if !have("node") || !have("npm") {
        return Err("no node or npm on PATH (apt-get install nodejs npm)".into());
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    if !dir.join("package.json").is_file() {
        std::fs::write(dir.join("package.json"), "{\"private\": true}\n").map_err(|e| e.to_string())?;
    }
    let out = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "typescript@5", "@types/node@20"])
        .current_dir(&dir)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("npm install typescript failed (npm's registry unreachable?): {}", text(&out)));
    }
    Ok(dir)
}

fn tsc(tools: &Path, project: &str, out_dir: &Path) {
    let _ = std::fs::remove_dir_all(out_dir);
    let out = Command::new(tools.join("node_modules/.bin/tsc"))
        .arg("-p")
        .arg(sdk_dir().join(project))
        .arg("--typeRoots")
        .arg(tools.join("node_modules/@types"))
        .arg("--outDir")
        .arg(out_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "tsc -p sdk/typescript/{project} failed:\n{}", text(&out));
}

#[test]
fn the_typescript_sdk_drives_namespace_boxes_through_tinybox_serve() {
    if !have("bwrap") {
        return skip(TEST, "bwrap is not installed (apt-get install bubblewrap)");
    }
    let target = tinybox_tests::bin_dir().parent().expect("a target dir").to_path_buf();
    let tools = match tools(&target) {
        Ok(t) => t,
        Err(why) => return skip(TEST, &why),
    };
    // The package as published (src/ to dist/ with declarations), and the
    // suite with the sources it imports.
    tsc(&tools, "tsconfig.json", &target.join("sdk-ts-dist"));
    assert!(target.join("sdk-ts-dist/index.d.ts").is_file(), "the package built no declarations");
    let build = target.join("sdk-ts-build");
    tsc(&tools, "tsconfig.test.json", &build);
    // Node reads the compiled files as ES modules, as the package says.
    std::fs::copy(sdk_dir().join("package.json"), build.join("package.json")).unwrap();

    let server = Server::start(&["--sandbox", "namespace", "--ttl", "20m"]);
    let env = server.cli.cmd(&["serve", "env"]).output().unwrap();
    assert!(env.status.success(), "{}", String::from_utf8_lossy(&env.stderr));
    let mut node = Command::new("node");
    node.arg("--test").arg(build.join("test/sdk.test.js")).env_clear().env("PATH", "/usr/bin:/bin");
    // Exactly what `eval "$(tinybox serve env)"` would set.
    for line in String::from_utf8_lossy(&env.stdout).lines() {
        let (name, value) = line.trim_start_matches("export ").split_once('=').unwrap();
        node.env(name, value);
    }
    let out = node.env("TINYBOX_TEST_SANDBOX", "namespace").output().unwrap();
    let report = text(&out);
    eprintln!("{report}");
    assert!(out.status.success(), "the TypeScript SDK's suite failed (its report is above)");
    let source = std::fs::read_to_string(sdk_dir().join("test/sdk.test.ts")).unwrap();
    let written = source.lines().filter(|l| l.trim_start().starts_with("test(")).count();
    assert!(written >= 8, "read only {written} tests from sdk/typescript/test/sdk.test.ts");
    for line in [format!("# pass {written}"), "# fail 0".into(), "# skipped 0".into(), "# todo 0".into()] {
        assert!(report.lines().any(|l| l == line), "no `{line}` in the report: not every test ran and passed");
    }

    // From outside: nothing the SDK made is left.
    let (status, listed) = server.json("GET", "/v1/boxes", None);
    assert_eq!((status, listed), (200, json!([])), "the server still lists boxes the suite killed");
    let ls = server.cli.cmd(&["--json", "ls"]).output().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&ls.stdout).unwrap(), json!([]), "no box is left in the store");
}
