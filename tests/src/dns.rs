//! A tiny DNS server on 127.0.0.1 for test names only: A records for the
//! names it is given, NXDOMAIN for every other name, no AAAA answers. An
//! egress proxy is pointed at it with `TINYBOX_EGRESS_RESOLVER`, so test
//! names never reach a real resolver. (The egress crate's own suites have
//! an async one; this one is a thread, for suites that drive the CLI.)

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A running server; dropped, it stops.
pub struct DnsServer {
    /// Where it answers, `127.0.0.1:PORT`.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DnsServer {
    /// Answers A queries for `names` (lowercase, no trailing dot).
    pub fn start(names: &[(&str, Ipv4Addr)]) -> DnsServer {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind the test DNS server");
        let addr = socket.local_addr().expect("its address");
        // Woken this often to see whether it should stop.
        socket.set_read_timeout(Some(Duration::from_millis(100))).expect("a read timeout");
        let names: Vec<(String, Ipv4Addr)> = names.iter().map(|(n, ip)| ((*n).to_owned(), *ip)).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while !stopping.load(Ordering::SeqCst) {
                let Ok((n, peer)) = socket.recv_from(&mut buf) else { continue };
                if let Some(reply) = answer(&buf[..n], &names) {
                    let _ = socket.send_to(&reply, peer);
                }
            }
        });
        DnsServer { addr, stop, thread: Some(thread) }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The reply to one query: the header, the question, and one A record when
/// the name is known and the type is A (1).
pub fn answer(query: &[u8], names: &[(String, Ipv4Addr)]) -> Option<Vec<u8>> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = *query.get(at)? as usize;
        at += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(at..at + len)?).to_ascii_lowercase());
        at += len;
    }
    let qtype = u16::from_be_bytes([*query.get(at)?, *query.get(at + 1)?]);
    let question = query.get(12..at + 4)?;
    let name = labels.join(".");
    let found = names.iter().find(|(n, _)| *n == name).map(|(_, ip)| *ip);
    let mut out = query.get(..2)?.to_vec();
    let rcode = if found.is_some() { 0 } else { 3 };
    out.extend_from_slice(&[0x81, 0x80 | rcode]);
    let answers = u8::from(found.is_some() && qtype == 1);
    out.extend_from_slice(&[0, 1, 0, answers, 0, 0, 0, 0]);
    out.extend_from_slice(question);
    if let (Some(ip), 1) = (found, answers) {
        out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        out.extend_from_slice(&ip.octets());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `name`, type `qtype`, id 0x1234.
    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&[0, 1]);
        q
    }

    #[test]
    fn a_known_name_gets_its_address_and_another_nxdomain_over_udp() {
        let server = DnsServer::start(&[("allowed.test", Ipv4Addr::new(10, 254, 1, 2))]);
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 512];
        client.send_to(&query("Allowed.test", 1), server.addr).unwrap();
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..2], [0x12, 0x34], "the query's id");
        assert_eq!(buf[3] & 0x0f, 0, "no error");
        assert_eq!(&buf[n - 4..n], [10, 254, 1, 2]);
        client.send_to(&query("other.test", 1), server.addr).unwrap();
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(buf[3] & 0x0f, 3, "NXDOMAIN");
        assert_eq!(buf[7], 0, "no answer");
        assert!(n > 12);
    }
}
