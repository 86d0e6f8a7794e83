//! `tinybox serve` live: tinybox's own HTTP API. Without a box: a missing
//! or wrong token, malformed JSON, an unknown field, an oversize body, a
//! request over the ceiling and a box of no server are each one error body
//! with the right status, and change nothing; a listener beyond loopback
//! is refused; `serve env` prints the exports; every route of
//! docs/specs/http-api.yml is served. On docker boxes: create, exec
//! (buffered and streamed, with stdin), files (binary-safe), directories,
//! inspect, remove — and a box the CLI made in the same store stays out
//! of the API's reach.

use base64::Engine as _;
use serde_json::{Value, json};
use tinybox_tests::api::Server;
use tinybox_tests::{Cli, skip};

fn kind(v: &Value) -> &str {
    v["error"]["kind"].as_str().unwrap_or_default()
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_default()
}

/// The store's boxes, as `tinybox ls --json` lists them.
fn stored(cli: &Cli) -> Value {
    let out = cli.cmd(&["--json", "ls"]).output().unwrap();
    assert!(out.status.success(), "ls: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn refusals_are_one_error_body_with_the_right_status_and_change_nothing() {
    let server = Server::start(&["--sandbox", "docker", "--ttl", "10m"]);
    // No token, a wrong one: 401, one line.
    for headers in [vec![], vec![("Authorization", "Bearer 00")]] {
        let (status, body) = server.request("GET", "/v1/boxes", &headers, b"");
        assert_eq!(status, 401, "{}", String::from_utf8_lossy(&body));
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(kind(&v), "unauthorized");
        assert!(!message(&v).contains('\n') && message(&v).contains("token"), "{v}");
    }
    // The E2B control plane refuses in E2B's shape.
    let (status, body) = server.request("GET", "/v2/sandboxes", &[("X-API-KEY", "nope")], b"");
    assert_eq!(status, 401);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["code"], json!(401), "{v}");

    let auth = format!("Bearer {}", server.token);
    let post = |body: &[u8]| {
        let (status, bytes) = server.request(
            "POST",
            "/v1/boxes",
            &[("Authorization", &auth), ("Content-Type", "application/json")],
            body,
        );
        (status, serde_json::from_slice::<Value>(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes))))
    };
    let (status, v) = post(b"{\"ttl_secs\": ");
    assert_eq!((status, kind(&v)), (400, "bad_body"), "{v}");
    assert!(message(&v).contains("not JSON"), "{v}");
    let (status, v) = post(b"{\"colour\": \"red\"}");
    assert_eq!((status, kind(&v)), (400, "bad_body"), "{v}");
    assert!(message(&v).contains("colour"), "the refusal names the field: {v}");
    let (status, v) = post(b"{\"pids\": \"many\"}");
    assert_eq!(status, 400, "{v}");
    assert!(message(&v).contains("pids") || message(&v).contains("integer"), "{v}");
    let big = format!("{{\"image\": \"{}\"}}", "x".repeat(2 << 20));
    let (status, v) = post(big.as_bytes());
    assert_eq!((status, kind(&v)), (413, "too_large"), "{v}");
    // Over the operator's ceiling: refused, not cut.
    let (status, v) = post(b"{\"ttl_secs\": 3600}");
    assert_eq!((status, kind(&v)), (400, "invalid"), "{v}");
    assert!(message(&v).contains("ceiling"), "{v}");
    let (status, v) = post(b"{\"network\": \"egress\"}");
    assert_eq!(status, 400, "{v}");
    // A box no server made; a malformed id; a route that is not one.
    let (status, v) = server.json("GET", "/v1/boxes/box-77", None);
    assert_eq!((status, kind(&v)), (404, "box_not_found"), "{v}");
    let (status, v) = server.json("GET", "/v1/boxes/..%2Fetc", None);
    assert!(status == 400 || status == 404, "{status} {v}");
    let (status, v) = server.json("GET", "/v1/nothing", None);
    assert_eq!((status, kind(&v)), (404, "no_route"), "{v}");
    // A bad query names the parameter.
    let (status, v) = server.json("GET", "/v1/boxes/box-0/files", None);
    assert_eq!((status, kind(&v)), (400, "bad_query"), "{v}");
    assert!(message(&v).contains("path"), "{v}");

    // Nothing was made.
    let (status, v) = server.json("GET", "/v1/boxes", None);
    assert_eq!((status, v), (200, json!([])));
    assert_eq!(stored(&server.cli), json!([]));
}

#[test]
fn every_documented_route_is_served() {
    let server = Server::start(&["--sandbox", "docker"]);
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/specs/http-api.yml")).unwrap();
    let mut path = String::new();
    let mut checked = 0;
    for line in doc.lines().skip_while(|l| *l != "paths:") {
        if let Some(p) = line.strip_prefix("  /").and_then(|l| l.strip_suffix(':')) {
            path = format!("/{p}").replace("{id}", "box-99");
        } else if let Some(m) = line.strip_prefix("    ").and_then(|l| l.strip_suffix(':'))
            && ["get", "post", "put", "delete"].contains(&m)
        {
            let (_, v) = server.json(&m.to_uppercase(), &format!("{path}?path=/x"), None);
            assert_ne!(kind(&v), "no_route", "{m} {path} is documented but not served: {v}");
            checked += 1;
        }
    }
    assert!(checked >= 10, "read only {checked} operations from the document");
}

