//! Frames between the driver (host) and the agent (guest) on one
//! virtio-serial port.
//!
//! A frame is a kind byte, a little-endian `u32` payload length, and the
//! payload: JSON for control frames, raw bytes for streams.
//!
//! Connections come and go on a port, and the guest cannot always tell when
//! one ended and the next began (a host may leave and the next arrive
//! before the guest has seen the first go). So a session is opened by the
//! host, in-band, with a nonce:
//!
//! 1. While no session is open, the agent writes [`Kind::Hello`] with a
//!    [`Hello`]. Its write blocks in the guest kernel until a host is
//!    connected: this first hello is the VM's ready signal.
//! 2. The host sends [`Kind::Begin`] with 16 random bytes, then reads and
//!    discards everything until the exact frame [`Kind::Sync`] carrying
//!    the same bytes: whatever came before it belonged to someone else.
//!    The agent answers a begin with that sync and a fresh hello, written
//!    once a host is connected: a begin can arrive before the guest has
//!    seen its host connect, and is never dropped for that.
//! 3. The host either closes (a health check: the hello was the answer) or
//!    sends [`Kind::Exec`] with an [`Exec`].
//! 4. While the command runs: the host sends [`Kind::Stdin`] (an empty
//!    payload closes the command's stdin), [`Kind::Signal`] and, for a
//!    command on a terminal ([`Exec::tty`]), [`Kind::Resize`]; the agent
//!    sends [`Kind::Stdout`] and [`Kind::Stderr`] (on a terminal, everything
//!    is stdout).
//! 5. The agent ends the session with exactly one [`Kind::Exit`] (an
//!    [`Exit`]). A command that could not start still ends with an exit
//!    (127, the shell's "cannot run"), with the reason on stderr.
//!
//! The host closing its end, or another begin arriving, ends the session:
//! the agent kills everything the command started.

use std::io::{self, Read};

use serde::{Deserialize, Serialize};

/// The largest payload either side accepts; streams are cut into frames
/// well below it.
pub const MAX_PAYLOAD: usize = 1 << 20;

/// How much of a stream one frame carries.
pub const CHUNK: usize = 32 * 1024;

/// The virtio-serial port names: `tinybox.0` answers health checks only,
/// `tinybox.1` ..= `tinybox.{EXEC_PORTS}` run commands.
pub const PORT_PREFIX: &str = "tinybox.";

/// Ports that run commands: at most this many commands at once per box.
pub const EXEC_PORTS: usize = 8;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// guest → host, JSON [`Hello`].
    Hello = b'H',
    /// host → guest, a 16-byte nonce: open a session.
    Begin = b'B',
    /// guest → host, the begin's nonce: the session's frames follow.
    Sync = b'S',
    /// host → guest, JSON [`Exec`].
    Exec = b'E',
    /// host → guest, bytes for the command's stdin; empty closes it.
    Stdin = b'I',
    /// host → guest, JSON [`Signal`]: signal the command's processes.
    Signal = b'K',
    /// guest → host, bytes the command wrote to stdout.
    Stdout = b'O',
    /// guest → host, bytes the command wrote to stderr.
    Stderr = b'R',
    /// guest → host, JSON [`Exit`]; the last frame of a session.
    Exit = b'X',
    /// host → guest, JSON [`Tty`]: the command's terminal has a new size.
    Resize = b'W',
}

impl Kind {
    pub fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            b'H' => Kind::Hello,
            b'B' => Kind::Begin,
            b'S' => Kind::Sync,
            b'E' => Kind::Exec,
            b'I' => Kind::Stdin,
            b'K' => Kind::Signal,
            b'O' => Kind::Stdout,
            b'R' => Kind::Stderr,
            b'X' => Kind::Exit,
            b'W' => Kind::Resize,
            _ => return None,
        })
    }
}

/// The agent's greeting: what the guest is, as the guest itself sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The agent's version (the workspace version).
    pub agent: String,
    /// The guest kernel's release.
    pub kernel: String,
    /// Online CPUs in the guest.
    pub cpus: u32,
    /// MemTotal from the guest's /proc/meminfo, in KiB.
    pub mem_total_kib: u64,
    /// The pids cap commands run under, when the guest applied one.
    #[serde(default)]
    pub pids_max: Option<u64>,
    /// Network interfaces other than loopback.
    #[serde(default)]
    pub interfaces: Vec<String>,
}

