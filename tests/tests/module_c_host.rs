//! The TinyBus module driven by a real foreign host: tests/hosts/host.c,
//! compiled here with the system cc, dlopens the built library and runs
//! boxes through `tinybox_call`. Every result it prints is checked here.

mod module_support;

use std::process::Command;

use module_support::{c_host, host_env, library, namespace_available, one, run_c_host, tagged, temp};
use serde_json::{Value, json};
use tinybox_tests::{Cli, bin_dir};

fn assert_success(what: &str, out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{what}: the C host failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_manifest_is_read_through_dlopen() {
    let dir = temp();
    let Some(host) = c_host("module_c_host::the_manifest_is_read_through_dlopen", dir.path()) else { return };
    let out = run_c_host(&host, dir.path(), &["manifest"]);
    assert_success("manifest", &out);
    let all = tagged(&out.stdout);
    let m = one(&all, "manifest");
    assert_eq!(m["name"], "tinybox");
    assert_eq!(m["abi_version"], "1");
    assert_eq!(m["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(m["untrusted_code"], "out_of_process");
    let caps: Vec<&str> = m["capabilities"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    for claimed in ["box.manage", "process.spawn", "fs.read_write", "threads", "signals"] {
        assert!(caps.contains(&claimed), "{claimed} missing from {caps:?}");
    }
    assert!(m["capabilities"].as_array().unwrap().iter().all(|c| !c["detail"].as_str().unwrap().is_empty()));
    for method in ["create", "exec", "exec.start", "inspect", "ls", "rm", "snapshot", "fork", "stop", "resume"] {
        assert!(m["methods"].as_array().unwrap().contains(&json!(method)), "{method}");
    }
}

/// Create, exec (argv with spaces and quotes, stdin, binary output, the
/// working directory, streaming), inspect, ls, rm — on `sandbox`.
fn end_to_end(test: &str, sandbox: &str, expected_isolation: &str) {
    let dir = temp();
    let Some(host) = c_host(test, dir.path()) else { return };
    let store = dir.path().join("store");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let out = run_c_host(&host, &store, &["e2e", store.to_str().unwrap(), work.to_str().unwrap(), sandbox]);
    assert_success(test, &out);
    let all = tagged(&out.stdout);

    let created = &one(&all, "create")["ok"];
    let id = created["id"].as_str().unwrap();
    assert_eq!(created["workspace"]["placement"], json!({"host": "local", "sandbox": sandbox}));
    assert_eq!(created["workspace"]["isolation"], expected_isolation);
    assert_eq!(created["phase"], "created");

    let r = &one(&all, "exec_argv")["ok"];
    assert_eq!(r["stdout"], "[a b][it's][say \"hi\"][$HOME][*][]\n", "each argument arrives whole, unexpanded");
    assert_eq!(r["stderr"], "to-stderr\n");
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["status"], json!({"code": 3, "signal": null}));
    assert_eq!((r["timed_out"].clone(), r["cancelled"].clone()), (json!(false), json!(false)));
    assert_eq!(r["id"], id);

    assert_eq!(one(&all, "exec_stdin")["ok"]["stdout"], "fed through stdin\n");
    let binary = &one(&all, "exec_binary")["ok"];
    assert_eq!(binary["stdout_base64"], "/wAB", "bytes that are not UTF-8 come back as base64");
    assert!(binary.get("stdout").is_none(), "{binary}");
    let pwd = one(&all, "exec_pwd")["ok"]["stdout"].as_str().unwrap().trim_end().to_owned();
    let expected_pwd = match sandbox {
        "passthrough" => std::fs::canonicalize(&work).unwrap().display().to_string(),
        _ => "/workspace".to_owned(),
    };
    assert_eq!(pwd, expected_pwd);

    let start = &one(&all, "exec_start")["ok"];
    assert_eq!(start["id"], id);
    let reads = &all["exec_read"];
    let joined = |stream: &str| reads.iter().map(|r| r["ok"][stream].as_str().unwrap_or("")).collect::<String>();
    assert_eq!(joined("stdout"), "one\n");
    assert_eq!(joined("stderr"), "two\n");
    let wait = &one(&all, "exec_wait")["ok"];
    assert_eq!(wait["exit_code"], 4);
    assert_eq!((wait["stdout"].clone(), wait["stderr"].clone()), (json!(""), json!("")), "all of it was read");
    assert_eq!(one(&all, "exec_wait_again")["error"]["code"], "not_found", "exec.wait releases the handle");

    let view = &one(&all, "inspect")["ok"];
    assert_eq!(view["id"], id);
    assert!(view["state"].is_string(), "{view}");
    let listed = one(&all, "ls")["ok"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], id);
    assert_eq!(one(&all, "rm")["ok"], json!({"removed": [id], "failed": []}));
    assert_eq!(one(&all, "ls_after")["ok"], json!([]));
}

#[test]
fn a_box_runs_end_to_end_on_passthrough() {
    end_to_end("module_c_host::a_box_runs_end_to_end_on_passthrough", "passthrough", "none");
}

#[test]
fn a_box_runs_end_to_end_on_namespace() {
    let test = "module_c_host::a_box_runs_end_to_end_on_namespace";
    if namespace_available(test) {
        end_to_end(test, "namespace", "kernel");
    }
}

#[test]
fn bad_input_gets_clean_errors_with_stable_codes() {
    let dir = temp();
    let Some(host) = c_host("module_c_host::bad_input_gets_clean_errors_with_stable_codes", dir.path()) else { return };
    let store = dir.path().join("store");
    let out = run_c_host(&host, &store, &["bad", store.to_str().unwrap()]);
    assert_success("bad", &out);
    let all = tagged(&out.stdout);
    let code = |tag: &str| one(&all, tag)["error"]["code"].as_str().unwrap().to_owned();
    let message = |tag: &str| one(&all, tag)["error"]["message"].as_str().unwrap().to_owned();
    for (tag, expected, needle) in [
        ("null_method", "invalid_argument", "method is NULL"),
        ("null_params", "invalid_argument", "params_json is NULL"),
        ("null_both", "invalid_argument", "is NULL"),
        ("utf8_method", "invalid_argument", "not valid UTF-8"),
        ("utf8_params", "invalid_argument", "not valid UTF-8"),
        ("json_truncated", "invalid_argument", "not valid JSON"),
        ("json_not_object", "invalid_argument", "must be a JSON object"),
        ("json_empty", "invalid_argument", "not valid JSON"),
        ("unknown_method", "unknown_method", "no method \"frobnicate\""),
        ("abi_mismatch", "abi_mismatch", "speaks ABI \"1\""),
        ("bad_box_name", "invalid_argument", "contains '/'"),
        ("bad_sandbox_name", "invalid_argument", "contains '/'"),
        ("empty_template_name", "invalid_argument", "name is empty"),
        ("long_name", "invalid_argument", "the limit is 64"),
        ("zero_pids", "invalid_argument", "pids limit 0 is not positive"),
        ("zero_memory", "invalid_argument", "memory limit 0 is not positive"),
        ("zero_cpus", "invalid_argument", "cpu limit 0 is not positive"),
        ("zero_ttl", "invalid_argument", "ttl 0s is not positive"),
        ("unknown_field", "invalid_argument", "unknown field `memroy`"),
        ("unsupported_limit", "unsupported", "does not support"),
        ("no_such_driver", "unavailable", "no driver named nonexistent"),
        ("no_such_box", "not_found", "no box named box-999"),
        ("exec_no_such_box", "not_found", "no box named box-999"),
        ("exec_empty_argv", "invalid_argument", "argument vector is empty"),
        ("exec_no_argv", "invalid_argument", "missing field `argv`"),
        ("exec_zero_timeout", "invalid_argument", "timeout 0s is not positive"),
        ("read_no_such_exec", "not_found", "no exec"),
    ] {
        assert_eq!(code(tag), expected, "{tag}: {}", message(tag));
        assert!(message(tag).contains(needle), "{tag}: {:?} does not say {needle:?}", message(tag));
    }
    assert_eq!(one(&all, "ls_after_bad")["ok"], json!([]), "refused requests leave the store as it was");
}

#[test]
fn eight_threads_at_once_lose_no_box() {
    let dir = temp();
    let Some(host) = c_host("module_c_host::eight_threads_at_once_lose_no_box", dir.path()) else { return };
    let store = dir.path().join("store");
    let (threads, per_thread) = (8, 4);
    let out =
        run_c_host(&host, &store, &["threads", store.to_str().unwrap(), &threads.to_string(), &per_thread.to_string()]);
    assert_success("threads", &out);
    let all = tagged(&out.stdout);
    assert_eq!(one(&all, "threads_failures"), &json!(0));
    let listed = one(&all, "threads_ls")["ok"].as_array().unwrap().clone();
    let ids: std::collections::BTreeSet<&str> = listed.iter().map(|b| b["id"].as_str().unwrap()).collect();
    assert_eq!(listed.len(), threads * per_thread, "every create is listed");
    assert_eq!(ids.len(), threads * per_thread, "no identifier was handed out twice");
    assert_eq!(one(&all, "threads_ls_after")["ok"], json!([]), "every box was removed");
}

/// The bus returns the documents the CLI prints with --json, for the same
/// store: one schema for both front ends.
#[test]
fn bus_results_are_the_cli_json_documents() {
    let dir = temp();
    let Some(host) = c_host("module_c_host::bus_results_are_the_cli_json_documents", dir.path()) else { return };
    let cli = Cli::new();
    let store = cli.home.path().to_str().unwrap().to_owned();
    let call = |method: &str, params: Value| -> Value {
        let out = run_c_host(&host, cli.home.path(), &["call", method, &params.to_string()]);
        assert_success(method, &out);
        one(&tagged(&out.stdout), "call").clone()
    };
    let cli_json = |args: &[&str]| -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let (_, out, err) = cli.run(&all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("tinybox {args:?}: {e}: {out} {err}"))
    };

    let created = call("create", json!({"store": store, "sandbox": "passthrough", "env": {"K": "v"}}));
    let id = created["ok"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["ok"], cli_json(&["ls"])[0], "create's result is the box as `ls --json` shows it");
    assert_eq!(call("ls", json!({"store": store}))["ok"], cli_json(&["ls"]));
    assert_eq!(call("inspect", json!({"store": store, "id": id}))["ok"], cli_json(&["inspect", &id]));
    assert_eq!(call("template.ls", json!({"store": store}))["ok"], cli_json(&["template", "ls"]));
    assert_eq!(call("reap", json!({"store": store}))["ok"], cli_json(&["reap"]));
    assert_eq!(call("autosnapshot", json!({"store": store}))["ok"], cli_json(&["autosnapshot"]));

    // An engine error: the same message, and the CLI's kind beside the bus code.
    let bus = call("snapshot", json!({"store": store, "id": id}));
    let cli_err = cli_json(&["snapshot", &id]);
    assert_eq!(bus["error"]["code"], "unsupported");
    assert_eq!(bus["error"]["kind"], cli_err["error"]["kind"]);
    assert_eq!(bus["error"]["message"], cli_err["error"]["message"]);
    let bus = call("inspect", json!({"store": store, "id": "box-77"}));
    let cli_err = cli_json(&["inspect", "box-77"]);
    assert_eq!(
        (&bus["error"]["kind"], &bus["error"]["message"]),
        (&cli_err["error"]["kind"], &cli_err["error"]["message"])
    );

    // Every verb's refusal on a box that cannot do it: same kind, same message.
    let persistent = call("create", json!({"store": store, "sandbox": "passthrough", "persistent": true}));
    let pid = persistent["ok"]["id"].as_str().unwrap().to_owned();
    assert_eq!(persistent["ok"]["spec"]["lifecycle"], json!({"kind": "persistent", "autosnapshot_secs": 60}));
    for (method, params, args, code) in [
        ("fork", json!({"id": id}), vec!["fork", id.as_str()], "unsupported"),
        ("stop", json!({"id": pid}), vec!["stop", pid.as_str()], "unsupported"),
        ("stop", json!({"id": id}), vec!["stop", id.as_str()], "invalid_argument"),
        ("resume", json!({"id": pid}), vec!["resume", pid.as_str()], "invalid_argument"),
        ("template.save", json!({"name": "t1", "id": id}), vec!["template", "save", "t1", id.as_str()], "unsupported"),
        ("template.rm", json!({"name": "t1"}), vec!["template", "rm", "t1"], "invalid_argument"),
    ] {
        let mut params = params;
        params["store"] = json!(store);
        let bus = call(method, params);
        let cli_err = cli_json(&args);
        assert_eq!(bus["error"]["code"], code, "{method}: {bus}");
        assert_eq!(bus["error"]["kind"], cli_err["error"]["kind"], "{method}");
        assert_eq!(bus["error"]["message"], cli_err["error"]["message"], "{method}");
    }
    assert_eq!(call("rm", json!({"store": store, "id": pid}))["ok"]["removed"], json!([pid]));

    // drivers: the same reports (the library searches its own directory
    // first, the CLI its binary's: here both are the build's).
    let names = |v: &Value| v.as_array().unwrap().iter().map(|r| r["name"].clone()).collect::<Vec<_>>();
    assert_eq!(names(&call("drivers", json!({"store": store}))["ok"]), names(&cli_json(&["drivers"])));

    assert_eq!(call("rm", json!({"store": store, "ids": [id, "box-77"]}))["ok"], {
        json!({"removed": [id], "failed": [{"id": "box-77", "error": "no box named box-77; `tinybox ls` lists the boxes"}]})
    });
    assert_eq!(cli_json(&["ls"]), json!([]));
}

/// Drivers installed beside the library are found with nothing on
/// TINYBOX_DRIVER_PATH or PATH: the library's directory comes first.
#[test]
fn drivers_beside_the_library_are_found() {
    let dir = temp();
    let Some(host) = c_host("module_c_host::drivers_beside_the_library_are_found", dir.path()) else { return };
    // The copy must be a file of its own: /proc/self/maps names a symlink's target.
    let bundle = tempfile::tempdir_in(bin_dir()).unwrap();
    let lib = bundle.path().join("libtinybox_module.so");
    if std::fs::hard_link(library(), &lib).is_err() {
        std::fs::copy(library(), &lib).unwrap();
    }
    std::os::unix::fs::symlink(bin_dir().join("tinybox-driver-local"), bundle.path().join("tinybox-driver-local"))
        .unwrap();
    let store = dir.path().join("store");
    let mut cmd = Command::new(&host);
    cmd.arg(&lib).args(["call", "drivers", &json!({"store": store}).to_string()]);
    host_env(&mut cmd, &store).env("TINYBOX_DRIVER_PATH", "").env("PATH", "/nonexistent");
    let out = cmd.output().unwrap();
    assert_success("drivers", &out);
    let all = tagged(&out.stdout);
    let reports = one(&all, "call")["ok"].as_array().unwrap().clone();
    let local = reports.iter().find(|r| r["name"] == "local").unwrap_or_else(|| panic!("no local in {reports:?}"));
    assert_eq!(local["path"], json!(bundle.path().join("tinybox-driver-local")));
    assert_eq!(local["health"]["ok"], true);

    // And a box runs with it.
    let mut cmd = Command::new(&host);
    let params = json!({"store": store, "sandbox": "passthrough"}).to_string();
    cmd.arg(&lib).args(["call", "create", &params]);
    host_env(&mut cmd, &store).env("TINYBOX_DRIVER_PATH", "").env("PATH", "/nonexistent");
    let out = cmd.output().unwrap();
    assert_success("create", &out);
    let id = one(&tagged(&out.stdout), "call")["ok"]["id"].as_str().unwrap().to_owned();
    let mut cmd = Command::new(&host);
    let params = json!({"store": store, "id": id, "argv": ["/bin/echo", "found"]}).to_string();
    cmd.arg(&lib).args(["call", "exec", &params]);
    host_env(&mut cmd, &store).env("TINYBOX_DRIVER_PATH", "").env("PATH", "/nonexistent");
    let out = cmd.output().unwrap();
    assert_success("exec", &out);
    assert_eq!(one(&tagged(&out.stdout), "call")["ok"]["stdout"], "found\n");
}

/// A driver that dies, before or during a call, is an error result: the C
/// host keeps SIGPIPE's default action, and survives writes to a dead driver.
#[test]
fn dying_drivers_are_errors_not_a_dead_host() {
    let dir = temp();
    let Some(host) = c_host("module_c_host::dying_drivers_are_errors_not_a_dead_host", dir.path()) else { return };
    let drivers = dir.path().join("drivers");
    std::fs::create_dir(&drivers).unwrap();
    for mode in ["exit-early", "garbage", "dies-mid-call", "dies-mid-exec"] {
        tinybox_tests::install_test_driver(&drivers, mode);
    }
    let store = dir.path().join("store");
    let search = std::env::join_paths([drivers.clone(), bin_dir()]).unwrap();
    let call = |method: &str, params: Value| -> Value {
        let mut cmd = Command::new(&host);
        cmd.arg(library()).args(["call", method, &params.to_string()]);
        host_env(&mut cmd, &store).env("TINYBOX_DRIVER_PATH", &search).env("TINYBOX_HANDSHAKE_TIMEOUT_MS", "5000");
        let out = cmd.output().unwrap();
        assert_success(method, &out);
        one(&tagged(&out.stdout), "call").clone()
    };
    for mode in ["exit-early", "garbage", "dies-mid-call"] {
        let r = call("create", json!({"store": store, "sandbox": mode}));
        assert_eq!(r["error"]["code"], "driver_failure", "{mode}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains(mode), "{mode}: {r}");
        assert_eq!(message.contains("`tinybox rm box-0` removes whatever was made"), mode == "dies-mid-call", "{r}");
    }
    let created = call("create", json!({"store": store, "sandbox": "dies-mid-exec"}));
    let id = created["ok"]["id"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
    let r = call("exec", json!({"store": store, "id": id, "argv": ["true"]}));
    assert_eq!(r["error"]["code"], "driver_failure", "{r}");
    let r = call("ls", json!({"store": store}));
    let phases: Vec<(&str, &str)> = r["ok"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["spec"]["workspace"]["sandbox"].as_str().unwrap(), b["phase"].as_str().unwrap()))
        .collect();
    // A refusal at the handshake records nothing; a driver that died during
    // sandbox.create may have made something, so its reservation is kept
    // for `rm` to remove.
    assert_eq!(phases, [("dies-mid-call", "creating"), ("dies-mid-exec", "created")], "{r}");
}

/// The same request gives the same box, the same refusal and the same
/// store files through the CLI and through the bus: both hand core one
/// `CreateRequest` (or `SshHostRequest`), and core decides.
#[test]
fn the_same_requests_give_the_same_results_through_both_front_ends() {
    let dir = temp();
    let test = "module_c_host::the_same_requests_give_the_same_results_through_both_front_ends";
    let Some(host) = c_host(test, dir.path()) else { return };
    // One store per front end, so each allocates the same identifiers.
    let (by_cli, by_bus) = (Cli::new(), Cli::new());
    let bus_store = by_bus.home.path().to_str().unwrap().to_owned();
    let call = |method: &str, mut params: Value| -> Value {
        params["store"] = json!(bus_store);
        let out = run_c_host(&host, by_bus.home.path(), &["call", method, &params.to_string()]);
        assert_success(method, &out);
        one(&tagged(&out.stdout), "call").clone()
    };
    let cli_json = |args: &[&str]| -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let (_, out, err) = by_cli.run(&all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("tinybox {args:?}: {e}: {out} {err}"))
    };
    // What a box is, without the moment it was made or the namespace of
    // its store (each store has its own; checked against config.json below).
    let made = |v: &Value| -> Value {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove("created_at");
        v["spec"].as_object_mut().unwrap().remove("namespace");
        v
    };
    let store_namespace = |cli: &Cli| -> Value {
        let text = std::fs::read_to_string(cli.home.path().join("config.json")).unwrap();
        serde_json::from_str::<Value>(&text).unwrap()["namespace"].clone()
    };

    // A box: flags and fields name the same things and give the same record.
    let cli_box = cli_json(&[
        "create",
        "--sandbox",
        "passthrough",
        "--ttl",
        "90s",
        "--env",
        "A=b",
        "--runner-sandbox",
        "passthrough",
    ]);
    let bus_box = call(
        "create",
        json!({"sandbox": "passthrough", "ttl_secs": 90, "env": {"A": "b"}, "runner_sandbox": "passthrough"}),
    );
    assert_eq!(made(&bus_box["ok"]), made(&cli_box), "create");
    assert_eq!(bus_box["ok"]["spec"]["namespace"], store_namespace(&by_bus), "the bus store's own namespace");
    assert_eq!(cli_box["spec"]["namespace"], store_namespace(&by_cli), "the CLI store's own namespace");
    assert_eq!(made(&call("ls", json!({}))["ok"][0]), made(&cli_json(&["ls"])[0]), "ls");

    // Refusals decided by core: the same class and the same words.
    for (args, params) in [
        (
            vec!["create", "--sandbox", "passthrough", "--accel", "tcg"],
            json!({"sandbox": "passthrough", "accel": "tcg"}),
        ),
        (
            vec!["create", "--sandbox", "passthrough", "--option", "accel=kvm", "--accel", "tcg"],
            json!({"sandbox": "passthrough", "options": {"accel": "kvm"}, "accel": "tcg"}),
        ),
        (
            vec!["create", "--sandbox", "passthrough", "--from-template", "nope"],
            json!({"sandbox": "passthrough", "from_template": "nope"}),
        ),
        (
            vec!["create", "--sandbox", "passthrough", "--workspace", "/etc"],
            json!({"sandbox": "passthrough", "workspace": "/etc"}),
        ),
        (
            vec!["create", "--sandbox", "passthrough", "--ttl", "9999d"],
            json!({"sandbox": "passthrough", "ttl_secs": 9999u64 * 86400}),
        ),
        (
            vec!["create", "--sandbox", "passthrough", "--cpus", "0.000000001"],
            json!({"sandbox": "passthrough", "cpus": 1e-9}),
        ),
        (
            vec!["create", "--sandbox", "passthrough", "--untrusted"],
            json!({"sandbox": "passthrough", "untrusted": true}),
        ),
        (vec!["host", "rm", "local"], json!({"name": "local"})),
    ] {
        let method = if args[0] == "host" { "host.rm" } else { "create" };
        let bus = call(method, params);
        let cli_err = cli_json(&args);
        assert_eq!(bus["error"]["kind"], cli_err["error"]["kind"], "{args:?}: {bus}");
        assert_eq!(bus["error"]["message"], cli_err["error"]["message"], "{args:?}");
    }

    // Hosts: the same entries, saved the same way.
    let cli_added = cli_json(&["host", "add", "b1", "--ssh", "me@b1.invalid", "--port", "2222", "--no-multiplex"]);
    let bus_added = call("host.add", json!({"name": "b1", "ssh": "me@b1.invalid", "port": 2222, "no_multiplex": true}));
    assert_eq!(bus_added["ok"], cli_added, "host add");
    assert_eq!(call("host.ls", json!({}))["ok"], cli_json(&["host", "ls"]), "host ls");
    let bus = call("host.add", json!({"name": "b2", "ssh": "-oProxyCommand=x"}));
    let cli_err = cli_json(&["host", "add", "b2", "--ssh=-oProxyCommand=x"]);
    assert_eq!(bus["error"]["message"], cli_err["error"]["message"], "{bus}");
    assert_eq!(bus["error"]["code"], "invalid_argument");
    assert_eq!(call("host.rm", json!({"name": "b1"}))["ok"], cli_json(&["host", "rm", "b1"]), "host rm");
    assert_eq!(call("host.ls", json!({}))["ok"], cli_json(&["host", "ls"]), "host ls after rm");

    // drivers: the same rows, `trust` and `verified` included, for the same store.
    if !tinybox_tests::have("bwrap") {
        return tinybox_tests::skip(test, "bwrap is not installed (apt-get install bubblewrap): no driver to verify");
    }
    let (code, _, err) = by_cli.run(&["drivers", "verify", "namespace"]);
    assert_eq!(code, 0, "{err}");
    let shared = by_cli.home.path().to_str().unwrap();
    let out = run_c_host(&host, by_cli.home.path(), &["call", "drivers", &json!({"store": shared}).to_string()]);
    assert_success("drivers", &out);
    let bus_rows = one(&tagged(&out.stdout), "call")["ok"].clone();
    let cli_rows = cli_json(&["drivers"]);
    let verified = |rows: &Value| -> Vec<[Value; 4]> {
        let fields = |r: &Value| ["name", "trust", "verified", "with_options"].map(|f| r[f].clone());
        rows.as_array().unwrap().iter().map(fields).collect()
    };
    assert_eq!(verified(&bus_rows), verified(&cli_rows));
    let namespace = cli_rows.as_array().unwrap().iter().find(|r| r["name"] == "namespace").expect("namespace listed");
    assert_eq!(namespace["verified"]["passed"], true, "{namespace}");
    assert_eq!(namespace["trust"], "verified", "{namespace}");
    assert!(cli_rows.as_array().unwrap().iter().all(|r| r.get("verified").is_some()), "every row says: {cli_rows}");
}
