//! The host's end of an allowlist box's egress (ADR 0020): a detached
//! process, this driver's own binary in a hidden mode
//! (`tinybox-driver-microvm --egress-relay DIR/egress.sock PROXY_SOCKET`),
//! that holds the VM's egress port (a QEMU chardev socket in the box's
//! directory) and, for every stream the guest agent opens on it (see the
//! agent's `mux`), connects to the box's egress proxy and copies both ways,
//! half-closes included.
//!
//! QEMU outlives the driver, so the relay must too. Its pid is in
//! `relay.pid` and its command line names the box's directory, so
//! `create::tear_down` finds and stops it from the record alone, like
//! passt. It ends by itself when QEMU closes the port. It connects to the
//! proxy by name for each stream, relative to the proxy's directory (its
//! working directory): a proxy core started again after it died listens on
//! a new socket of the same name, and the next stream reaches it.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tinybox_agent::mux::{self, Frame, Window};
use tinybox_sdk::protocol::DriverError;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::vm::{self, PORT_SOCKET, whole_argument};

/// The relay's pid, written by the driver that started it.
pub const PID: &str = "relay.pid";
/// The relay's stderr.
pub const LOG: &str = "relay.log";
/// What the relay prints once its session with the agent is open.
const READY: &str = "ready";
/// How long a starting relay may take to open its session (the agent is
/// up already: the create waited for its hello).
const READY_LIMIT: Duration = Duration::from_secs(30);

/// The relay's arguments (after the program) for the box in `dir`.
pub fn args(dir: &Path, proxy_socket: &Path) -> Result<Vec<String>, String> {
    Ok(vec![
        "--egress-relay".into(),
        whole_argument("the box directory", &dir.join(PORT_SOCKET))?,
        whole_argument("the egress proxy's socket", proxy_socket)?,
    ])
}

/// Starts the relay for the box in `dir` and waits until its session with
/// the agent is open.
pub async fn start(dir: &Path, proxy_socket: &Path) -> Result<(), DriverError> {
    let program = std::env::current_exe()
        .map_err(|e| DriverError::failed(format!("cannot find this driver's own program for the egress relay: {e}")))?;
    let args = args(dir, proxy_socket).map_err(DriverError::invalid)?;
    let log_path = dir.join(LOG);
    let log = std::fs::File::create(&log_path)
        .map_err(|e| DriverError::failed(format!("cannot make {}: {e}", log_path.display())))?;
    let mut child = tokio::process::Command::new(&program)
        .args(&args)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| DriverError::failed(format!("cannot start the egress relay {}: {e}", program.display())))?;
    if let Some(pid) = child.id() {
        let pid_file = dir.join(PID);
        std::fs::write(&pid_file, format!("{pid}\n"))
            .map_err(|e| DriverError::failed(format!("cannot write {}: {e}", pid_file.display())))?;
    }
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    let ready = tokio::time::timeout(READY_LIMIT, stdout.read_line(&mut line)).await;
    if matches!(ready, Ok(Ok(_))) && line.trim() == READY {
        // Not waited for: it outlives this driver, as QEMU does.
        drop(child);
        return Ok(());
    }
    let _ = child.start_kill();
    let said = std::fs::read_to_string(&log_path).unwrap_or_default();
    Err(DriverError::failed(format!(
        "the egress relay did not open its session with the guest agent{}: {}",
        if ready.is_err() { format!(" within {}s", READY_LIMIT.as_secs()) } else { String::new() },
        if said.trim().is_empty() { "it said nothing".to_owned() } else { said.trim().replace('\n', " | ") }
    )))
}

/// Held (flock) by whoever checks or starts the relay, so two commands
/// starting at once never start two (the port takes one host at a time).
const LOCK: &str = "relay.lock";

