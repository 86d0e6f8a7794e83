//! The relay against a fake agent (speaking `mux` frames on a socket where
//! QEMU's chardev would be) and fake proxies on UNIX sockets.

use super::*;
use tokio::net::UnixListener;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// The guest's side of the port, as a test drives it.
struct Agent {
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
}

impl Agent {
    /// Starts the relay on a port in `dir`, proxying to `proxy`, and opens
    /// its session as the agent does.
    async fn start(dir: &Path, proxy: &Path) -> (Agent, tokio::task::JoinHandle<io::Result<()>>) {
        let port = dir.join(PORT_SOCKET);
        let listener = UnixListener::bind(&port).unwrap();
        let relay = tokio::spawn({
            let (port, proxy) = (port.clone(), proxy.to_owned());
            async move { run(&port, &proxy).await }
        });
        let (s, _) = listener.accept().await.unwrap();
        let (rd, wr) = s.into_split();
        let mut agent = Agent { rd, wr };
        agent.send(Frame::Idle).await;
        let Frame::Begin(nonce) = agent.next().await.expect("a begin") else { panic!("not a begin") };
        agent.send(Frame::Sync(nonce)).await;
        (agent, relay)
    }

    async fn send(&mut self, f: Frame) {
        self.wr.write_all(&f.encode()).await.unwrap();
    }

    async fn next(&mut self) -> Option<Frame> {
        read_frame(&mut self.rd).await.unwrap()
    }

    /// Frames until stream `id` shuts, returning its bytes; other streams'
    /// data is added to `others`.
    async fn until_shut(&mut self, id: u32, others: &mut HashMap<u32, Vec<u8>>) -> Vec<u8> {
        let mut got = Vec::new();
        loop {
            match self.next().await.expect("the relay closed the port") {
                Frame::Data(i, d) if i == id => got.extend(d),
                Frame::Data(i, d) => others.entry(i).or_default().extend(d),
                Frame::Shut(i) if i == id => return got,
                Frame::Reset(i) if i == id => panic!("stream {id} was reset"),
                _ => {}
            }
        }
    }
}

/// A proxy that reads each connection to its end, then answers
/// `PREFIX` + what it read and closes.
fn answering_proxy(path: &Path, prefix: &'static [u8]) -> tokio::task::JoinHandle<()> {
    proxy_answering(path, move |got| [prefix, &got].concat())
}

/// A proxy that reads each connection to its end, then answers what
/// `answer` makes of it and closes.
fn proxy_answering(
    path: &Path,
    answer: impl Fn(Vec<u8>) -> Vec<u8> + Copy + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut got = Vec::new();
                s.read_to_end(&mut got).await.unwrap();
                s.write_all(&answer(got)).await.unwrap();
            });
        }
    })
}

#[tokio::test]
async fn streams_cross_both_ways_with_half_closes_and_a_restarted_proxy_is_reached_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = dir.path().join("proxy.sock");
    let first = answering_proxy(&proxy, b"first:");
    let (mut agent, relay) = Agent::start(dir.path(), &proxy).await;

    // Sent, then half-closed: the proxy reads to its end and still answers.
    agent.send(Frame::Open(1)).await;
    agent.send(Frame::Data(1, b"hello".to_vec())).await;
    agent.send(Frame::Shut(1)).await;
    let mut others = HashMap::new();
    assert_eq!(agent.until_shut(1, &mut others).await, b"first:hello");

    // The proxy restarted: a new socket of the same name.
    first.abort();
    std::fs::remove_file(&proxy).unwrap();
    let _second = answering_proxy(&proxy, b"second:");
    agent.send(Frame::Open(2)).await;
    agent.send(Frame::Data(2, b"again".to_vec())).await;
    agent.send(Frame::Shut(2)).await;
    assert_eq!(agent.until_shut(2, &mut others).await, b"second:again");
    assert!(others.is_empty(), "{others:?}");

    // The port closing (QEMU gone) ends the relay.
    drop(agent);
    relay.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_stream_given_no_credit_gets_one_window_and_the_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = dir.path().join("proxy.sock");
    const BIG: usize = 1 << 20;
    // "big" gets a MiB; anything else is answered as it is.
    proxy_answering(&proxy, |got| if got == b"big" { vec![b'x'; BIG] } else { got });
    let (mut agent, _relay) = Agent::start(dir.path(), &proxy).await;
    agent.send(Frame::Open(1)).await;
    agent.send(Frame::Data(1, b"big".to_vec())).await;
    agent.send(Frame::Shut(1)).await;
    // Read until the big stream has used its whole window, never crediting it.
    let mut big = 0usize;
    while big < mux::WINDOW as usize {
        match agent.next().await.unwrap() {
            Frame::Data(1, d) => big += d.len(),
            Frame::Shut(1) | Frame::Reset(1) => panic!("the big stream ended early"),
            _ => {}
        }
    }
    // Another stream meanwhile goes through whole, and the big one never
    // exceeded its window.
    agent.send(Frame::Open(2)).await;
    agent.send(Frame::Data(2, b"small".to_vec())).await;
    agent.send(Frame::Shut(2)).await;
    let mut others = HashMap::new();
    assert_eq!(agent.until_shut(2, &mut others).await, b"small");
    big += others.remove(&1).map_or(0, |d| d.len());
    assert_eq!(big, mux::WINDOW as usize, "data beyond the window without credit");
    // Credit given back as the bytes are written out: the rest follows,
    // then the shut. Credit beyond what was sent is not taken.
    agent.send(Frame::Credit(1, u32::MAX)).await;
    loop {
        match agent.next().await.unwrap() {
            Frame::Data(1, d) => {
                big += d.len();
                assert!(big <= BIG);
                agent.send(Frame::Credit(1, d.len() as u32)).await;
            }
            Frame::Shut(1) => break,
            Frame::Reset(1) => panic!("the big stream was reset"),
            _ => {}
        }
    }
    assert_eq!(big, BIG);
}

#[tokio::test]
async fn a_guest_sending_beyond_its_window_or_an_unreachable_proxy_resets_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = dir.path().join("proxy.sock");
    // A proxy that accepts and never reads: nothing is credited back
    // beyond what the socket's buffer takes.
    let listener = UnixListener::bind(&proxy).unwrap();
    let (held_tx, mut held) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let _ = held_tx.send(s);
        }
    });
    let (mut agent, _relay) = Agent::start(dir.path(), &proxy).await;
    agent.send(Frame::Open(1)).await;
    let _conn = held.recv().await.unwrap();
    let chunk = vec![b'y'; mux::CHUNK];
    // The relay's window plus whatever it credited (it writes into the
    // socket's buffer), plus more: it must reset the stream at some point.
    let (mut rd, mut wr) = (agent.rd, agent.wr);
    let sender = tokio::spawn(async move {
        loop {
            if wr.write_all(&Frame::Data(1, chunk.clone()).encode()).await.is_err() {
                return wr;
            }
        }
    });
    loop {
        match read_frame(&mut rd).await.unwrap().unwrap() {
            Frame::Reset(1) => break,
            Frame::Credit(1, _) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    sender.abort();

    // No proxy at all: the stream is reset, the relay goes on.
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, _relay) = Agent::start(dir.path(), &dir.path().join("absent.sock")).await;
    agent.send(Frame::Open(7)).await;
    assert_eq!(agent.next().await, Some(Frame::Reset(7)));
    agent.send(Frame::Open(8)).await;
    assert_eq!(agent.next().await, Some(Frame::Reset(8)));
}
