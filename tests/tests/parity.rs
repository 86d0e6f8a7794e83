//! The two front ends give the same answers beyond create and exec: the
//! same request through `tinybox --json` and through the TinyBus module
//! (tests/hosts/host.c, dlopening the built library) gives the same
//! document or the same error, because core decides and shapes both — an
//! ad-hoc `ssh:DEST` host, `rm`'s result, `snapshot ls` and `prune
//! --dry-run`, the warnings a create for untrusted code carries, and a
//! box made from a template or with a microVM's `accel` option.

mod module_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use module_support::{c_host, host_env, library, one, run_c_host, tagged, temp};
use serde_json::{Value, json};
use tinybox_tests::boxes::{BoxEnv, Principal};
use tinybox_tests::docker::{self, Namespace};
use tinybox_tests::{Cli, bin_dir, have, skip};

/// `tinybox --json ARGS` against `cli`'s store: what it printed on stdout.
fn cli_json(cli: &Cli, args: &[&str]) -> Value {
    let (_, out, err) = cli.run(&[&["--json"], args].concat());
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("tinybox {args:?}: {e}: {out} {err}"))
}

/// The bus's answer to `method` with `params` on store `store`.
fn bus(host: &Path, store: &Path, method: &str, mut params: Value) -> Value {
    params["store"] = json!(store);
    let out = run_c_host(host, store, &["call", method, &params.to_string()]);
    assert!(out.status.success(), "{method}: the C host failed: {}", String::from_utf8_lossy(&out.stderr));
    one(&tagged(&out.stdout), "call").clone()
}

/// An error's class and words, which must be the same on both front ends.
fn error_of(v: &Value) -> (Value, Value) {
    (v["error"]["kind"].clone(), v["error"]["message"].clone())
}

/// A box without the moment it was made or its store's namespace (each
/// store has its own).
fn made(v: &Value) -> Value {
    let mut v = v.clone();
    v.as_object_mut().expect("a box").remove("created_at");
    v["spec"].as_object_mut().expect("a spec").remove("namespace");
    v
}

#[test]
fn an_ad_hoc_ssh_host_is_saved_refused_and_removed_alike() {
    let dir = temp();
    let Some(host) = c_host("parity::an_ad_hoc_ssh_host_is_saved_refused_and_removed_alike", dir.path()) else {
        return;
    };
    // One store per front end, so each allocates the same identifiers.
    let (by_cli, by_bus) = (Cli::new(), Cli::new());
    let call = |method: &str, params: Value| bus(&host, by_bus.home.path(), method, params);
    let dest = "ssh:me@x.invalid";
    let saved_as = tinybox_core::hosts::ad_hoc_name("me@x.invalid").to_string();

    // A sandbox that must reach the host to make a box: the same refusal,
    // and the ad-hoc host saved the same way by both.
    let cli_err = cli_json(&by_cli, &["create", "--host", dest, "--sandbox", "namespace"]);
    let bus_err = call("create", json!({"host": dest, "sandbox": "namespace"}));
    assert!(cli_err["error"]["message"].as_str().unwrap().contains("x.invalid"), "{cli_err}");
    assert_eq!(error_of(&bus_err), error_of(&cli_err), "{bus_err}");
    let hosts = cli_json(&by_cli, &["host", "ls"]);
    assert_eq!(hosts[&saved_as]["config"], json!({"destination": "me@x.invalid"}), "{hosts}");
    assert_eq!(call("host.ls", json!({}))["ok"], hosts, "host ls after the refused create");

    // passthrough makes nothing on the host: the same box, then the same
    // error when a command has to reach it.
    let cli_box = cli_json(&by_cli, &["create", "--host", dest, "--sandbox", "passthrough"]);
    let bus_box = call("create", json!({"host": dest, "sandbox": "passthrough"}));
    assert_eq!(made(&bus_box["ok"]), made(&cli_box), "create");
    let id = cli_box["id"].as_str().unwrap().to_owned();
    let cli_err = cli_json(&by_cli, &["exec", &id, "--", "true"]);
    let bus_err = call("exec", json!({"id": id, "argv": ["true"]}));
    assert_eq!(cli_err["error"]["kind"], "driver", "{cli_err}");
    assert_eq!(error_of(&bus_err), error_of(&cli_err), "{bus_err}");
    assert_eq!(call("host.ls", json!({}))["ok"], cli_json(&by_cli, &["host", "ls"]), "host ls");

    // rm: one box removed, one unknown, the same document from both.
    let cli_rm = cli_json(&by_cli, &["rm", &id, "box-77"]);
    let bus_rm = call("rm", json!({"ids": [id, "box-77"]}));
    assert_eq!(cli_rm["removed"], json!([id]), "{cli_rm}");
    assert_eq!(cli_rm["failed"][0]["id"], "box-77", "{cli_rm}");
    assert_eq!(bus_rm["ok"], cli_rm, "rm");
    // The ad-hoc host stays until `host rm`, on both.
    assert_eq!(call("host.ls", json!({}))["ok"], cli_json(&by_cli, &["host", "ls"]), "host ls after rm");
    assert_eq!(call("host.rm", json!({"name": saved_as}))["ok"], cli_json(&by_cli, &["host", "rm", &saved_as]));
    assert_eq!(cli_json(&by_cli, &["host", "ls"]), json!({"local": {"driver": "local"}}));
}

