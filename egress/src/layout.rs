//! What one box's proxy directory holds, by name. Core makes the
//! directory and writes the policy; the proxy (`tinybox-egress serve`)
//! writes the rest. Shared here so the two never disagree.

/// The allowlist, as [`crate::Policy`] serializes it: a JSON list of entries.
pub const POLICY: &str = "policy.json";
/// What a box may see of its proxy, and all it may: the one subdirectory
/// a sandbox binds into a box (whole, so a proxy started again is found at
/// the same path), holding the socket and, with secrets, the CA bundle.
/// Never the directory itself: its lock, held by a box, would stall every
/// command of that box's, and its policy and logs are the host's.
pub const BOX_DIR: &str = "box";
/// The proxy's UNIX socket, bound relative to the directory (so the
/// directory's path may be longer than a socket address holds).
pub const SOCKET: &str = "box/proxy.sock";
/// The decision log, one JSON line per client connection.
pub const DECISIONS: &str = "decisions.jsonl";
/// The proxy's pid, written (atomically) once it listens.
pub const PID: &str = "pid";
/// The proxy's own stderr.
pub const STDERR: &str = "proxy.log";
/// Held (flock) by whoever checks or starts the proxy.
pub const LOCK: &str = "lock";
/// What the proxy prints on stdout, one line, once it listens.
pub const READY: &str = "ready";

/// What a proxy that injects secrets is told (ADR 0032): an
/// [`crate::InjectRules`], written by core when the box is made and kept,
/// so placeholders stay the box's for its life. Never a value: those come
/// on the proxy's standard input.
pub const SECRETS: &str = "secrets.json";
/// The bundle a box with secrets trusts: the system's roots and the CA
/// the proxy made at its start, written by the proxy.
pub const CA_BUNDLE: &str = "box/ca-bundle.pem";
/// In core's environment, passed on to the proxies it starts: a PEM file of
/// more roots the proxy trusts upstream when it intercepts (the tests' CA).
pub const UPSTREAM_CA_VAR: &str = "TINYBOX_EGRESS_CA";

/// Test-only, for the conformance suite's negative control: `1` in the
/// proxy's environment (core passes it on from its own) turns the SNI check
/// off (`Config::check_sni`), so the kit's SNI claim can be seen to fail.
/// Nothing but tests/tests/verify_egress.rs sets it (ADR 0020).
pub const UNCHECKED_SNI_VAR: &str = "TINYBOX_EGRESS_TEST_UNCHECKED_SNI";
