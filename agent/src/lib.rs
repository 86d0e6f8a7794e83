//! tinybox's in-box agent, and the wire both sides speak: one agent for
//! every box that runs one, a microVM (over virtio-serial ports) and a
//! namespace image box (over a UNIX socket, `--listen`), so a fix lands in
//! every box at once. Its binary keeps the name `tinybox-microvm-agent`,
//! the name guests and their memory snapshots already hold
//! (docs/adr/0042-one-agent-crate.md).
//!
//! In a microVM the agent is `/sbin/tinybox-microvm-agent` in the initramfs
//! the driver builds. It serves each `tinybox.N` virtio-serial port on a thread of its
//! own; one connection to a port is one session, and a session runs at most
//! one command. The wire is in [`wire`], shared with the driver so the two
//! cannot drift. An allowlist box has one more port, whose connections
//! the agent multiplexes to the host's egress relay ([`mux`]).

#[cfg(feature = "host")]
pub mod host;
pub mod mux;
pub mod wire;