#[test]
fn snapshot_listings_and_prune_s_dry_run_are_the_same_documents() {
    const TEST: &str = "parity::snapshot_listings_and_prune_s_dry_run_are_the_same_documents";
    let dir = temp();
    let Some(host) = c_host(TEST, dir.path()) else { return };
    if let Some(why) = docker::unavailable() {
        return skip(TEST, &why);
    }
    // One store read by both: the CLI makes the snapshots.
    let cli = Cli::new();
    let call = |method: &str, params: Value| bus(&host, cli.home.path(), method, params);
    assert_eq!(call("snapshot.ls", json!({}))["ok"], cli_json(&cli, &["snapshot", "ls"]), "an empty store");
    assert_eq!(call("prune", json!({"dry_run": true}))["ok"], json!([]));

    let ns = Namespace::new("parity-prune");
    let args = ["--sandbox", "docker", "--namespace", ns.name.as_str()];
    let kept = cli.create(&args);
    let gone = cli.create(&args);
    let template_of = cli.create(&args);
    let taken = cli_json(&cli, &["snapshot", &gone])["id"].as_str().unwrap().to_owned();
    let saved = cli_json(&cli, &["template", "save", "keep", &template_of])["snapshot"].as_str().unwrap().to_owned();
    let (code, _, err) = cli.run(&["rm", &gone, &template_of]);
    assert_eq!(code, 0, "{err}");

    let listed = cli_json(&cli, &["snapshot", "ls"]);
    let ids: Vec<&str> = listed.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&taken.as_str()) && ids.contains(&saved.as_str()), "{listed}");
    assert_eq!(call("snapshot.ls", json!({}))["ok"], listed, "snapshot ls");
    let dry = cli_json(&cli, &["prune", "--dry-run"]);
    assert_eq!(dry.as_array().unwrap().iter().map(|o| o["id"].clone()).collect::<Vec<_>>(), [json!(taken)]);
    assert_eq!(dry[0]["result"], "would_remove", "{dry}");
    assert_eq!(call("prune", json!({"dry_run": true}))["ok"], dry, "prune --dry-run");
    assert_eq!(cli_json(&cli, &["snapshot", "ls"]), listed, "a dry run removes nothing");

    // Pruned through the bus, it is gone for the CLI too.
    let pruned = call("prune", json!({}));
    assert_eq!(pruned["ok"][0]["result"], "removed", "{pruned}");
    assert_eq!(call("snapshot.ls", json!({}))["ok"], cli_json(&cli, &["snapshot", "ls"]), "after prune");
    assert_eq!(cli_json(&cli, &["prune", "--dry-run"]), json!([]));
    let rm = call("rm", json!({"id": kept}));
    assert_eq!(rm["ok"], json!({"removed": [kept], "failed": []}), "{rm}");
    assert_eq!(call("template.rm", json!({"name": "keep"}))["ok"]["snapshot"], json!(saved));
}

