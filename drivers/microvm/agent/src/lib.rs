//! The guest agent of the microvm sandbox, and the wire both sides speak.
//!
//! The agent is `/sbin/tinybox-microvm-agent` in the initramfs the driver
//! builds. It serves each `tinybox.N` virtio-serial port on a thread of its
//! own; one connection to a port is one session, and a session runs at most
//! one command. The wire is in [`wire`], shared with the driver so the two
//! cannot drift. An allowlist box has one more port, whose connections
//! the agent multiplexes to the host's egress relay ([`mux`]).

#[cfg(feature = "host")]
pub mod host;
pub mod mux;
pub mod wire;
