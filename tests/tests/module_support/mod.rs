//! What the module suites share: the built library, the C host compiled
//! once per suite, and the environment a foreign host runs with.

#![allow(dead_code)] // each suite uses its own part of this

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub use tinybox_tests::module::{host_env, library, root};

/// The C host, compiled with the system `cc` into `dir`; `None` (with a
/// visible skip) when there is no compiler.
pub fn c_host(test: &str, dir: &Path) -> Option<PathBuf> {
    if !tinybox_tests::have("cc") {
        tinybox_tests::skip(test, "no C compiler (cc) on PATH; apt-get install gcc");
        return None;
    }
    let exe = dir.join("host");
    let out = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(root().join("tests/hosts/host.c"))
        .args(["-ldl", "-lpthread"])
        .output()
        .expect("run cc");
    assert!(out.status.success(), "cc tests/hosts/host.c failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(exe)
}

/// Runs the C host with `args` after the library path.
pub fn run_c_host(exe: &Path, store: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.arg(library()).args(args);
    host_env(&mut cmd, store).output().expect("run the C host")
}

/// The host's "TAG<TAB>JSON" lines, every value of each tag in order.
pub fn tagged(stdout: &[u8]) -> BTreeMap<String, Vec<Value>> {
    let mut all: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for line in String::from_utf8_lossy(stdout).lines() {
        let Some((tag, json)) = line.split_once('\t') else { continue };
        let value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{tag}: not JSON ({e}): {json}"));
        all.entry(tag.to_owned()).or_default().push(value);
    }
    all
}

/// The one value of `tag`.
pub fn one<'a>(all: &'a BTreeMap<String, Vec<Value>>, tag: &str) -> &'a Value {
    let values = all.get(tag).unwrap_or_else(|| panic!("no {tag} result in {all:?}"));
    assert_eq!(values.len(), 1, "{tag}: {values:?}");
    &values[0]
}

/// Whether the namespace sandbox can be tried here; prints the skip when not.
pub fn namespace_available(test: &str) -> bool {
    if tinybox_tests::have("bwrap") {
        return true;
    }
    tinybox_tests::skip(&format!("{test} (namespace)"), "bwrap is not installed (apt-get install bubblewrap)");
    false
}

/// A fresh directory with a path any JSON string holds unescaped.
pub fn temp() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = dir.path().to_str().expect("UTF-8 temp path");
    assert!(!s.contains(['"', '\\']), "{s}");
    dir
}

/// A foreign host (Python, ctypes) running the module's calls given on
/// argv as JSON `[[method, params], ...]`; "$id" and "$exec" in a string
/// param are the last `id` and `exec` a result returned. One result per line.
const PYTHON_CALLS: &str = r#"
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.tinybox_call.restype = ctypes.c_void_p
lib.tinybox_call.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
lib.tinybox_free.argtypes = [ctypes.c_void_p]
seen = {}
for method, params in json.loads(sys.argv[3]):
    params = {k: (seen.get(v[1:], v) if isinstance(v, str) and v.startswith('$') else v) for k, v in params.items()}
    params['store'] = sys.argv[2]
    r = lib.tinybox_call(method.encode(), json.dumps(params).encode())
    out = json.loads(ctypes.string_at(r).decode())
    lib.tinybox_free(r)
    for k in ('id', 'exec'):
        if isinstance(out.get('ok'), dict) and k in out['ok']:
            seen[k] = out['ok'][k]
    print(json.dumps(out), flush=True)
"#;

/// Runs `calls` (`[[method, params], ...]`, see [`PYTHON_CALLS`]) through
/// the module in a Python host on `store`: one result per call.
pub fn python_calls(store: &Path, calls: &Value) -> Vec<Value> {
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(PYTHON_CALLS).arg(library()).arg(store).arg(calls.to_string());
    let out = host_env(&mut cmd, store).output().unwrap();
    assert!(out.status.success(), "the Python host failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}
