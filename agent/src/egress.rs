//! The guest's end of an allowlist box's egress (ADR 0020): a listener on
//! the guest's `127.0.0.1:PORT`, where the box's proxy variables point, and
//! every connection it accepts carried over the one egress port as a
//! stream of [`mux`] frames to the driver's relay on the host, which hands
//! each to the box's egress proxy. The guest has no NIC: this is its only
//! way out, and it decides nothing (the proxy does).
//!
//! Threads, as the rest of the agent: one reads the port and dispatches
//! frames, one accepts, and each stream has one thread per direction. A
//! stream's bytes towards the guest's client queue only as far as the
//! window the host was given ([`mux::WINDOW`]), so the port reader never
//! waits on a slow client; at most [`mux::MAX_STREAMS`] streams are open.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, mpsc};

use tinybox_agent::mux::{self, Frame, Window};

use crate::{Port, Writes, log, send_answer};

/// What the port reader hands a stream's writing thread.
enum Down {
    Data(Vec<u8>),
    Shut,
}

/// Credit to send towards the host, and whether the stream was reset.
struct Credit {
    state: Mutex<(u32, bool)>,
    changed: Condvar,
}

impl Credit {
    fn new() -> Credit {
        Credit { state: Mutex::new((mux::WINDOW, false)), changed: Condvar::new() }
    }

    /// Waits for credit; `None` once the stream was reset.
    fn wait(&self) -> Option<usize> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match *s {
                (_, true) => return None,
                (0, false) => s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner()),
                (n, false) => return Some(n as usize),
            }
        }
    }

    fn spend(&self, n: usize) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 = s.0.saturating_sub(n as u32);
    }

    fn give(&self, n: u32) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 = s.0.saturating_add(n).min(mux::WINDOW);
        self.changed.notify_all();
    }

    fn close(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.changed.notify_all();
    }
}

/// One open stream, as the port reader sees it.
struct Stream {
    socket: TcpStream,
    down: mpsc::Sender<Down>,
    window: Window,
    credit: Arc<Credit>,
}

impl Stream {
    /// Ends both directions: the writer's queue closes, the reader's read
    /// returns, and its credit wait too.
    fn kill(self) {
        let _ = self.socket.shutdown(Shutdown::Both);
        self.credit.close();
    }
}

struct Shared {
    port: Port,
    /// The open streams, and whether a host session is on.
    streams: Mutex<(HashMap<u32, Stream>, bool)>,
    /// Streams whose threads still run; the acceptor waits below the cap.
    running: Mutex<usize>,
    slot_freed: Condvar,
}

impl Shared {
    fn send(&self, frame: &Frame) -> io::Result<()> {
        self.port.send_raw(&frame.encode())
    }

    fn remove(&self, id: u32) -> Option<Stream> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner()).0.remove(&id)
    }

    /// Ends every stream; `on` says whether a new session begins.
    fn reset_all(&self, on: bool) {
        let old: Vec<Stream> = {
            let mut s = self.streams.lock().unwrap_or_else(|p| p.into_inner());
            s.1 = on;
            s.0.drain().map(|(_, st)| st).collect()
        };
        old.into_iter().for_each(Stream::kill);
    }
}

/// Held by both threads of a stream: the last to end frees its slot and
/// forgets the stream.
struct Slot {
    shared: Arc<Shared>,
    id: u32,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.remove(self.id);
        *self.shared.running.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        self.shared.slot_freed.notify_all();
    }
}

/// Serves the egress port `dev`, with the listener on `127.0.0.1:port`.
pub fn serve(dev: &Path, port: u16) -> io::Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    let file = Arc::new(std::fs::OpenOptions::new().read(true).write(true).open(dev)?);
    let shared = Arc::new(Shared {
        port: Port { file, writing: Arc::new(Mutex::new(())) },
        streams: Mutex::new((HashMap::new(), false)),
        running: Mutex::new(0),
        slot_freed: Condvar::new(),
    });
    {
        let shared = shared.clone();
        std::thread::spawn(move || accept(&shared, &listener));
    }
    loop {
        // Until a host connects: the guest kernel holds this write (no
        // other frame in between: a stream thread of the session that
        // ended may still try to send).
        if let Err(e) = shared.port.send_waiting(&Frame::Idle.encode()) {
            log(format_args!("{}: {e}", dev.display()));
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        session(&shared);
        shared.reset_all(false);
    }
}

