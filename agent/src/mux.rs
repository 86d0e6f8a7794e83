//! The egress multiplexer's frames: every TCP connection a program in an
//! allowlist box makes to the agent's `127.0.0.1:PORT` crosses one
//! virtio-serial port (named [`PORT_NAME`]) as a stream of its own, and the
//! driver's relay on the host opens a connection to the box's egress proxy
//! for each (ADR 0020). Shared by both ends so the two cannot drift.
//!
//! A frame is a kind byte, the stream's id (`u32` LE), a payload length
//! (`u32` LE) and the payload.
//!
//! 1. While no host is connected the agent writes [`Frame::Idle`], a write
//!    the guest kernel holds until one connects. The host sends
//!    [`Frame::Begin`] with a nonce and skips everything until the exact
//!    [`Frame::Sync`] with it; the agent resets every stream of an earlier
//!    session first (as the command ports do, see [`crate::wire`]).
//! 2. Only the guest opens streams: [`Frame::Open`] with a fresh id (ids
//!    only grow, so a late frame of a stream that ended names no live one
//!    and is dropped).
//! 3. [`Frame::Data`] carries at most [`CHUNK`] bytes. Flow control is per
//!    stream and per direction: a sender has [`WINDOW`] bytes of credit,
//!    spends it on data and gets it back by [`Frame::Credit`] once the
//!    receiver has written the bytes to its own socket. So one slow stream
//!    holds at most a window of each side's memory and never stops the
//!    port being read for the others; data beyond the window is a broken
//!    peer, and that stream is reset.
//! 4. [`Frame::Shut`]: the sender will send no more data on the stream (a
//!    half-close; the other direction goes on). [`Frame::Reset`]: the
//!    stream is over both ways (a connection failed or was dropped).

use std::io::{self, Read};

/// The virtio-serial port's name.
pub const PORT_NAME: &str = "tinybox-egress";

/// The most data one frame carries.
pub const CHUNK: usize = 64 * 1024;

/// Bytes a sender may have unacknowledged on one stream, each way.
pub const WINDOW: u32 = 256 * 1024;

/// Streams the agent keeps open at once; it accepts no more connections
/// until one ends. With [`WINDOW`], the most the guest ever buffers.
pub const MAX_STREAMS: usize = 64;

/// The length of a session's nonce.
pub const NONCE: usize = 16;

/// The header: kind, stream id, payload length.
pub const HEADER: usize = 9;

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// guest → host: no session yet (the ready signal).
    Idle,
    /// host → guest: a new session, with its nonce.
    Begin(Vec<u8>),
    /// guest → host: the begin's nonce; the session's frames follow.
    Sync(Vec<u8>),
    /// guest → host: a new connection.
    Open(u32),
    /// either way: bytes of a stream.
    Data(u32, Vec<u8>),
    /// either way: the receiver wrote this many bytes of the stream out.
    Credit(u32, u32),
    /// either way: no more data from the sender on this stream.
    Shut(u32),
    /// either way: the stream is over, both ways.
    Reset(u32),
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl Frame {
    /// The frame's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, id, payload): (u8, u32, &[u8]) = match self {
            Frame::Idle => (b'i', 0, &[]),
            Frame::Begin(n) => (b'b', 0, n),
            Frame::Sync(n) => (b's', 0, n),
            Frame::Open(id) => (b'o', *id, &[]),
            Frame::Data(id, d) => (b'd', *id, d),
            Frame::Credit(id, n) => return Self::raw(b'c', *id, &n.to_le_bytes()),
            Frame::Shut(id) => (b'f', *id, &[]),
            Frame::Reset(id) => (b'r', *id, &[]),
        };
        Self::raw(kind, id, payload)
    }

    fn raw(kind: u8, id: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.push(kind);
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// The payload length a header announces, checked against what its kind
    /// may carry.
    pub fn payload_len(h: [u8; HEADER]) -> io::Result<usize> {
        let len = u32::from_le_bytes([h[5], h[6], h[7], h[8]]) as usize;
        let most = match h[0] {
            b'i' | b'o' | b'f' | b'r' => 0,
            b'b' | b's' => NONCE,
            b'c' => 4,
            b'd' => CHUNK,
            other => return Err(bad(format!("unknown egress frame kind {other:#04x}"))),
        };
        if len > most {
            return Err(bad(format!("egress frame {:?} of {len} bytes is larger than {most}", h[0] as char)));
        }
        Ok(len)
    }

    /// The frame of a header (see [`Frame::payload_len`]) and its payload.
    pub fn decode(h: [u8; HEADER], payload: Vec<u8>) -> io::Result<Frame> {
        let id = u32::from_le_bytes([h[1], h[2], h[3], h[4]]);
        let exact = |n: usize| {
            if payload.len() == n {
                Ok(())
            } else {
                Err(bad(format!("egress frame {:?} needs {n} bytes", h[0] as char)))
            }
        };
        Ok(match h[0] {
            b'i' => Frame::Idle,
            b'b' => {
                exact(NONCE)?;
                Frame::Begin(payload)
            }
            b's' => {
                exact(NONCE)?;
                Frame::Sync(payload)
            }
            b'o' => Frame::Open(id),
            b'd' => Frame::Data(id, payload),
            b'c' => {
                exact(4)?;
                Frame::Credit(id, u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]))
            }
            b'f' => Frame::Shut(id),
            b'r' => Frame::Reset(id),
            other => return Err(bad(format!("unknown egress frame kind {other:#04x}"))),
        })
    }
}

