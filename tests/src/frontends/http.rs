//! The HTTP API's `/v1` routes as a front end: a `tinybox serve` over the
//! store; a streamed exec is cancelled by dropping its connection, as a
//! client that gives up does; the server is ended with SIGTERM.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;

use serde_json::{Value, json};

use super::{Answer, Ask, Entry, FrontEnd, Ran, Refused, b64, json_bytes};
use crate::api::Server;

pub struct HttpFront {
    pub server: Server,
}

impl HttpFront {
    pub fn start(sandbox: &str) -> HttpFront {
        HttpFront { server: Server::start(&["--sandbox", sandbox, "--ttl", "20m"]) }
    }

    /// One request with the token: the body's bytes, or the error body's message as the refusal.
    fn call(&self, method: &str, path: &str, body: &[u8], json_body: bool) -> Answer<Vec<u8>> {
        let auth = format!("Bearer {}", self.server.token);
        let mut headers = vec![("Authorization", auth.as_str())];
        if json_body {
            headers.push(("Content-Type", "application/json"));
        }
        let (status, bytes) = self.server.request(method, path, &headers, body);
        if status < 400 {
            return Ok(bytes);
        }
        let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!("{method} {path}: {status} and not JSON ({e}): {}", String::from_utf8_lossy(&bytes))
        });
        let message =
            v["error"]["message"].as_str().unwrap_or_else(|| panic!("{method} {path}: {status}, no message: {v}"));
        Err(Refused::Line(message.to_owned()))
    }

    fn json(&self, method: &str, path: &str, body: Option<Value>) -> Answer<Value> {
        let text = body.as_ref().map(Value::to_string).unwrap_or_default();
        let bytes = self.call(method, path, text.as_bytes(), body.is_some())?;
        Ok(serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e})")))
    }
}

/// A query value with everything but unreserved characters and `/` escaped.
fn query_value(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Directory entries as the JSON front ends list them, sorted by name.
pub fn entries(list: &Value) -> Vec<Entry> {
    let mut all: Vec<Entry> = list
        .as_array()
        .unwrap_or_else(|| panic!("not a list of entries: {list}"))
        .iter()
        .map(|e| Entry {
            name: e["name"].as_str().expect("a name").to_owned(),
            kind: e["kind"].as_str().expect("a kind").to_owned(),
            size: e["size"].as_u64().expect("a size"),
        })
        .collect();
    all.sort();
    all
}

/// A streamed exec's connection, held open.
pub struct HttpRunning(TcpStream);

impl FrontEnd for HttpFront {
    type Running = HttpRunning;

    fn name(&self) -> &'static str {
        "http"
    }

    fn store(&self) -> &Path {
        self.server.cli.home.path()
    }

    fn create(&mut self, ask: &Ask) -> Answer<String> {
        let mut body = json!({});
        if let Some(image) = &ask.image {
            body["image"] = json!(image);
        }
        if let Some(pids) = ask.pids {
            body["pids"] = json!(pids);
        }
        let made = self.json("POST", "/v1/boxes", Some(body))?;
        Ok(made["id"].as_str().expect("an id").to_owned())
    }

    fn exec(&mut self, id: &str, argv: &[&str], stdin: &[u8]) -> Answer<Ran> {
        let ran = self.json(
            "POST",
            &format!("/v1/boxes/{id}/exec"),
            Some(json!({ "argv": argv, "stdin_base64": b64(stdin) })),
        )?;
        Ok(Ran {
            stdout: json_bytes("exec", &ran, "stdout"),
            stderr: json_bytes("exec", &ran, "stderr"),
            exit_code: ran["exit_code"].as_i64().expect("an exit code") as i32,
        })
    }

    fn start(&mut self, id: &str, argv: &[&str]) -> Answer<HttpRunning> {
        let mut stream = TcpStream::connect(&self.server.addr).expect("connect to tinybox serve");
        let body = json!({ "argv": argv }).to_string();
        let head = format!(
            "POST /v1/boxes/{id}/exec/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.server.addr,
            self.server.token,
            body.len()
        );
        stream.write_all(format!("{head}{body}").as_bytes()).expect("send the streamed exec");
        Ok(HttpRunning(stream))
    }

    fn cancel(&mut self, running: HttpRunning) -> Answer<()> {
        let _ = running.0.shutdown(std::net::Shutdown::Both);
        drop(running);
        Ok(())
    }

    fn write_file(&mut self, id: &str, path: &str, bytes: &[u8]) -> Answer<()> {
        self.call("PUT", &format!("/v1/boxes/{id}/files?path={}", query_value(path)), bytes, false).map(drop)
    }

    fn read_file(&mut self, id: &str, path: &str) -> Answer<Vec<u8>> {
        self.call("GET", &format!("/v1/boxes/{id}/files?path={}", query_value(path)), b"", false)
    }

    fn list_dir(&mut self, id: &str, path: &str) -> Answer<Vec<Entry>> {
        Ok(entries(&self.json("GET", &format!("/v1/boxes/{id}/dir?path={}", query_value(path)), None)?))
    }

    fn snapshot(&mut self, id: &str) -> Answer<String> {
        let record = self.json("POST", &format!("/v1/boxes/{id}/snapshots"), None)?;
        Ok(record["id"].as_str().expect("a snapshot id").to_owned())
    }

    fn remove(&mut self, id: &str) -> Answer<()> {
        self.json("DELETE", &format!("/v1/boxes/{id}"), None).map(drop)
    }

    fn end_with_in_flight(&mut self, _running: &HttpRunning) -> Answer<()> {
        let status = self.server.stop();
        match status.success() {
            true => Ok(()),
            false => Err(Refused::Line(format!("tinybox serve ended with {status} on SIGTERM"))),
        }
    }
}
