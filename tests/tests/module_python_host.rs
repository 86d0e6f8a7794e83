//! The TinyBus module driven from Python through ctypes
//! (tests/hosts/host.py): the same end-to-end run and bad input as the C
//! host, from a second language and a second allocator.

mod module_support;

use std::collections::BTreeMap;
use std::process::Command;

use module_support::{host_env, library, namespace_available, root, temp};
use serde_json::{Value, json};
use tinybox_tests::skip;

/// The real interpreter behind `python3` (a pyenv shim needs a PATH the
/// host does not get).
fn python(test: &str) -> Option<String> {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output();
    match out {
        Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).trim().to_owned()),
        _ => {
            skip(test, "python3 is not on PATH");
            None
        }
    }
}

#[test]
fn a_python_host_runs_boxes_and_gets_clean_errors() {
    let test = "module_python_host::a_python_host_runs_boxes_and_gets_clean_errors";
    let Some(python) = python(test) else { return };
    let dir = temp();
    let store = dir.path().join("store");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut sandboxes = vec!["passthrough"];
    if namespace_available(test) {
        sandboxes.push("namespace");
    }
    let mut cmd = Command::new(&python);
    cmd.arg(root().join("tests/hosts/host.py")).arg(library()).arg(&store).arg(&work).args(&sandboxes);
    let out = host_env(&mut cmd, &store).output().expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("ALL PASSED"),
        "the Python host failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    let mut results: BTreeMap<String, Value> = BTreeMap::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("RESULT\t") {
            let (tag, json) = rest.split_once('\t').unwrap();
            results.insert(tag.to_owned(), serde_json::from_str(json).unwrap());
        }
    }
    assert_eq!(results["manifest"]["abi_version"], "1");
    for sandbox in &sandboxes {
        let exec = &results[&format!("{sandbox}.exec")];
        assert_eq!(exec["stdout"], "[a b][it's][say \"hi\"][$HOME][*][][tab\there][ünïcødé]\n", "{sandbox}");
        assert_eq!(exec["exit_code"], 3);
        let created = &results[&format!("{sandbox}.create")];
        assert_eq!(created["workspace"]["placement"]["sandbox"], json!(sandbox));
        assert_eq!(results[&format!("{sandbox}.inspect")]["id"], created["id"]);
    }
    for (what, code) in [
        ("NULL method", "invalid_argument"),
        ("NULL params", "invalid_argument"),
        ("invalid UTF-8 method", "invalid_argument"),
        ("bad JSON", "invalid_argument"),
        ("unknown method", "unknown_method"),
        ("invalid box name", "invalid_argument"),
        ("zero pids", "invalid_argument"),
        ("limit passthrough cannot apply", "unsupported"),
    ] {
        assert_eq!(results[&format!("bad.{what}")]["error"]["code"], code, "{what}");
    }
    // Every check the host made is visible in its output.
    let passes = stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    assert_eq!(passes, 19 + 15 * sandboxes.len(), "checks that ran:\n{stdout}");
}
