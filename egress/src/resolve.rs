//! Name resolution, done by the proxy itself and never taken from the client:
//! the system resolver, a DNS server of the caller's choosing, or a fixed map.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use serde::{Deserialize, Serialize};

/// Turns a checked, normalized name into addresses.
#[async_trait]
pub trait Resolve: Send + Sync {
    /// Every address of `name`. An empty list is an answer, not an error.
    async fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>>;
}

/// Which resolver a proxy uses, as it is configured (and stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ResolverChoice {
    /// The system's resolver (`getaddrinfo`, `/etc/hosts` included).
    #[default]
    System,
    /// A DNS server at `IP:PORT`, over UDP then TCP, nothing else consulted.
    Dns {
        /// The nameserver.
        server: SocketAddr,
    },
}

impl ResolverChoice {
    /// Builds the resolver; `timeout` bounds each DNS query.
    pub fn build(&self, timeout: Duration) -> io::Result<Arc<dyn Resolve>> {
        Ok(match self {
            ResolverChoice::System => Arc::new(SystemResolver),
            ResolverChoice::Dns { server } => Arc::new(DnsResolver::new(*server, timeout)?),
        })
    }
}

/// The system resolver, through `tokio::net::lookup_host`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

#[async_trait]
impl Resolve for SystemResolver {
    async fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        let mut out = Vec::new();
        for addr in tokio::net::lookup_host((name, 0)).await? {
            if !out.contains(&addr.ip()) {
                out.push(addr.ip());
            }
        }
        Ok(out)
    }
}

/// A resolver asking one DNS server (hickory), A and AAAA, no hosts file and
/// no search domains.
#[derive(Clone)]
pub struct DnsResolver {
    inner: TokioResolver,
}

impl DnsResolver {
    /// A resolver asking `server`; `timeout` bounds each query.
    pub fn new(server: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let mut udp = ConnectionConfig::udp();
        udp.port = server.port();
        let mut tcp = ConnectionConfig::tcp();
        tcp.port = server.port();
        let ns = NameServerConfig::new(server.ip(), true, vec![udp, tcp]);
        let config = ResolverConfig::from_name_servers(vec![ns]);
        let mut opts = ResolverOpts::default();
        opts.timeout = timeout;
        opts.attempts = 1;
        opts.use_hosts_file = ResolveHosts::Never;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.ndots = 0;
        let mut builder = TokioResolver::builder_with_config(config, TokioRuntimeProvider::default());
        *builder.options_mut() = opts;
        let inner = builder.build().map_err(io::Error::other)?;
        Ok(Self { inner })
    }
}

#[async_trait]
impl Resolve for DnsResolver {
    async fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        // Fully qualified: no search domain is ever appended.
        let fqdn = format!("{name}.");
        match self.inner.lookup_ip(fqdn.as_str()).await {
            Ok(found) => Ok(found.iter().collect()),
            Err(e) if e.is_no_records_found() => Ok(Vec::new()),
            Err(e) => Err(io::Error::other(e)),
        }
    }
}

/// A fixed map from names to addresses; a name not in it has none. For tests
/// and the kit.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver {
    map: HashMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `name` (lowercase, no trailing dot) with `addrs`.
    pub fn with(mut self, name: &str, addrs: &[IpAddr]) -> Self {
        self.map.insert(name.to_owned(), addrs.to_vec());
        self
    }
}

#[async_trait]
impl Resolve for StaticResolver {
    async fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        Ok(self.map.get(name).cloned().unwrap_or_default())
    }
}
