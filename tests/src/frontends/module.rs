//! The module as a front end: the built cdylib loaded by a foreign host
//! (Python, ctypes) that stays up for the test and makes one
//! `tinybox_call` per line it is given; a command is started with
//! `exec.start` and cancelled with `exec.cancel`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Stdio};

use serde_json::{Value, json};

use super::{Answer, Ask, Entry, FrontEnd, Ran, Refused, b64, json_bytes};
use crate::{Cli, KillOnDrop};

/// The host: `[method, params]` a line in, the call's JSON result a line out.
const HOST: &str = r#"
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.tinybox_call.restype = ctypes.c_void_p
lib.tinybox_call.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
lib.tinybox_free.argtypes = [ctypes.c_void_p]
for line in sys.stdin:
    method, params = json.loads(line)
    r = lib.tinybox_call(method.encode(), json.dumps(params).encode())
    out = ctypes.string_at(r).decode()
    lib.tinybox_free(r)
    print(out, flush=True)
"#;

pub struct ModuleFront {
    pub cli: Cli,
    sandbox: String,
    _host: KillOnDrop,
    calls: ChildStdin,
    results: BufReader<ChildStdout>,
}

impl ModuleFront {
    pub fn start(sandbox: &str) -> ModuleFront {
        let cli = Cli::new();
        let mut cmd = std::process::Command::new("python3");
        cmd.arg("-c").arg(HOST).arg(crate::module::library());
        crate::module::host_env(&mut cmd, cli.home.path());
        let mut child =
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("start python3");
        let calls = child.stdin.take().expect("stdin");
        let results = BufReader::new(child.stdout.take().expect("stdout"));
        ModuleFront { cli, sandbox: sandbox.to_owned(), _host: KillOnDrop(child), calls, results }
    }

    /// One `tinybox_call`: its `ok` result, or its error's message as the refusal.
    fn call(&mut self, method: &str, mut params: Value) -> Answer<Value> {
        params["store"] = json!(self.cli.home.path());
        writeln!(self.calls, "{}", json!([method, params])).expect("send a call to the host");
        self.calls.flush().expect("send a call to the host");
        let mut line = String::new();
        self.results.read_line(&mut line).expect("read the host's answer");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{method}: not JSON ({e}): {line:?}"));
        match v.get("ok") {
            Some(ok) => Ok(ok.clone()),
            None => Err(Refused::Line(
                v["error"]["message"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{method}: neither ok nor error: {v}"))
                    .to_owned(),
            )),
        }
    }
}

/// A started command's handle.
pub struct ModuleRunning(String);

impl FrontEnd for ModuleFront {
    type Running = ModuleRunning;

    fn name(&self) -> &'static str {
        "module"
    }

    fn store(&self) -> &Path {
        self.cli.home.path()
    }

    fn create(&mut self, ask: &Ask) -> Answer<String> {
        let mut params = json!({ "sandbox": self.sandbox, "ttl_secs": 600 });
        if let Some(image) = &ask.image {
            params["image"] = json!(image);
        }
        if let Some(pids) = ask.pids {
            params["pids"] = json!(pids);
        }
        if ask.untrusted {
            params["untrusted"] = json!(true);
        }
        let made = self.call("create", params)?;
        Ok(made["id"].as_str().unwrap_or_else(|| panic!("create: no id in {made}")).to_owned())
    }

    fn exec(&mut self, id: &str, argv: &[&str], stdin: &[u8]) -> Answer<Ran> {
        let ran = self.call("exec", json!({ "id": id, "argv": argv, "stdin_base64": b64(stdin) }))?;
        Ok(Ran {
            stdout: json_bytes("exec", &ran, "stdout"),
            stderr: json_bytes("exec", &ran, "stderr"),
            exit_code: ran["exit_code"].as_i64().expect("an exit code") as i32,
        })
    }

    fn start(&mut self, id: &str, argv: &[&str]) -> Answer<ModuleRunning> {
        let started = self.call("exec.start", json!({ "id": id, "argv": argv }))?;
        Ok(ModuleRunning(started["exec"].as_str().expect("an exec handle").to_owned()))
    }

    fn cancel(&mut self, running: ModuleRunning) -> Answer<()> {
        self.call("exec.cancel", json!({ "exec": running.0 }))?;
        let ended = self.call("exec.wait", json!({ "exec": running.0 }))?;
        match ended["cancelled"] == json!(true) {
            true => Ok(()),
            false => Err(Refused::Line(format!("exec.wait after exec.cancel did not say cancelled: {ended}"))),
        }
    }

    fn write_file(&mut self, id: &str, path: &str, bytes: &[u8]) -> Answer<()> {
        self.call("fs.write", json!({ "id": id, "path": path, "content_base64": b64(bytes) })).map(drop)
    }

    fn read_file(&mut self, id: &str, path: &str) -> Answer<Vec<u8>> {
        let got = self.call("fs.read", json!({ "id": id, "path": path }))?;
        Ok(json_bytes("fs.read", &got, "content"))
    }

    fn list_dir(&mut self, id: &str, path: &str) -> Answer<Vec<Entry>> {
        let got = self.call("fs.list", json!({ "id": id, "path": path }))?;
        Ok(super::http::entries(&got["entries"]))
    }

    fn snapshot(&mut self, id: &str) -> Answer<String> {
        let record = self.call("snapshot", json!({ "id": id }))?;
        Ok(record["id"].as_str().unwrap_or_else(|| panic!("snapshot: no id in {record}")).to_owned())
    }

    fn remove(&mut self, id: &str) -> Answer<()> {
        let done = self.call("rm", json!({ "id": id }))?;
        // rm answers per box; a box it could not remove is listed with why.
        match done["failed"].as_array().is_some_and(|f| !f.is_empty()) {
            true => Err(Refused::Line(done["failed"][0]["error"].as_str().unwrap_or_default().to_owned())),
            false => Ok(()),
        }
    }

    fn end_with_in_flight(&mut self, _running: &ModuleRunning) -> Answer<()> {
        Err(Refused::Unoffered(
            "the module is no server: a box outlives the host process that made it, by design, until rm or its ttl",
        ))
    }
}