/// The C host, readable and runnable by `who`.
fn c_host_for(test: &str, who: &Principal, dir: &Path) -> Option<PathBuf> {
    let host = c_host(test, dir)?;
    who.own_tree(dir);
    Some(host)
}

/// The bus's answer as `who`, on `env`'s store.
fn bus_as(env: &BoxEnv, host: &Path, method: &str, mut params: Value) -> Value {
    let store = env.store.path();
    params["store"] = json!(store);
    let mut cmd: Command = env.who.command(host, &[library().to_str().unwrap(), "call", method, &params.to_string()]);
    host_env(&mut cmd, store).env("TINYBOX_DRIVER_PATH", bin_dir());
    let out = cmd.output().expect("run the C host");
    assert!(out.status.success(), "{method}: the C host failed: {}", String::from_utf8_lossy(&out.stderr));
    one(&tagged(&out.stdout), "call").clone()
}

/// A box for untrusted code on a sandbox that enforces no limits here
/// (namespace, for an unprivileged caller) is made, and both front ends
/// say so in the create document, in the same words.
#[test]
fn a_create_s_warnings_are_in_both_create_documents() {
    const TEST: &str = "parity::a_create_s_warnings_are_in_both_create_documents";
    if !have("bwrap") {
        return skip(TEST, "bwrap is not installed (apt-get install bubblewrap)");
    }
    let Some(who) = Principal::all(TEST).into_iter().find(|p| matches!(p, Principal::User { .. })) else {
        return; // the rootless skip is printed by Principal::all
    };
    let dir = temp();
    let Some(host) = c_host_for(TEST, &who, dir.path()) else { return };
    let env = BoxEnv::new(&who);

    // The CLI earns the verdict on first use; the bus, which has no
    // verifier, relies on the one it recorded.
    let out = env.run(&["--json", "create", "--untrusted", "--sandbox", "namespace"]);
    let cli_doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let bus_doc = bus_as(&env, &host, "create", json!({"untrusted": true, "sandbox": "namespace"}));
    let bus_doc = &bus_doc["ok"];
    let (cli_id, bus_id) = (cli_doc["id"].as_str().unwrap(), bus_doc["id"].as_str().expect("the bus made a box"));
    assert_eq!(bus_doc["workspace"]["limits"], cli_doc["workspace"]["limits"], "{bus_doc}");
    let limits = &cli_doc["workspace"]["limits"];
    if limits.get("pids").is_some() && limits.get("memory_bytes").is_some() {
        let _ = env.run(&["rm", cli_id, bus_id]);
        return skip(
            TEST,
            "namespace enforces limits for the test user here (a cgroup is delegated to it), so no create warns",
        );
    }
    let warnings = cli_doc["warnings"].as_array().expect("create --json carries the warnings");
    assert_eq!(warnings.len(), 1, "{cli_doc}");
    let words = warnings[0].as_str().unwrap();
    assert!(words.contains(cli_id) && words.contains("no pids or memory limit in force"), "{words}");
    let bus_words = bus_doc["warnings"][0].as_str().expect("the bus's create carries the warnings");
    assert_eq!(bus_words.replace(bus_id, cli_id), words, "the same warning");
    assert_eq!(bus_doc["warnings"].as_array().unwrap().len(), 1);

    // A create with nothing to warn about has no warnings field at all.
    let out = env.run(&["--json", "create", "--sandbox", "namespace"]);
    let plain: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(plain.get("warnings").is_none(), "{plain}");
    let plain_id = plain["id"].as_str().unwrap().to_owned();
    let out = env.run(&["--json", "rm", cli_id, bus_id, &plain_id]);
    let removed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(removed["failed"], json!([]), "{removed}");
}