/// One host session: from its begin until the host goes.
fn session(shared: &Arc<Shared>) {
    // Buffered: a frame's header and payload in one read where they came
    // together (every system call counts in an emulated guest).
    let mut reader = io::BufReader::with_capacity(4 * mux::CHUNK, &shared.port);
    loop {
        let frame = match mux::read_frame(&mut reader) {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                log(format_args!("egress port: {e}"));
                return;
            }
        };
        match frame {
            Frame::Begin(nonce) => {
                shared.reset_all(true);
                // Never dropped for a port that only looks closed (see `answer`).
                if send_answer(&shared.port, &Frame::Sync(nonce).encode()).is_err() {
                    return;
                }
            }
            Frame::Data(id, data) => {
                let mut s = shared.streams.lock().unwrap_or_else(|p| p.into_inner());
                let Some(st) = s.0.get_mut(&id) else { continue };
                if !st.window.receive(data.len()) {
                    log(format_args!("egress stream {id}: the host sent more than its window; reset"));
                    let st = s.0.remove(&id).expect("just found");
                    drop(s);
                    st.kill();
                    let _ = shared.send(&Frame::Reset(id));
                    continue;
                }
                let _ = st.down.send(Down::Data(data));
            }
            Frame::Credit(id, n) => {
                if let Some(st) = shared.streams.lock().unwrap_or_else(|p| p.into_inner()).0.get(&id) {
                    st.credit.give(n);
                }
            }
            Frame::Shut(id) => {
                if let Some(st) = shared.streams.lock().unwrap_or_else(|p| p.into_inner()).0.get(&id) {
                    let _ = st.down.send(Down::Shut);
                }
            }
            Frame::Reset(id) => {
                if let Some(st) = shared.remove(id) {
                    st.kill();
                }
            }
            // Only the guest opens streams, idles or syncs.
            Frame::Open(_) | Frame::Idle | Frame::Sync(_) => {}
        }
    }
}

/// Accepts connections while a host session is on (others are closed at
/// once: nothing could carry them), never more than the cap at a time.
fn accept(shared: &Arc<Shared>, listener: &TcpListener) {
    let mut next_id: u32 = 0;
    loop {
        {
            let mut running = shared.running.lock().unwrap_or_else(|p| p.into_inner());
            while *running >= mux::MAX_STREAMS {
                running = shared.slot_freed.wait(running).unwrap_or_else(|p| p.into_inner());
            }
        }
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) => {
                log(format_args!("egress listener: {e}"));
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        let _ = client.set_nodelay(true);
        let (Ok(reading), Ok(writing)) = (client.try_clone(), client.try_clone()) else { continue };
        next_id = next_id.wrapping_add(1);
        let id = next_id;
        let (down, queue) = mpsc::channel();
        let credit = Arc::new(Credit::new());
        {
            let mut s = shared.streams.lock().unwrap_or_else(|p| p.into_inner());
            if !s.1 {
                continue;
            }
            s.0.insert(id, Stream { socket: client, down, window: Window::default(), credit: credit.clone() });
            *shared.running.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        }
        let slot = Arc::new(Slot { shared: shared.clone(), id });
        if shared.send(&Frame::Open(id)).is_err() {
            if let Some(st) = shared.remove(id) {
                st.kill();
            }
            continue;
        }
        let (up_slot, up_shared) = (slot.clone(), shared.clone());
        std::thread::spawn(move || up(&up_shared, id, reading, &credit, up_slot));
        let down_shared = shared.clone();
        std::thread::spawn(move || down_to(&down_shared, id, writing, &queue, slot));
    }
}

/// The client's bytes to the host, within the credit the host gives.
fn up(shared: &Shared, id: u32, mut client: TcpStream, credit: &Credit, _slot: Arc<Slot>) {
    let mut buf = vec![0u8; mux::CHUNK];
    while let Some(room) = credit.wait() {
        let n = match client.read(&mut buf[..room.min(mux::CHUNK)]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        credit.spend(n);
        if shared.send(&Frame::Data(id, buf[..n].to_vec())).is_err() {
            return;
        }
    }
    let _ = shared.send(&Frame::Shut(id));
}

/// The host's bytes to the client, credited back once written: in one
/// frame for everything written while more was queued (a frame less per
/// chunk costs the emulated guest a system call), and at once whenever the
/// queue runs dry or a quarter of the window is owed, so the host never
/// waits on credit this side holds.
fn down_to(shared: &Shared, id: u32, mut client: TcpStream, queue: &mpsc::Receiver<Down>, _slot: Arc<Slot>) {
    let credit = |n: u32| {
        // The window first: the host may send again the moment it reads the credit.
        if let Some(st) = shared.streams.lock().unwrap_or_else(|p| p.into_inner()).0.get_mut(&id) {
            st.window.credit(n);
        }
        let _ = shared.send(&Frame::Credit(id, n));
    };
    let mut owed: u32 = 0;
    loop {
        let item = match queue.try_recv() {
            Ok(item) => item,
            Err(mpsc::TryRecvError::Empty) => {
                if owed > 0 {
                    credit(std::mem::take(&mut owed));
                }
                match queue.recv() {
                    Ok(item) => item,
                    Err(_) => break,
                }
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
        };
        match item {
            Down::Data(data) => {
                if client.write_all(&data).is_err() {
                    // The client went: the host's side of it ends too.
                    let _ = shared.send(&Frame::Reset(id));
                    if let Some(st) = shared.remove(id) {
                        st.kill();
                    }
                    return;
                }
                owed += data.len() as u32;
                if owed >= mux::WINDOW / 4 {
                    credit(std::mem::take(&mut owed));
                }
            }
            Down::Shut => {
                let _ = client.shutdown(Shutdown::Write);
                return;
            }
        }
    }
    // The stream was reset.
    let _ = client.shutdown(Shutdown::Both);
}
