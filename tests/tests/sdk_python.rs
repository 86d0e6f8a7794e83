//! tinybox's own Python SDK (sdk/python), `pip install`ed from a copy of
//! its directory into a venv under target/, against a live `tinybox serve`
//! making namespace boxes, pointed at it by `tinybox serve env`'s
//! TINYBOX_API_URL and TINYBOX_API_TOKEN only. Its unittest suite
//! (sdk/python/tests/test_sdk.py) checks the box's confinement attributes,
//! exec (exit codes, stdout and stderr, argv without a shell, env, cwd,
//! stdin bytes, output that is not UTF-8), files written and read back
//! with NUL and non-UTF-8 bytes and seen from inside the box, directory
//! lists, output streamed in pieces (the command waits for the test to
//! answer its first piece), refusals raised with the server's status, kind
//! and words, and kill. Here: every one of its tests ran and passed, the
//! installed package (not the source tree) was the one imported, and no
//! box it made is left on the server or in the store.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use tinybox_tests::api::Server;
use tinybox_tests::{have, skip};

const TEST: &str = "sdk_python::the_python_sdk_drives_namespace_boxes_through_tinybox_serve";

fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/python")
}

/// Copies the package's sources (not what a build left in them).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == "__pycache__" || name == "build" || name.ends_with(".egg-info") {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to.join(&*name));
        } else {
            std::fs::copy(entry.path(), to.join(&*name)).unwrap();
        }
    }
}

/// The venv's python with the SDK installed from this tree; `Err` (a
/// reason to skip) when no venv or build backend can be had.
fn sdk_python() -> Result<(PathBuf, PathBuf), String> {
    let target = tinybox_tests::bin_dir().parent().ok_or("no target dir")?.to_path_buf();
    let venv = target.join("sdk-python-venv");
    let python = venv.join("bin/python");
    if !python.is_file() {
        if !have("python3") {
            return Err("no python3 on PATH (apt-get install python3-venv)".into());
        }
        let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().map_err(|e| e.to_string())?;
        if !made.success() {
            return Err("python3 -m venv failed (apt-get install python3-venv)".into());
        }
    }
    // The build backend once (the only thing fetched from PyPI); the SDK
    // itself is pure stdlib and installs with no index.
    let backend = Command::new(&python)
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "setuptools>=70.1"])
        .status()
        .map_err(|e| e.to_string())?;
    if !backend.success() {
        return Err("pip install setuptools failed (PyPI unreachable?)".into());
    }
    let src = target.join("sdk-python-src");
    let _ = std::fs::remove_dir_all(&src);
    copy_tree(&sdk_dir(), &src);
    let out = Command::new(&python)
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-build-isolation"])
        .args(["--no-deps", "--force-reinstall", "--no-index"])
        .arg(&src)
        .output()
        .map_err(|e| e.to_string())?;
    assert!(
        out.status.success(),
        "pip install ./sdk/python failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((python, venv))
}

#[test]
fn the_python_sdk_drives_namespace_boxes_through_tinybox_serve() {
    if !have("bwrap") {
        return skip(TEST, "bwrap is not installed (apt-get install bubblewrap)");
    }
    let (python, venv) = match sdk_python() {
        Ok(p) => p,
        Err(why) => return skip(TEST, &why),
    };
    let server = Server::start(&["--sandbox", "namespace", "--ttl", "20m"]);
    let env = server.cli.cmd(&["serve", "env"]).output().unwrap();
    assert!(env.status.success(), "{}", String::from_utf8_lossy(&env.stderr));
    let cwd = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut c = Command::new(&python);
        c.args(args).current_dir(cwd.path()).env_clear().env("PATH", "/usr/bin:/bin");
        // Exactly what `eval "$(tinybox serve env)"` would set.
        for line in String::from_utf8_lossy(&env.stdout).lines() {
            let (name, value) = line.trim_start_matches("export ").split_once('=').unwrap();
            c.env(name, value);
        }
        c.env("TINYBOX_TEST_SANDBOX", "namespace").output().unwrap()
    };
    let imported = run(&["-c", "import tinybox; print(tinybox.__file__)"]);
    let imported = String::from_utf8_lossy(&imported.stdout).trim().to_owned();
    assert!(Path::new(&imported).starts_with(&venv), "tinybox was imported from {imported:?}, not the venv");

    let suite = sdk_dir().join("tests/test_sdk.py");
    let out = run(&[suite.to_str().unwrap()]);
    let report = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("{report}{}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "the Python SDK's suite failed (its report is above)");
    let written = std::fs::read_to_string(&suite).unwrap().matches("    def test_").count();
    assert!(written >= 8, "read only {written} tests from {}", suite.display());
    assert!(report.contains(&format!("Ran {written} tests")), "not every test ran: {report}");
    assert!(report.trim_end().ends_with("OK") && !report.contains("skipped"), "{report}");

    // From outside: nothing the SDK made is left.
    let (status, listed) = server.json("GET", "/v1/boxes", None);
    assert_eq!((status, listed), (200, json!([])), "the server still lists boxes the suite killed");
    let ls = server.cli.cmd(&["--json", "ls"]).output().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&ls.stdout).unwrap(), json!([]), "no box is left in the store");
}
