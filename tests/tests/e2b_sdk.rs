//! The official `e2b` Python SDK (from PyPI, in a venv under target/)
//! against `tinybox serve`, pointed at it by its own settings only
//! (`E2B_API_URL`, `E2B_SANDBOX_URL`, `E2B_API_KEY`), on docker boxes of
//! the `base` image (bash and python3): create with metadata, envs and a
//! timeout; commands (stdout, stderr, exit codes, cwd, env, background,
//! list, kill); a terminal (pty: input typed, output read); files (text and bytes, list, exists, make_dir, rename,
//! remove); info, list, set_timeout; a pause the box did not declare and a
//! timeout over the ceiling refused in E2B's shape with tinybox's words;
//! the async client; kill. What the SDK wrote is checked from outside (the
//! CLI's own exec in the same store), and after kill no container is left.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use tinybox_tests::api::{self, Server};
use tinybox_tests::{KillOnDrop, skip};

const TEST: &str = "e2b_sdk::the_official_e2b_sdk_drives_docker_boxes_through_tinybox_serve";

#[test]
fn the_official_e2b_sdk_drives_docker_boxes_through_tinybox_serve() {
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip(TEST, &why);
    }
    let image = api::base_image().expect("the E2B base image");
    let python = match api::e2b_python() {
        Ok(p) => p,
        Err(why) => return skip(TEST, &why),
    };
    let server = Server::start(&["--sandbox", "docker", "--base-image", image, "--ttl", "10m"]);
    let env = server.cli.cmd(&["serve", "env"]).output().unwrap();
    assert!(env.status.success(), "{}", String::from_utf8_lossy(&env.stderr));
    let mut script = Command::new(&python);
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
        (Some("docker"), Some("kernel")),
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

    // From outside: the file the SDK wrote is in the box, and the box is
    // a docker container of this store's namespace.
    let cat = server
        .cli
        .cmd(&["exec", &id, "--", "cat", "/tmp/e2b/dir/hello.txt"])
        .env("TINYBOX_DRIVER_PATH", tinybox_tests::bin_dir())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&cat.stdout), "hello file", "{}", String::from_utf8_lossy(&cat.stderr));
    let inspect = server.cli.cmd(&["--json", "inspect", &id]).output().unwrap();
    let view: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let namespace = view["spec"]["namespace"].as_str().unwrap().to_owned();
    let containers = || {
        let filters = [format!("label=tinybox.namespace={namespace}"), format!("label=tinybox.box={id}")];
        tinybox_tests::docker::docker_ok(&["ps", "-aq", "--filter", &filters[0], "--filter", &filters[1]])
    };
    assert!(!containers().is_empty(), "no container for {id} in namespace {namespace}");
    writeln!(stdin, "go").unwrap();
    let last = lines.next().expect("the session ended before kill").unwrap();
    let after: Value = serde_json::from_str(&last).unwrap();
    assert_eq!((after["killed"].clone(), after["listed_after"].clone()), (json!(true), json!([])), "{after}");
    let during = after["running_when_killed"].as_str().unwrap_or_default();
    assert!(during.contains("killed"), "a command running when its sandbox is killed hears so: {after}");
    drop(child);
    assert_eq!(containers(), "", "the killed sandbox's container is gone");
    let ls = server.cli.cmd(&["--json", "ls"]).output().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&ls.stdout).unwrap(), json!([]), "no box is left in the store");
}
