//! A test host in a network namespace of our own: a veth pair and a TCP
//! listener that answers each connection. Never any address off this machine.

use std::process::{Child, Command, Stdio};

/// A listener inside a private network namespace, reachable over a veth.
pub struct TestHost {
    ns: String,
    veth: String,
    listener: Child,
    /// The namespace side's address.
    pub addr: String,
    pub port: u16,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

impl TestHost {
    /// Starts one, or `None` where namespaces cannot be made (not root).
    pub fn start(tag: &str) -> Option<TestHost> {
        if rustix::process::getuid().as_raw() != 0 || !crate::have("ip") {
            return None;
        }
        let id = std::process::id() % 10_000;
        let ns = format!("tbx-{tag}-{id}");
        let veth = format!("tbxh{id}");
        let peer = format!("tbxn{id}");
        // Private addresses on a link that exists only on this machine.
        let subnet = 16 + (id % 200);
        let (host_addr, addr) = (format!("10.254.{subnet}.1"), format!("10.254.{subnet}.2"));
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
        let port = 18_000 + (id % 1000) as u16;
        let server = format!(
            "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('{addr}',{port}))\ns.listen(8)\nprint('ready',flush=True)\nwhile True:\n c,_=s.accept()\n c.sendall(b'hello')\n c.close()\n"
        );
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
        Some(TestHost { ns, veth, listener, addr, port })
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