/// Reads one frame; `None` at a clean end of stream (between frames).
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Frame>> {
    let mut h = [0u8; HEADER];
    let mut got = 0;
    while got < HEADER {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the port ended inside a frame")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let mut payload = vec![0u8; Frame::payload_len(h)?];
    r.read_exact(&mut payload)?;
    Frame::decode(h, payload).map(Some)
}

/// The receiving side's account of one stream's window: data the peer may
/// still send before it must wait for credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    left: u32,
}

impl Default for Window {
    fn default() -> Self {
        Window { left: WINDOW }
    }
}

impl Window {
    /// `n` bytes arrived; false when the peer sent more than it was owed.
    pub fn receive(&mut self, n: usize) -> bool {
        match u32::try_from(n).ok().and_then(|n| self.left.checked_sub(n)) {
            Some(left) => {
                self.left = left;
                true
            }
            None => false,
        }
    }

    /// `n` bytes were written out and credited back to the peer.
    pub fn credit(&mut self, n: u32) {
        self.left = self.left.saturating_add(n).min(WINDOW);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_sequence() {
        let frames = [
            Frame::Idle,
            Frame::Begin(vec![7; NONCE]),
            Frame::Sync(vec![9; NONCE]),
            Frame::Open(1),
            Frame::Data(1, b"\x00\xffGET / HTTP/1.1\r\n".to_vec()),
            Frame::Data(u32::MAX, vec![b'x'; CHUNK]),
            Frame::Data(2, Vec::new()),
            Frame::Credit(1, WINDOW),
            Frame::Shut(1),
            Frame::Reset(3),
        ];
        let bytes: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        let mut r = &bytes[..];
        for want in &frames {
            assert_eq!(read_frame(&mut r).unwrap().as_ref(), Some(want));
        }
        assert_eq!(read_frame(&mut r).unwrap(), None, "a clean end between frames");
    }

    #[test]
    fn a_port_cut_inside_a_frame_is_an_error_not_an_end() {
        let frame = Frame::Data(5, b"hello".to_vec()).encode();
        for cut in 1..frame.len() {
            let err = read_frame(&mut &frame[..cut]).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "cut at {cut}");
        }
    }

    #[test]
    fn oversized_malformed_and_unknown_frames_are_refused_before_their_payload_is_read() {
        let mut big = Frame::Data(1, Vec::new()).encode();
        big[5..9].copy_from_slice(&((CHUNK + 1) as u32).to_le_bytes());
        let err = read_frame(&mut &big[..]).unwrap_err();
        assert!(err.to_string().contains(&format!("larger than {CHUNK}")), "{err}");
        let mut open = Frame::Open(1).encode();
        open[5] = 1;
        assert!(read_frame(&mut &open[..]).is_err(), "an open carries nothing");
        let short = Frame::raw(b'b', 0, b"short");
        assert!(read_frame(&mut &short[..]).unwrap_err().to_string().contains("needs 16 bytes"));
        let unknown = Frame::raw(b'Z', 0, b"");
        assert!(read_frame(&mut &unknown[..]).unwrap_err().to_string().contains("unknown egress frame kind 0x5a"));
    }

    #[test]
    fn a_window_holds_what_is_owed_and_refuses_more() {
        let mut w = Window::default();
        assert!(w.receive(WINDOW as usize - 10));
        assert!(w.receive(10));
        assert!(!w.receive(1), "a byte beyond the window");
        w.credit(100);
        assert!(!w.receive(101));
        assert!(w.receive(100));
        w.credit(u32::MAX);
        assert_eq!(w, Window::default(), "credit never grows the window past its size");
    }
}
