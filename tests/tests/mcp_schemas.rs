//! `tinybox mcp` through the official MCP Python SDK (PyPI `mcp` 2.3.0, in
//! a venv under target/), on namespace boxes: the server names itself
//! tinybox, every tool declares an outputSchema and its hints (read-only;
//! destructive and idempotent where it is not), and every tool's answer is
//! structuredContent that the SDK — and jsonschema, again, in the script —
//! finds valid against that schema (mcp_schemas/check.py).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use tinybox_tests::{Cli, have, skip};

const TOOLS: [&str; 9] = [
    "create_box",
    "inspect_box",
    "list_boxes",
    "list_files",
    "read_file",
    "remove_box",
    "run",
    "run_code",
    "write_file",
];

/// A python with the MCP SDK: target/mcp-venv, made on first use.
fn mcp_python() -> Result<PathBuf, String> {
    let venv = tinybox_tests::bin_dir().parent().map(|t| t.join("mcp-venv")).ok_or("no target dir")?;
    let python = venv.join("bin/python");
    let has = |p: &PathBuf| Command::new(p).args(["-c", "import mcp, jsonschema"]).status().is_ok_and(|s| s.success());
    if python.is_file() && has(&python) {
        return Ok(python);
    }
    if !have("python3") {
        return Err("no python3 on PATH (apt-get install python3-venv)".into());
    }
    let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().map_err(|e| e.to_string())?;
    if !made.success() {
        return Err("python3 -m venv failed (apt-get install python3-venv)".into());
    }
    let pip = Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "mcp==2.3.0", "jsonschema"])
        .status()
        .map_err(|e| e.to_string())?;
    if !pip.success() || !has(&python) {
        return Err("pip install mcp==2.3.0 failed (PyPI unreachable?)".into());
    }
    Ok(python)
}

#[test]
fn every_tool_answers_structured_content_its_declared_schema_holds() {
    let test = "mcp_schemas::every_tool_answers_structured_content_its_declared_schema_holds";
    if !have("bwrap") {
        return skip(test, "bwrap is not installed (apt-get install bubblewrap)");
    }
    let python = match mcp_python() {
        Ok(p) => p,
        Err(why) => return skip(test, &why),
    };
    let cli = Cli::new();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_schemas/check.py");
    let out = Command::new(python)
        .arg(script)
        .arg(tinybox_tests::bin("tinybox"))
        .arg(cli.home.path())
        .args(["--sandbox", "namespace", "--ttl", "10m"])
        .env("TINYBOX_DRIVER_PATH", tinybox_tests::bin_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(seen["server_name"], "tinybox", "the server names itself, not its SDK");
    assert_eq!(seen["without_schema"], serde_json::json!([]), "every tool declares an outputSchema");
    let tools = seen["tools"].as_object().unwrap();
    let mut names: Vec<&str> = tools.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(names, TOOLS);
    for (name, hints) in tools {
        let read_only = hints["readOnlyHint"].as_bool().unwrap_or_else(|| panic!("{name}: no readOnlyHint"));
        assert_eq!(hints["openWorldHint"], false, "{name}");
        if !read_only {
            assert!(hints["destructiveHint"].is_boolean() && hints["idempotentHint"].is_boolean(), "{name}: {hints}");
        }
    }
    let validated: Vec<&str> = seen["validated"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for name in TOOLS {
        assert!(validated.contains(&name), "{name}'s answer was not checked against its schema: {validated:?}");
    }
    // What the session made went with it.
    let listed = cli.cmd(&["--json", "ls"]).output().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&listed.stdout).unwrap(), serde_json::json!([]));
}