/// A box without what differs between two boxes made alike in one store:
/// the moment it was made, its namespace and its identifier (wherever a
/// driver's handle names it: a container's name, a VM's directory).
fn made_alike(v: &Value) -> Value {
    let id = v["id"].as_str().expect("a box has an id");
    let text = made(v)
        .to_string()
        .replace(&format!("\"{id}\""), "\"BOX\"")
        .replace(&format!("-{id}\""), "-BOX\"")
        .replace(&format!("/{id}/"), "/BOX/");
    serde_json::from_str(&text).expect("still JSON")
}

/// A template and a create option (`accel`, which only a microVM takes)
/// give the same box through `tinybox --json` and through the bus: the
/// flags and the JSON meet in core's CreateRequest.
#[test]
fn a_template_and_an_accel_option_give_the_same_box_through_both_front_ends() {
    const TEST: &str = "parity::a_template_and_an_accel_option_give_the_same_box_through_both_front_ends";
    let dir = temp();
    let Some(host) = c_host(TEST, dir.path()) else { return };
    if let Some(why) = docker::unavailable() {
        return skip(TEST, &why);
    }
    if let Some(why) = tinybox_tests::microvm::unavailable() {
        return skip(TEST, &why);
    }
    let cli = Cli::new();
    let call = |method: &str, params: Value| bus(&host, cli.home.path(), method, params);

    let ns = Namespace::new("parity-template");
    let base = cli.create(&["--sandbox", "docker", "--namespace", ns.name.as_str()]);
    let saved = cli_json(&cli, &["template", "save", "base", &base]);
    assert!(saved["snapshot"].is_string(), "{saved}");
    let by_cli =
        cli_json(&cli, &["create", "--sandbox", "docker", "--namespace", ns.name.as_str(), "--from-template", "base"]);
    let by_bus = call("create", json!({"sandbox": "docker", "namespace": ns.name, "from_template": "base"}));
    assert_eq!(by_cli["spec"]["source"]["kind"], "snapshot", "{by_cli}");
    assert_eq!(made_alike(&by_bus["ok"]), made_alike(&by_cli), "from a template");

    let tcg = tinybox_tests::microvm::TCG;
    let vm_cli = cli_json(&cli, &["create"].into_iter().chain(tcg.iter().copied()).collect::<Vec<_>>());
    let vm_bus =
        call("create", json!({"sandbox": "microvm", "options": {"accel": "tcg"}, "cpus": 1, "memory": "256M"}));
    assert_eq!(vm_cli["spec"]["options"]["accel"], "tcg", "{vm_cli}");
    // A VM's handle names a directory of its own (the box and a nonce):
    // alike in what it records of the request, not in that name.
    let without_dir = |b: &Value| {
        let mut b = made_alike(b);
        b["workspace"]["handle"].as_object_mut().expect("a handle").remove("dir");
        b
    };
    assert_eq!(vm_bus["ok"]["workspace"]["handle"]["accel"], "tcg", "{vm_bus}");
    assert_eq!(without_dir(&vm_bus["ok"]), without_dir(&vm_cli), "a microVM under emulation");

    let ids: Vec<String> = [&by_cli, &by_bus["ok"], &vm_cli, &vm_bus["ok"]]
        .iter()
        .map(|b| b["id"].as_str().expect("a box was made").to_owned())
        .chain([base])
        .collect();
    let mut args = vec!["rm"];
    args.extend(ids.iter().map(String::as_str));
    let removed = cli_json(&cli, &args);
    assert_eq!(removed["failed"], json!([]), "{removed}");
    assert_eq!(call("template.rm", json!({"name": "base"}))["ok"]["snapshot"], saved["snapshot"]);
}
