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
//!
//! - [`secrets`]: secrets a box uses but never reads (ADR 0032): the
//!   request's rules ([`SecretsSpec`]) and what the proxy is told ([`InjectRules`]).
//! - [`relay`]: the box's side, a loopback listener forwarding each
//!   connection to the proxy's UNIX socket while the box's command runs.
//! - [`serve_dir`]: one box's proxy as core starts it, from a directory
//!   whose files [`layout`] names.
//!
//! The cargo feature `proxy` (on by default) holds everything that runs:
//! the proxy, the resolvers, the relay and the `tinybox-egress` binary.
//! Without it the crate is [`Policy`] and [`read_decisions`] only, what
//! core needs to check a request and show a log.

pub mod addr;
#[cfg(feature = "proxy")]
mod count;
#[cfg(feature = "proxy")]
mod http;
#[cfg(feature = "proxy")]
pub mod inject;
pub mod layout;
pub mod log;
pub mod policy;
#[cfg(feature = "proxy")]
pub mod proxy;
#[cfg(feature = "proxy")]
pub mod relay;
#[cfg(feature = "proxy")]
pub mod resolve;
pub mod secrets;
#[cfg(feature = "proxy")]
pub mod serve_dir;
#[cfg(feature = "proxy")]
mod tls;

#[cfg(feature = "proxy")]
pub use addr::host_addresses;
pub use log::{Decision, DecisionLog, LogError, Method, Verdict, read_decisions, read_decisions_file};
pub use policy::check_address;
pub use policy::{AllowEntry, Policy, PolicyError, Target};
#[cfg(feature = "proxy")]
pub use proxy::{Config, Listener, Timeouts, handle_connection, serve};
#[cfg(feature = "proxy")]
pub use resolve::{DnsResolver, Resolve, ResolverChoice, StaticResolver, SystemResolver};
pub use secrets::{InjectRules, SecretError, SecretsSpec};