/// Starts the relay again if it is not running (killed behind tinybox's
/// back): the next command's connections go out again.
pub async fn ensure(dir: &Path, proxy_socket: &Path) -> Result<(), DriverError> {
    if vm::live_pid(&dir.join(PID), dir).is_some() {
        return Ok(());
    }
    let path = dir.join(LOCK);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| DriverError::failed(format!("cannot open {}: {e}", path.display())))?;
    let _lock = tokio::task::spawn_blocking(move || fs4::FileExt::lock(&file).map(|()| file))
        .await
        .map_err(|e| DriverError::failed(format!("waiting for {} failed: {e}", path.display())))?
        .map_err(|e| DriverError::failed(format!("cannot lock the egress relay's lock: {e}")))?;
    if vm::live_pid(&dir.join(PID), dir).is_some() {
        return Ok(());
    }
    start(dir, proxy_socket).await
}

/// The hidden mode's entry point, given the port's and the proxy's
/// sockets; its exit status.
pub fn main(port: &str, proxy: &str) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tinybox egress relay: cannot start: {e}");
            return 1;
        }
    };
    // Connect to the proxy by its name in its directory: a store's path may
    // be longer than a socket address holds.
    let proxy = Path::new(proxy);
    let (Some(proxy_dir), Some(proxy_name)) = (proxy.parent(), proxy.file_name()) else {
        eprintln!("tinybox egress relay: {} is not a socket in a directory", proxy.display());
        return 1;
    };
    if let Err(e) = std::env::set_current_dir(proxy_dir) {
        eprintln!("tinybox egress relay: cannot enter {}: {e}", proxy_dir.display());
        return 1;
    }
    match runtime.block_on(run(Path::new(port), Path::new(proxy_name))) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tinybox egress relay: {e}");
            1
        }
    }
}

/// Reads one frame; `None` at a clean end of the port.
async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Option<Frame>> {
    let mut h = [0u8; mux::HEADER];
    let mut got = 0;
    while got < h.len() {
        match r.read(&mut h[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the port ended inside a frame")),
            n => got += n,
        }
    }
    let mut payload = vec![0u8; Frame::payload_len(h)?];
    r.read_exact(&mut payload).await?;
    Frame::decode(h, payload).map(Some)
}

/// What the port reader hands a stream's writer.
enum Down {
    Data(Vec<u8>),
    Shut,
}

/// One stream, as the port reader sees it; removing it ends the stream.
struct Entry {
    down: mpsc::UnboundedSender<Down>,
    window: Window,
    /// Bytes this side may still send towards the guest.
    credit: Arc<Semaphore>,
    _reset: oneshot::Sender<()>,
}

type Streams = Arc<Mutex<HashMap<u32, Entry>>>;

fn lock(streams: &Streams) -> std::sync::MutexGuard<'_, HashMap<u32, Entry>> {
    streams.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves the port `port` until it closes, each stream connecting to
/// `proxy` afresh; once the session is open, says so on stdout.
async fn run(port: &Path, proxy: &Path) -> io::Result<()> {
    let proxy_name = proxy.to_owned();
    let (rd, mut wr) = UnixStream::connect(port)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("cannot connect to {}: {e}", port.display())))?
        .into_split();
    let nonce = crate::session::nonce();
    wr.write_all(&Frame::Begin(nonce.to_vec()).encode()).await?;
    let mut rd = rd;
    let rest = crate::session::skip_to(&mut rd, &Frame::Sync(nonce.to_vec()).encode()).await?;
    let mut reader = AsyncReadExt::chain(std::io::Cursor::new(rest), rd);
    println!("{READY}");

    let (frames, mut outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        while let Some(frame) = outgoing.recv().await {
            if wr.write_all(&frame).await.is_err() {
                break;
            }
        }
    });
    let streams: Streams = Arc::default();
    let send = |f: Frame| {
        let _ = frames.send(f.encode());
    };
    let result = loop {
        let frame = match read_frame(&mut reader).await {
            Ok(Some(f)) => f,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        match frame {
            Frame::Open(id) => {
                let mut map = lock(&streams);
                if map.len() >= mux::MAX_STREAMS || map.contains_key(&id) {
                    drop(map);
                    send(Frame::Reset(id));
                    continue;
                }
                let (down, queue) = mpsc::unbounded_channel();
                let credit = Arc::new(Semaphore::new(mux::WINDOW as usize));
                let (reset, on_reset) = oneshot::channel();
                map.insert(id, Entry { down, window: Window::default(), credit: credit.clone(), _reset: reset });
                let (frames, streams, name) = (frames.clone(), streams.clone(), proxy_name.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        _ = on_reset => {}
                        () = stream(id, &name, &frames, queue, &credit, &streams) => {}
                    }
                    lock(&streams).remove(&id);
                });
            }
            Frame::Data(id, data) => {
                let mut map = lock(&streams);
                let Some(e) = map.get_mut(&id) else { continue };
                if !e.window.receive(data.len()) {
                    map.remove(&id);
                    drop(map);
                    eprintln!("tinybox egress relay: stream {id} sent more than its window; reset");
                    send(Frame::Reset(id));
                    continue;
                }
                let _ = e.down.send(Down::Data(data));
            }
            Frame::Credit(id, n) => {
                if let Some(e) = lock(&streams).get_mut(&id) {
                    // Never more in hand than the window: a guest's extra
                    // credit would have this side buffer without bound.
                    let room = (mux::WINDOW as usize).saturating_sub(e.credit.available_permits());
                    e.credit.add_permits((n as usize).min(room));
                }
            }
            Frame::Shut(id) => {
                if let Some(e) = lock(&streams).get(&id) {
                    let _ = e.down.send(Down::Shut);
                }
            }
            Frame::Reset(id) => {
                lock(&streams).remove(&id);
            }
            Frame::Idle | Frame::Begin(_) | Frame::Sync(_) => {}
        }
    };
    writer.abort();
    result
}

