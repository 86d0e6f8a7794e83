//! A test host in a network namespace of our own: a veth pair and a TCP
//! listener that answers each connection (with `hello`, or as a small HTTP
//! server). Never any address off this machine.

use std::process::{Child, Command, Stdio};

/// A listener inside a private network namespace, reachable over a veth.
pub struct TestHost {
    ns: String,
    veth: String,
    listener: Child,
    /// The namespace side's address.
    pub addr: String,
    /// This machine's side of the link (one of its own addresses while the host runs).
    pub host_addr: String,
    pub port: u16,
}

/// What the listener does with each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Sends `hello` and closes, on a port of its own.
    Hello,
    /// Reads one HTTP request head and answers `200` with the body
    /// `hello from the test host: <request line>`, on port [`HTTP_PORT`].
    Http,
}

/// The port [`Service::Http`] listens on.
pub const HTTP_PORT: u16 = 8080;

/// The head of every `200` the HTTP test servers send, before `Content-Length`.
pub const OK_HEAD: &str = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n";

/// An HTTP test server on `addr:port` as a Python program (it prints
/// `ready` once it listens). It reads each request's head, and answers
/// with the bytes of the Python expression `answer`, which sees the
/// request line as `line`, `ok(body)` (a `200` with [`OK_HEAD`]) and
/// `hello(line)` (`ok` of `hello from the test host: <request line>`).
/// `prelude` runs first: data the answers use, listeners of its own.
pub fn http_program(addr: &str, port: u16, prelude: &str, answer: &str) -> String {
    let head = OK_HEAD.replace('\r', "\\r").replace('\n', "\\n");
    format!(
        r#"import socket,threading
def ok(body):
 return b'{head}Content-Length: %d\r\n\r\n' % len(body)+body
def hello(line):
 return ok(('hello from the test host: '+line+'\n').encode())
{prelude}
def serve(c):
 data=b''
 c.settimeout(10)
 try:
  while b'\r\n\r\n' not in data:
   d=c.recv(4096)
   if not d: break
   data+=d
  line=data.split(b'\r\n',1)[0].decode('latin1')
  reply={answer}
  c.settimeout(120)
  c.sendall(reply)
 except Exception: pass
 c.close()
{listen}"#,
        listen = serve_forever(addr, port)
    )
}

/// The end of every test server program: listen on `addr:port`, say
/// `ready`, and run `serve(c)` on a thread of its own for each connection.
fn serve_forever(addr: &str, port: u16) -> String {
    format!(
        "s=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('{addr}',{port}))\ns.listen(16)\n\
         print('ready',flush=True)\nwhile True:\n c,_=s.accept()\n threading.Thread(target=serve,args=(c,),daemon=True).start()\n"
    )
}

/// The listener for `service` on `addr:port`, a Python program that
/// prints `ready` once it listens.
fn server_program(service: Service, addr: &str, port: u16) -> String {
    match service {
        Service::Hello => {
            format!(
                "import socket,threading\ndef serve(c):\n c.sendall(b'hello')\n c.close()\n{}",
                serve_forever(addr, port)
            )
        }
        Service::Http => http_program(addr, port, "", "hello(line)"),
    }
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

impl TestHost {
    /// Starts one answering `hello`, or `None` where namespaces cannot be made (not root).
    pub fn start(tag: &str) -> Option<TestHost> {
        TestHost::serving(tag, Service::Hello)
    }

    /// Starts one running `service`, or `None` where namespaces cannot be made.
    pub fn serving(tag: &str, service: Service) -> Option<TestHost> {
        let port = match service {
            Service::Hello => 18_000 + (std::process::id() % 10_000 % 1000) as u16,
            Service::Http => HTTP_PORT,
        };
        TestHost::running(tag, port, &|addr| server_program(service, addr, port))
    }

    /// Starts one running the Python program `program(addr)` gives (it
    /// must print `ready` once it listens on `addr`, `port` its main port),
    /// or `None` where namespaces cannot be made.
    pub fn running(tag: &str, port: u16, program: &dyn Fn(&str) -> String) -> Option<TestHost> {
        if rustix::process::getuid().as_raw() != 0 || !crate::have("ip") {
            return None;
        }
        // One per test host: a suite's tests run in threads of one process,
        // and two hosts sharing a veth name or subnet would fail to start.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 10;
        let id = std::process::id() % 1200 * 10 + n;
        let ns = format!("tbx-{tag}-{id}");
        let veth = format!("tbxh{id}");
        let peer = format!("tbxn{id}");
        // Private addresses on a link that exists only on this machine: a
        // /30 of its own for each of the 12,000 ids, in 10.254.16-203.
        let (third, fourth) = (16 + id / 64, id % 64 * 4);
        let (host_addr, addr) = (format!("10.254.{third}.{}", fourth + 1), format!("10.254.{third}.{}", fourth + 2));
        let ok = ip(&["netns", "add", &ns])
            && ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer])
            && ip(&["link", "set", &peer, "netns", &ns])
            && ip(&["addr", "add", &format!("{host_addr}/30"), "dev", &veth])
            && ip(&["link", "set", &veth, "up"])
            && ip(&["-n", &ns, "addr", "add", &format!("{addr}/30"), "dev", &peer])
            && ip(&["-n", &ns, "link", "set", &peer, "up"])
            && ip(&["-n", &ns, "link", "set", "lo", "up"]);
        if !ok {
            let _ = ip(&["netns", "del", &ns]);
            let _ = ip(&["link", "del", &veth]);
            return None;
        }
        let server = program(&addr);
        let mut listener = Command::new("ip")
            .args(["netns", "exec", &ns, "python3", "-c", &server])
            .stdout(Stdio::piped())
            .spawn()
            .ok()?;
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(listener.stdout.take()?).read_line(&mut line).ok()?;
        if line.trim() != "ready" {
            let _ = listener.kill();
            return None;
        }
        Some(TestHost { ns, veth, listener, addr, host_addr, port })
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        let _ = self.listener.kill();
        let _ = self.listener.wait();
        let _ = ip(&["link", "del", &self.veth]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each program is valid Python that listens and answers as promised
    /// (run here on loopback; no namespace is needed to check the program).
    #[test]
    fn the_servers_answer_as_described() {
        use std::io::{BufRead, BufReader, Read, Write};
        if !crate::have("python3") {
            crate::skip("tinybox_tests::netns::tests::the_servers_answer_as_described", "python3 is not installed");
            return;
        }
        for (service, request, want) in [
            (Service::Hello, "", "hello".to_owned()),
            (
                Service::Http,
                "GET /x HTTP/1.1\r\nHost: a\r\n\r\n",
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 42\r\n\r\nhello from the test host: GET /x HTTP/1.1\n".to_owned(),
            ),
        ] {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let mut child = Command::new("python3")
                .args(["-c", &server_program(service, "127.0.0.1", port)])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "ready", "{service:?}");
            let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.write_all(request.as_bytes()).unwrap();
            let mut got = String::new();
            c.read_to_string(&mut got).unwrap();
            child.kill().unwrap();
            child.wait().unwrap();
            assert_eq!(got, want, "{service:?}");
        }
    }
}
