//! `tinybox mcp` live: a scripted JSON-RPC session over the server's stdio,
//! as an MCP client speaks it, against namespace and docker: initialize,
//! list tools, create, run, write and read a file, inspect, remove; a
//! request over the operator's ceiling, a box the server did not make and
//! malformed arguments are answered as errors and the server keeps serving.

use serde_json::json;
use tinybox_tests::frontends::mcp::Session;
use tinybox_tests::frontends::probe::until;
use tinybox_tests::{Cli, have, skip};

fn session_round(cli: &Cli, flags: &[&str], expect_sandbox: &str) {
    let mut s = Session::start(cli, flags);
    let init = s.call(
        "initialize",
        json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "test", "version": "1" } }),
    );
    let instructions = init["result"]["instructions"].as_str().unwrap_or_default().to_owned();
    assert!(instructions.contains("untrusted code") && instructions.contains("no network"), "{init}");
    s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));

    let tools = s.call("tools/list", json!({}));
    let mut names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "create_box",
            "inspect_box",
            "list_boxes",
            "list_files",
            "read_file",
            "remove_box",
            "run",
            "run_code",
            "write_file"
        ]
    );
    // Every tool says whether it only reads, or may destroy what is in a box.
    for tool in tools["result"]["tools"].as_array().unwrap() {
        let hints = &tool["annotations"];
        let read_only =
            ["inspect_box", "list_boxes", "list_files", "read_file"].contains(&tool["name"].as_str().unwrap());
        assert_eq!(hints["readOnlyHint"], json!(read_only), "{tool}");
        assert_eq!(hints["openWorldHint"], json!(false), "{tool}");
    }
    let create = tools["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "create_box").unwrap();
    assert!(create["description"].as_str().unwrap().contains(&format!("sandbox {expect_sandbox}")), "{create}");

    // Over the ceiling: refused as a tool error, in one line.
    let (err, text) = s.tool("create_box", json!({ "ttl_secs": 999_999 }));
    assert!(err && text.starts_with("tinybox: ttl_secs 999999 is over this server's ceiling"), "{text}");
    let (err, text) = s.tool("create_box", json!({ "network": "egress" }));
    assert!(err && text.contains("network egress is not allowed"), "{text}");
    let (err, text) = s.tool("create_box", json!({ "pids": 100_000 }));
    assert!(err && text.contains("pids 100000 is over"), "{text}");

    let made = s.tool_ok("create_box", json!({ "ttl_secs": 600, "pids": 128 }));
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(made["sandbox"], expect_sandbox);
    assert_eq!(made["network"], "denied");
    assert_eq!(made["limits"]["pids"], 128);
    assert_eq!(made["suitable_for_untrusted_code"], true);

    let ran = s.tool_ok(
        "run",
        json!({ "box": id, "argv": ["sh", "-c", "read x; echo got $x; echo oops >&2; exit 3"], "stdin": "in\n" }),
    );
    assert_eq!(
        (ran["exit_code"].clone(), ran["stdout"].clone(), ran["stderr"].clone()),
        (json!(3), json!("got in\n"), json!("oops\n"))
    );
    // Output past the bound is cut and marked.
    let big = s.tool_ok("run", json!({ "box": id, "argv": ["sh", "-c", "yes | head -c 200000"] }));
    assert_eq!((big["stdout"].as_str().unwrap().len(), big["stdout_truncated"].clone()), (64 * 1024, json!(true)));
    assert_eq!(big["stdout_dropped_bytes"], json!(200_000 - 64 * 1024), "the cut says how much it dropped");
    let slow = s.tool_ok("run", json!({ "box": id, "argv": ["sleep", "30"], "timeout_secs": 1 }));
    assert_eq!(slow["timed_out"], true);

    s.tool_ok("write_file", json!({ "box": id, "path": "note.txt", "content": "from the agent\n" }));
    let read = s.tool_ok("read_file", json!({ "box": id, "path": "note.txt" }));
    assert_eq!(read["content"], "from the agent\n");
    let seen = s.tool_ok("run", json!({ "box": id, "argv": ["cat", "note.txt"] }));
    assert_eq!(seen["stdout"], "from the agent\n");
    // Bytes go in and come out whole (base64), into directories made on the way.
    let blob: Vec<u8> = vec![0, 0xff, 0xfe, b'\n', 0x80, b'x', 0];
    let b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&blob)
    };
    let wrote = s.tool_ok("write_file", json!({ "box": id, "path": "bin/deep/blob", "content_base64": b64 }));
    assert_eq!(wrote["bytes"], blob.len());
    let back = s.tool_ok("read_file", json!({ "box": id, "path": "bin/deep/blob" }));
    assert_eq!((back["encoding"].as_str(), back["content"].as_str()), (Some("base64"), Some(b64.as_str())), "{back}");
    let counted = s.tool_ok("run", json!({ "box": id, "argv": ["wc", "-c", "bin/deep/blob"] }));
    assert!(counted["stdout"].as_str().unwrap().trim_start().starts_with("7 "), "{counted}");
    let listed = s.tool_ok("list_files", json!({ "box": id, "path": "bin/deep" }));
    assert_eq!(
        listed["entries"],
        json!([{ "name": "blob", "kind": "file", "size": 7, "mode": 0o644, "mtime": listed["entries"][0]["mtime"] }])
    );
    let (err, text) = s.tool("write_file", json!({ "box": id, "path": "x", "content": "a", "content_base64": "YQ==" }));
    assert!(err && text.contains("exactly one of content"), "{text}");
    let (err, text) = s.tool("write_file", json!({ "box": id, "path": "x", "content_base64": "not base64!" }));
    assert!(err && text.contains("content_base64 is not base64"), "{text}");
    // A piece of code, given to its interpreter on stdin.
    let code = s.tool_ok("run_code", json!({ "box": id, "language": "sh", "code": "echo $((6*7)); echo to-err >&2" }));
    assert_eq!(
        (code["exit_code"].clone(), code["stdout"].clone(), code["stderr"].clone()),
        (json!(0), json!("42\n"), json!("to-err\n"))
    );
    if expect_sandbox == "namespace" {
        // The host's interpreters are the box's here: every language run_code names.
        let cases = [
            ("python", "print(sum(range(10)))"),
            ("bash", "echo $(( $(seq -s + 1 9) ))"),
            ("node", "console.log([...Array(10).keys()].reduce((a, b) => a + b))"),
        ];
        for (language, code) in cases {
            let got = s.tool_ok("run_code", json!({ "box": id, "language": language, "code": code }));
            assert_eq!(got["stdout"], "45\n", "{language}: {got}");
        }
    }
    let (err, text) = s.tool("run_code", json!({ "box": id, "language": "cobol", "code": "x" }));
    assert!(err && text.contains("language \"cobol\" is not one run_code knows"), "{text}");
    let (err, text) = s.tool("read_file", json!({ "box": id, "path": "/no/such" }));
    assert!(err && text.contains(&format!("box {id} has no /no/such")), "{text}");
    // A file of a terabyte (of holes) is refused on its size, never read into memory.
    let made_huge = s.tool_ok(
        "run",
        json!({ "box": id, "argv": ["dd", "if=/dev/zero", "of=huge", "bs=1", "count=0", "seek=1099511627776"] }),
    );
    assert_eq!(made_huge["exit_code"], 0, "{made_huge}");
    let (err, text) = s.tool("read_file", json!({ "box": id, "path": "huge" }));
    assert!(err && text.contains("1099511627776 bytes, over the 65536-byte bound"), "{text}");
    if expect_sandbox == "namespace" {
        // Each command there has its own /tmp: a file written to it would be gone.
        let (err, text) = s.tool("write_file", json!({ "box": id, "path": "/tmp/x", "content": "gone?" }));
        assert!(err && text.contains("keeps only /workspace between commands"), "{text}");
    }

    let inspected = s.tool_ok("inspect_box", json!({ "box": id }));
    assert_eq!(inspected["state"], "ready");
    assert_eq!(inspected["isolation"], made["isolation"]);
    let listed = s.tool_ok("list_boxes", json!({}));
    assert_eq!(listed["boxes"].as_array().unwrap().len(), 1);

    // A box the server did not make is out of reach.
    let other = cli.create(&["--sandbox", "passthrough"]);
    let (err, text) = s.tool("run", json!({ "box": other, "argv": ["true"] }));
    assert!(err && text.contains("not one this MCP server made"), "{text}");
    // Malformed arguments: an error answer, and the server goes on.
    let (err, text) = s.tool("run", json!({ "box": id }));
    assert!(err && text.contains("argv"), "{text}");
    let (err, _) = s.tool("run", json!({ "box": 7, "argv": "ls" }));
    assert!(err);
    let bad = s.call("tools/call", json!({ "name": "no_such_tool", "arguments": {} }));
    assert!(bad["error"].is_object() || bad["result"]["isError"] == json!(true), "{bad}");

    s.tool_ok("remove_box", json!({ "box": id }));
    let (err, _) = s.tool("inspect_box", json!({ "box": id }));
    assert!(err, "a removed box is gone");

    // A box left behind goes with the server.
    let left = s.tool_ok("create_box", json!({}))["id"].as_str().unwrap().to_owned();
    assert!(s.finish().success());
    let (_, out, _) = cli.run(&["ls"]);
    assert!(!out.split_whitespace().any(|w| w == left), "{left} outlived its server: {out}");
    cli.run(&["rm", &other]);
}