#[test]
fn serve_refuses_a_listener_beyond_loopback_and_env_needs_a_server() {
    let cli = Cli::new();
    let out = cli.cmd(&["serve", "--listen", "0.0.0.0:0"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("0.0.0.0:0") && err.contains("TLS"), "{err}");
    let out = cli.cmd(&["serve", "env"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tinybox serve"), "{}", String::from_utf8_lossy(&out.stderr));

    let server = Server::start(&[]);
    let out = server.cli.cmd(&["serve", "env"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["E2B_API_URL", "E2B_SANDBOX_URL", "TINYBOX_API_URL"] {
        assert!(text.contains(&format!("export {name}={}\n", server.url)), "{text}");
    }
    assert!(text.contains(&format!("export TINYBOX_API_TOKEN={}\n", server.token)), "{text}");
    assert!(text.contains(&format!("export E2B_API_KEY=e2b_{}\n", server.token)), "{text}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(server.cli.home.path().join("api-token")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the token file is {mode:o}");
}

#[test]
fn docker_boxes_through_the_api_create_exec_files_and_remove() {
    let test = "api_http::docker_boxes_through_the_api_create_exec_files_and_remove";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip(test, &why);
    }
    let server = Server::start(&["--sandbox", "docker", "--ttl", "10m"]);
    let (status, made) = server.json("POST", "/v1/boxes", Some(&json!({ "ttl_secs": 300, "memory": "256M" })));
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!((made["sandbox"].as_str(), made["isolation"].as_str()), (Some("docker"), Some("kernel")), "{made}");
    assert_eq!(made["limits"]["memory_bytes"], json!(256 << 20), "{made}");

    let exec = |body: Value| server.json("POST", &format!("/v1/boxes/{id}/exec"), Some(&body));
    let (status, v) = exec(json!({ "argv": ["sh", "-c", "echo out; echo err >&2; exit 3"] }));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["exit_code"].clone(), v["stdout"].clone(), v["stderr"].clone()),
        (json!(3), json!("out\n"), json!("err\n"))
    );
    let (_, v) = exec(json!({ "argv": ["cat"], "stdin": "fed in" }));
    assert_eq!(v["stdout"], json!("fed in"), "{v}");
    let (status, v) = exec(json!({ "argv": ["true"], "timeout_secs": 3600 }));
    assert_eq!((status, kind(&v)), (400, "invalid"), "a timeout over the ceiling: {v}");
    let (status, v) = exec(json!({ "argv": [] }));
    assert_eq!(status, 400, "{v}");

    // Streamed: JSON lines, the output before the end.
    let auth = format!("Bearer {}", server.token);
    let body = json!({ "argv": ["sh", "-c", "echo one; echo two >&2"] }).to_string();
    let (status, bytes) = server.request(
        "POST",
        &format!("/v1/boxes/{id}/exec/stream"),
        &[("Authorization", &auth), ("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(status, 200);
    let lines: Vec<Value> = String::from_utf8_lossy(&bytes).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let b64 = |v: &Value| base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap();
    let out: Vec<u8> = lines.iter().filter(|l| l.get("stdout").is_some()).flat_map(|l| b64(&l["stdout"])).collect();
    let err: Vec<u8> = lines.iter().filter(|l| l.get("stderr").is_some()).flat_map(|l| b64(&l["stderr"])).collect();
    assert_eq!((out.as_slice(), err.as_slice()), (&b"one\n"[..], &b"two\n"[..]), "{lines:?}");
    assert_eq!(lines.last().unwrap()["exit_code"], json!(0), "{lines:?}");

    // Files: bytes in, the same bytes out, seen from inside the box too.
    let bytes: Vec<u8> = (0..=255u8).chain([0, 0xff, b'\n']).collect();
    let (status, put) = server.request(
        "PUT",
        &format!("/v1/boxes/{id}/files?path=/tmp/blob.bin&mode=600"),
        &[("Authorization", &auth)],
        &bytes,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&put));
    let (status, got) =
        server.request("GET", &format!("/v1/boxes/{id}/files?path=/tmp/blob.bin"), &[("Authorization", &auth)], b"");
    assert_eq!((status, got), (200, bytes.clone()));
    let (_, v) = exec(json!({ "argv": ["sh", "-c", "wc -c < /tmp/blob.bin; stat -c %a /tmp/blob.bin"] }));
    assert_eq!(
        v["stdout"].as_str().unwrap().split_whitespace().collect::<Vec<_>>(),
        [bytes.len().to_string().as_str(), "600"],
        "{v}"
    );
    let (status, v) = server.json("GET", &format!("/v1/boxes/{id}/dir?path=/tmp"), None);
    assert_eq!(status, 200, "{v}");
    assert!(
        v.as_array().unwrap().iter().any(|e| e["name"] == json!("blob.bin") && e["size"] == json!(bytes.len())),
        "{v}"
    );
    let (status, v) = server.json("GET", &format!("/v1/boxes/{id}/files?path=/tmp/none"), None);
    assert!(status >= 400 && !message(&v).is_empty(), "{status} {v}");

    // A box the CLI made in the same store is not the API's to reach.
    let out = server
        .cli
        .cmd(&["create", "--sandbox", "docker", "--ttl", "5m"])
        .env("TINYBOX_DRIVER_PATH", tinybox_tests::bin_dir())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let other = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (status, v) = exec(json!({ "argv": ["true"] }));
    assert_eq!(status, 200, "{v}");
    let (status, v) = server.json("POST", &format!("/v1/boxes/{other}/exec"), Some(&json!({ "argv": ["true"] })));
    assert_eq!((status, kind(&v)), (404, "box_not_found"), "{v}");
    let (_, listed) = server.json("GET", "/v1/boxes", None);
    assert_eq!(listed.as_array().unwrap().iter().map(|b| b["id"].clone()).collect::<Vec<_>>(), [json!(id)]);

    let (status, v) = server.json("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!((status, v["state"].clone()), (200, json!("ready")), "{v}");
    let (status, v) = server.json("DELETE", &format!("/v1/boxes/{id}"), None);
    assert_eq!(status, 200, "{v}");
    let (status, _) = server.json("GET", &format!("/v1/boxes/{id}"), None);
    assert_eq!(status, 404);
    let ids: Vec<Value> = stored(&server.cli).as_array().unwrap().iter().map(|b| b["id"].clone()).collect();
    assert_eq!(ids, [json!(other)], "only the CLI's box is left");
    let out = server.cli.cmd(&["rm", &other]).env("TINYBOX_DRIVER_PATH", tinybox_tests::bin_dir()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_boxes_a_server_made_go_when_it_stops() {
    let test = "api_http::the_boxes_a_server_made_go_when_it_stops";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip(test, &why);
    }
    let mut server = Server::start(&["--sandbox", "docker", "--ttl", "10m"]);
    for _ in 0..2 {
        let (status, v) = server.json("POST", "/v1/boxes", Some(&json!({})));
        assert_eq!(status, 201, "{v}");
    }
    assert_eq!(stored(&server.cli).as_array().map(Vec::len), Some(2));
    // A command still streaming when the server is asked to stop does not
    // keep it (or its box) alive: its first line is read, then SIGTERM.
    let (_, listed) = server.json("GET", "/v1/boxes", None);
    let first = listed[0]["id"].as_str().unwrap().to_owned();
    let mut stream = std::net::TcpStream::connect(&server.addr).unwrap();
    let body = json!({ "argv": ["sh", "-c", "echo started; sleep 600"] }).to_string();
    let head = format!(
        "POST /v1/boxes/{first}/exec/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        server.addr,
        server.token,
        body.len()
    );
    std::io::Write::write_all(&mut stream, format!("{head}{body}").as_bytes()).unwrap();
    let started = base64::engine::general_purpose::STANDARD.encode("started\n");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(&started) {
        let n = std::io::Read::read(&mut stream, &mut buf).unwrap();
        assert!(n > 0, "the stream ended before the command printed: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let status = server.stop();
    assert!(status.success());
    // The stream ends (the server is gone); what it said last does not matter.
    let _ = std::io::Read::read_to_end(&mut stream, &mut seen);
    assert_eq!(stored(&server.cli), json!([]), "the server removed what it made");
    assert!(!server.cli.home.path().join("api.json").exists(), "the address record went with the server");
}

#[test]
fn many_execs_at_once_on_one_box_all_complete_with_their_own_output() {
    let test = "api_http::many_execs_at_once_on_one_box_all_complete_with_their_own_output";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip(test, &why);
    }
    let server = Server::start(&["--sandbox", "docker", "--ttl", "10m"]);
    let (status, made) = server.json("POST", "/v1/boxes", Some(&json!({})));
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/boxes/{id}/exec");
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|n| {
                let (server, path) = (&server, &path);
                s.spawn(move || server.json("POST", path, Some(&json!({ "argv": ["echo", format!("call-{n}")] }))))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (n, (status, v)) in answers.iter().enumerate() {
        assert_eq!(*status, 200, "call {n}: {v}");
        assert_eq!((v["exit_code"].clone(), v["stdout"].clone()), (json!(0), json!(format!("call-{n}\n"))), "call {n}");
    }
    let (status, v) = server.json("DELETE", &format!("/v1/boxes/{id}"), None);
    assert_eq!(status, 200, "{v}");
}
