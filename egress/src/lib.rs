//! tinybox's egress proxy: a box reaches the network only through it, and it
//! lets through only what the box's allowlist names.
//!
//! - [`policy`]: `--allow-host` entries ([`Policy`], [`AllowEntry`]).
//! - [`addr`]: the address rule: local and special addresses are refused
//!   unless an address entry names them ([`check_address`], [`host_addresses`]).
//! - [`resolve`]: the proxy's own name resolution ([`Resolve`],
//!   [`ResolverChoice`]).
//! - [`proxy`]: [`serve`] over a TCP or UNIX listener, [`Config`].
//! - [`log`]: the decision log and its reader ([`Decision`], [`read_decisions`]).
//!
//! One request per client connection: a `CONNECT host:port` tunnel whose
//! first bytes must be a TLS ClientHello naming `host`, or one plain
//! `http://` request with a `Content-Length` body, answered until the
//! upstream closes. See docs/adr/0020-egress-proxy.md.

pub mod addr;
mod count;
mod http;
pub mod log;
pub mod policy;
pub mod proxy;
pub mod resolve;
mod tls;

pub use addr::{check_address, host_addresses};
pub use log::{Decision, DecisionLog, LogError, Method, Verdict, read_decisions, read_decisions_file};
pub use policy::{AllowEntry, Policy, PolicyError, Target};
pub use proxy::{Config, Listener, Timeouts, handle_connection, serve};
pub use resolve::{DnsResolver, Resolve, ResolverChoice, StaticResolver, SystemResolver};