#[test]
fn an_mcp_client_drives_namespace_boxes() {
    if !have("bwrap") {
        return skip(
            "mcp::an_mcp_client_drives_namespace_boxes",
            "bwrap is not installed (apt-get install bubblewrap)",
        );
    }
    let cli = Cli::new();
    session_round(&cli, &["--sandbox", "namespace"], "namespace");
}

#[test]
fn an_mcp_client_drives_docker_boxes() {
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip("mcp::an_mcp_client_drives_docker_boxes", &why);
    }
    let ns = tinybox_tests::docker::Namespace::new("mcp");
    let cli = Cli::new();
    // The store's docker namespace is the test's, so its cleanup finds what was made.
    std::fs::write(cli.home.path().join("config.json"), json!({ "namespace": ns.name }).to_string()).unwrap();
    session_round(&cli, &["--sandbox", "docker"], "docker");
}

/// The pids of this machine's processes whose command line holds `word`.
fn processes_with(word: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|w| w == word.as_bytes()))
        })
        .collect()
}

/// The MCP side of cancellation, on a docker box (whose processes this
/// machine's /proc shows).
#[test]
fn a_cancelled_run_stops_its_command_and_a_run_in_flight_goes_with_the_server() {
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip("mcp::a_cancelled_run_stops_its_command_and_a_run_in_flight_goes_with_the_server", &why);
    }
    let ns = tinybox_tests::docker::Namespace::new("mcp-cancel");
    let cli = Cli::new();
    std::fs::write(cli.home.path().join("config.json"), json!({ "namespace": ns.name }).to_string()).unwrap();
    let mut s = Session::start(&cli, &["--sandbox", "docker"]);
    let init = s.call(
        "initialize",
        json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "test", "version": "1" } }),
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "tinybox", "the server names itself: {init}");
    s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    let id = s.tool_ok("create_box", json!({}))["id"].as_str().unwrap().to_owned();

    // A run the client cancels: its command stops now, not at the server's limit.
    let marker = format!("{}.{}", 3000 + std::process::id() % 500, std::process::id() % 997);
    let request = s.next_id;
    s.next_id += 1;
    let call = json!({ "name": "run", "arguments": { "box": id, "argv": ["sleep", marker] } });
    s.send(&json!({ "jsonrpc": "2.0", "id": request, "method": "tools/call", "params": call }));
    until("the run's command started", || !processes_with(&marker).is_empty());
    s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": request, "reason": "the client gave up" } }));
    until("the cancelled run's command stopped", || processes_with(&marker).is_empty());
    // The server goes on serving.
    let ran = s.tool_ok("run", json!({ "box": id, "argv": ["echo", "still here"] }));
    assert_eq!(ran["stdout"], "still here\n");

    // A run in flight when the client goes: the command and the box go with the server.
    let marker = format!("{marker}1");
    let call = json!({ "name": "run", "arguments": { "box": id, "argv": ["sleep", marker] } });
    let request = s.next_id;
    s.next_id += 1;
    s.send(&json!({ "jsonrpc": "2.0", "id": request, "method": "tools/call", "params": call }));
    until("the second run's command started", || !processes_with(&marker).is_empty());
    assert!(s.finish().success());
    assert!(processes_with(&marker).is_empty(), "a command in flight outlived its server");
    let (_, out, _) = cli.run(&["ls", "--all"]);
    assert!(!out.split_whitespace().any(|w| w == id), "{id} outlived its server: {out}");
}
