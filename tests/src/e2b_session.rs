//! The official `e2b` Python SDK's session (tests/tests/e2b_sdk/session.py)
//! against a running `tinybox serve`, pointed at it by its own settings
//! only (`E2B_API_URL`, `E2B_SANDBOX_URL`, `E2B_API_KEY`), with every
//! check that holds on any sandbox: commands, a terminal, files, info,
//! list, set_timeout, refusals in E2B's shape, the async client, kill. The
//! sandbox's own checks from outside (its container, its processes) are
//! the caller's, while the box still runs.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::KillOnDrop;
use crate::api::Server;

/// What the session's box must say it is.
pub struct Expect<'a> {
    pub sandbox: &'a str,
    pub isolation: &'a str,
}

/// Runs the session with `python` (the venv's), checks what it saw, calls
/// `outside(id)` while the box runs, then lets it kill the box and checks
/// the store is empty.
pub fn drive(server: &Server, python: &Path, expect: &Expect<'_>, outside: &dyn Fn(&str)) {
    let env = server.cli.cmd(&["serve", "env"]).output().unwrap();
    assert!(env.status.success(), "{}", String::from_utf8_lossy(&env.stderr));
    let mut script = Command::new(python);
    script.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2b_sdk/session.py"));
    script.env_clear().env("PATH", "/usr/bin:/bin");
    // Exactly what `eval "$(tinybox serve env)"` would set.
    for line in String::from_utf8_lossy(&env.stdout).lines() {
        let (name, value) = line.trim_start_matches("export ").split_once('=').unwrap();
        script.env(name, value);
    }
    let mut child = script.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let child = KillOnDrop(child);
    let first = lines.next().expect("the session printed nothing (its traceback is above)").unwrap();
    let seen: Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("not JSON: {first}: {e}"));
    let id = seen["id"].as_str().unwrap().to_owned();

    assert_eq!(seen["echo"], json!(["hi\n", "", 0]), "{seen}");
    assert_eq!(seen["env_python"], json!(["hello\n42\n", "oops\n", 0]), "{seen}");
    assert_eq!(seen["exit3"], json!([3, "before\n"]), "{seen}");
    assert_eq!(seen["cwd"], json!("/tmp\n"));
    assert_eq!(seen["read"], json!("hello file"));
    assert_eq!(seen["gzip_read"], json!("sent gzipped"), "a gzipped upload lands unpacked");
    assert_eq!(seen["bytes_roundtrip"], json!(true));
    assert_eq!(seen["list"], json!(["hello.txt"]));
    assert_eq!(seen["exists"], json!([true, false]));
    assert_eq!(seen["make_dir"], json!([true, false]), "a second make_dir says it existed");
    assert_eq!(seen["renamed"], json!("/tmp/made/blob.bin"));
    assert_eq!(seen["removed"], json!(false));
    assert!(seen["read_missing"].as_str().is_some_and(|e| e.contains("/tmp/e2b/none")), "{seen}");
    assert_eq!(
        (seen["listed_pid"].clone(), seen["killed_bg"].clone(), seen["after_kill"].clone()),
        (json!(true), json!(true), json!(false)),
        "{seen}"
    );
    assert!(seen["bg_end"].is_array() && seen["bg_end"][0] != json!(0), "a killed command ends non-zero: {seen}");
    assert_eq!(
        seen["pty"],
        json!([0, true, true]),
        "a terminal: typed input runs, and the command is on a tty: {seen}"
    );
    // The box's isolation, stated in its metadata beside the caller's own.
    let md = &seen["metadata"];
    assert_eq!(md["owner"], json!("e2b-test"), "{md}");
    assert_eq!(
        (md["tinybox.sandbox"].as_str(), md["tinybox.isolation"].as_str()),
        (Some(expect.sandbox), Some(expect.isolation)),
        "{md}"
    );
    assert_eq!(seen["state"], json!("running"));
    assert!(seen["listed"].as_array().unwrap().contains(&json!(id)), "{seen}");
    assert_eq!(seen["filtered"], json!([[id], []]), "the list filters on metadata");
    let pause = seen["pause"].as_str().unwrap_or_default();
    assert!(pause.contains("tinybox:") && pause.contains("ephemeral"), "pause is core's refusal: {pause}");
    let over = seen["over_ceiling"].as_str().unwrap_or_default();
    assert!(over.contains("ceiling"), "a timeout over the ceiling is refused: {over}");
    assert_eq!(seen["running"], json!(true));
    assert_eq!(seen["async"], json!(["async\n", "async file"]));

    // From outside: the file the SDK wrote is in the box.
    let cat = server
        .cli
        .cmd(&["exec", &id, "--", "cat", "/tmp/e2b/dir/hello.txt"])
        .env("TINYBOX_DRIVER_PATH", crate::bin_dir())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&cat.stdout), "hello file", "{}", String::from_utf8_lossy(&cat.stderr));
    outside(&id);
    writeln!(stdin, "go").unwrap();
    let last = lines.next().expect("the session ended before kill").unwrap();
    let after: Value = serde_json::from_str(&last).unwrap();
    assert_eq!((after["killed"].clone(), after["listed_after"].clone()), (json!(true), json!([])), "{after}");
    let during = after["running_when_killed"].as_str().unwrap_or_default();
    assert!(during.contains("killed"), "a command running when its sandbox is killed hears so: {after}");
    drop(child);
    let ls = server.cli.cmd(&["--json", "ls"]).output().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&ls.stdout).unwrap(), json!([]), "no box is left in the store");
}
