//! Egress by allowlist (ADR 0020), core's side: the request rules
//! (`rules`), where one box's proxy lives (`ProxyDir`, derived from the
//! store, the namespace and the box alone), and starting, checking and
//! stopping that proxy (`process`). The proxy itself is the
//! `tinybox-egress` program; core links only its policy parser and its
//! decision log reader (crate `tinybox-egress` without its `proxy` feature).

mod dir;
mod error;
mod process;
mod rules;

pub use dir::{EGRESS_DIR, PROGRAM, ProxyDir};
pub use error::{AllowlistError, EgressError};
pub use process::{Injection, READY_TIMEOUT, STOP_TIMEOUT, end_secrets, ensure_running, live_pid, stop};
pub use rules::{check_spec, exceptions, requested};
pub use tinybox_egress::{Decision, Method, Verdict};