/// Run a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exec {
    pub argv: Vec<String>,
    /// The whole environment: nothing else is added.
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// Run on a terminal the agent makes in the guest, of this size, the
    /// command leading a session it controls. Absent: pipes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<Tty>,
}

/// A terminal's window size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tty {
    pub rows: u16,
    pub cols: u16,
}

/// Deliver a signal to every process of the running command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal {
    pub signal: i32,
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    #[serde(default)]
    pub code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
}

/// The length of a session's nonce.
pub const NONCE: usize = 16;

/// A frame that broke the rules.
fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Encodes one frame.
pub fn encode(kind: Kind, payload: &[u8]) -> Vec<u8> {
    debug_assert!(payload.len() <= MAX_PAYLOAD);
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(kind as u8);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Encodes a control frame.
pub fn encode_json<T: Serialize>(kind: Kind, value: &T) -> Vec<u8> {
    encode(kind, &serde_json::to_vec(value).expect("wire types serialize"))
}

/// Parses a frame header: its kind and payload length.
pub fn header(h: [u8; 5]) -> io::Result<(Kind, usize)> {
    let kind = Kind::from_byte(h[0]).ok_or_else(|| bad(format!("unknown frame kind {:#04x}", h[0])))?;
    let len = u32::from_le_bytes([h[1], h[2], h[3], h[4]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(bad(format!("frame of {len} bytes is larger than {MAX_PAYLOAD}")));
    }
    Ok((kind, len))
}

/// Reads one frame; `None` at a clean end of stream (between frames).
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<(Kind, Vec<u8>)>> {
    let mut h = [0u8; 5];
    let mut got = 0;
    while got < h.len() {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the stream ended inside a frame")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let (kind, len) = header(h)?;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some((kind, payload)))
}

/// Decodes a control frame's payload.
pub fn decode<T: for<'de> Deserialize<'de>>(kind: Kind, payload: &[u8]) -> io::Result<T> {
    serde_json::from_slice(payload).map_err(|e| bad(format!("bad {kind:?} frame: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_sequence() {
        let exec = Exec {
            argv: vec!["printf".into(), "a b\n".into()],
            env: vec![("K".into(), "v=w".into())],
            cwd: "/workspace".into(),
            tty: Some(Tty { rows: 24, cols: 80 }),
        };
        let mut buf = Vec::new();
        buf.extend(encode_json(Kind::Exec, &exec));
        buf.extend(encode(Kind::Stdin, b"\x00\xffbytes"));
        buf.extend(encode(Kind::Stdin, b""));
        buf.extend(encode_json(Kind::Resize, &Tty { rows: 50, cols: 132 }));
        let mut r = &buf[..];
        let (k, p) = read_frame(&mut r).unwrap().unwrap();
        assert_eq!(k, Kind::Exec);
        assert_eq!(decode::<Exec>(k, &p).unwrap(), exec);
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), (Kind::Stdin, b"\x00\xffbytes".to_vec()));
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), (Kind::Stdin, Vec::new()));
        let (k, p) = read_frame(&mut r).unwrap().unwrap();
        assert_eq!(decode::<Tty>(k, &p).unwrap(), Tty { rows: 50, cols: 132 });
        assert!(read_frame(&mut r).unwrap().is_none(), "a clean end between frames");
    }

    #[test]
    fn a_stream_cut_inside_a_frame_is_an_error_not_an_end() {
        let frame = encode(Kind::Stdout, b"hello");
        for cut in 1..frame.len() {
            let err = read_frame(&mut &frame[..cut]).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "cut at {cut}");
        }
    }

    #[test]
    fn unknown_kinds_and_oversized_frames_are_refused() {
        assert!(header([b'Z', 0, 0, 0, 0]).unwrap_err().to_string().contains("unknown frame kind 0x5a"));
        let big = ((MAX_PAYLOAD + 1) as u32).to_le_bytes();
        let err = header([b'O', big[0], big[1], big[2], big[3]]).unwrap_err();
        assert!(err.to_string().contains("larger than"), "{err}");
        assert_eq!(header([b'O', 0, 0, 16, 0]).unwrap(), (Kind::Stdout, MAX_PAYLOAD));
    }

    #[test]
    fn every_kind_byte_maps_back() {
        for k in [
            Kind::Hello,
            Kind::Begin,
            Kind::Sync,
            Kind::Exec,
            Kind::Stdin,
            Kind::Signal,
            Kind::Stdout,
            Kind::Stderr,
            Kind::Exit,
            Kind::Resize,
        ] {
            assert_eq!(Kind::from_byte(k as u8), Some(k));
        }
    }
}