/// One stream: a connection to the proxy, and both directions copied.
async fn stream(
    id: u32,
    proxy: &Path,
    frames: &mpsc::UnboundedSender<Vec<u8>>,
    mut queue: mpsc::UnboundedReceiver<Down>,
    credit: &Semaphore,
    streams: &Streams,
) {
    let send = |f: Frame| {
        let _ = frames.send(f.encode());
    };
    let (mut from_proxy, mut to_proxy) = match UnixStream::connect(proxy).await {
        Ok(s) => s.into_split(),
        Err(e) => {
            eprintln!("tinybox egress relay: cannot reach the egress proxy at {}: {e}", proxy.display());
            send(Frame::Reset(id));
            return;
        }
    };
    let upward = async {
        let mut buf = vec![0u8; mux::CHUNK];
        loop {
            let Ok(one) = credit.acquire().await else { return };
            one.forget();
            let extra = credit.available_permits().min(mux::CHUNK - 1);
            if let Ok(more) = credit.try_acquire_many(extra as u32) {
                more.forget();
            }
            let room = 1 + extra;
            let n = match from_proxy.read(&mut buf[..room]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            credit.add_permits(room - n);
            send(Frame::Data(id, buf[..n].to_vec()));
        }
        send(Frame::Shut(id));
    };
    let downward = async {
        while let Some(item) = queue.recv().await {
            match item {
                Down::Data(data) => {
                    if to_proxy.write_all(&data).await.is_err() {
                        send(Frame::Reset(id));
                        lock(streams).remove(&id);
                        return;
                    }
                    // The window first: the guest may send again the moment it reads the credit.
                    if let Some(e) = lock(streams).get_mut(&id) {
                        e.window.credit(data.len() as u32);
                    }
                    send(Frame::Credit(id, data.len() as u32));
                }
                Down::Shut => {
                    let _ = to_proxy.shutdown().await;
                    return;
                }
            }
        }
    };
    tokio::join!(upward, downward);
}

#[cfg(test)]
#[path = "relay_tests.rs"]
mod relay_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_names_the_box_directory_and_takes_paths_whole() {
        let a = args(Path::new("/run/a,b"), Path::new("/s/egress/default-box-1/proxy.sock")).unwrap();
        assert_eq!(a, ["--egress-relay", "/run/a,b/egress.sock", "/s/egress/default-box-1/proxy.sock"]);
        use std::os::unix::ffi::OsStrExt;
        let err = args(Path::new(std::ffi::OsStr::from_bytes(b"/run/\xfe")), Path::new("/p")).unwrap_err();
        assert!(err.contains("not valid UTF-8"), "{err}");
    }
}
