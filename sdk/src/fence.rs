//! The egress fence (`Feature::EgressFence`): what a box with plain
//! `egress` may not reach, written once for every driver that puts it in
//! force with netfilter inside the box's network namespace.
//!
//! A box with egress reaches public addresses. It never reaches the host it
//! runs on (any of its own addresses — a service listening on `0.0.0.0`
//! answers on each), loopback beyond its own, the private ranges (RFC 1918,
//! `fc00::/7`), link-local, CGNAT (`100.64/10`), nor the reserved,
//! documentation, benchmarking, multicast and broadcast ranges — unless the
//! caller listed that address or network as an exception
//! (`--network egress --allow-host 10.1.2.3[:PORT]`). IPv6 is refused
//! entirely but for loopback and listed exceptions: the user-mode networks
//! boxes get have no IPv6 uplink, and a fence that let it through would
//! depend on there being none.
//!
//! The rules are `iptables-restore` input for the `filter` table's
//! `OUTPUT` chain, so nothing on the host has to be changed, and they are
//! put in place by a process holding `CAP_NET_ADMIN` over the box's network
//! namespace before any of the box's own processes start. The box's
//! processes never hold that capability there, so they cannot remove the
//! rules. The host's own addresses are known only on the host the box runs
//! on, so [`Fence::v4`] leaves a place for them: the driver's script adds
//! one [`host_address_rule`] per address it finds there.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The wrapper that puts the fence in force (`sh -c NETWRAP tinybox-netwrap
/// V4_HEAD V4_TAIL V6 COMMAND...`): it makes a user and network namespace
/// of its own, loads the rules there, and only then lets slirp4netns attach
/// (no host loopback) and runs COMMAND in it. The namespace driver wraps
/// bwrap in it; the microvm driver wraps passt, whose UNIX socket QEMU
/// reaches across the namespace boundary. Every process it makes names
/// `$TMPDIR` or COMMAND's own arguments on its command line (its work
/// directory is made under `$TMPDIR`), so a driver that points `TMPDIR` at a
/// box's directory and names that directory in COMMAND finds them all.
pub const NETWRAP: &str = include_str!("netwrap.sh");

/// The name server slirp4netns gives the namespace NETWRAP makes
/// (`--configure`'s default): the one private address a fence lets through,
/// on port 53 only, as its [`Fence::resolvers`].
pub const SLIRP_DNS: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);

/// The IPv4 networks a fenced box never reaches unless listed.
pub const REFUSED_V4: [&str; 14] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// The chain a refused packet jumps to. It fails at once: TCP with a
/// reset (an ICMP error to a SYN is retried for a second before connect
/// gives up), anything else as "administratively prohibited".
pub const REFUSE_CHAIN: &str = "tinybox-refuse";
const REFUSE: &str = "-j tinybox-refuse";

fn refuse_chain(icmp: &str) -> String {
    format!(
        ":{REFUSE_CHAIN} - [0:0]\n-A {REFUSE_CHAIN} -p tcp -j REJECT --reject-with tcp-reset\n-A {REFUSE_CHAIN} -j REJECT --reject-with {icmp}\n"
    )
}

/// One network the caller let through the fence, on every port or one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Exception {
    pub net: ipnet::IpNet,
    pub port: Option<u16>,
}

impl FromStr for Exception {
    type Err = String;

    /// `ADDR`, `ADDR/LEN`, `ADDR:PORT`, `[V6]`, `[V6]:PORT`, `[V6/LEN]:PORT`.
    fn from_str(value: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{value:?} is not an address or network with an optional port (1.2.3.4, 10.0.0.0/8, 10.1.2.3:80, [fd00::1]:443)"
            )
        };
        let (host, port) = match value.strip_prefix('[') {
            Some(rest) => {
                let (host, after) = rest.split_once(']').ok_or_else(bad)?;
                match after {
                    "" => (host, None),
                    _ => (host, Some(after.strip_prefix(':').ok_or_else(bad)?)),
                }
            }
            None => match value.rsplit_once(':') {
                Some((host, port)) if !host.contains(':') => (host, Some(port)),
                _ => (value, None),
            },
        };
        let port = match port {
            None => None,
            Some(p) => match p.parse::<u16>() {
                Ok(0) | Err(_) => return Err(format!("{value:?} has port {p:?}; a port is 1 to 65535")),
                Ok(p) => Some(p),
            },
        };
        let net = match host.parse::<ipnet::IpNet>() {
            Ok(net) => net,
            Err(_) => ipnet::IpNet::from(host.parse::<IpAddr>().map_err(|_| bad())?),
        };
        if net != net.trunc() {
            return Err(format!("{value:?} has host bits set; write the network, {}", net.trunc()));
        }
        Ok(Exception { net, port })
    }
}

impl TryFrom<String> for Exception {
    type Error = String;
    fn try_from(value: String) -> Result<Self, String> {
        value.parse()
    }
}

impl From<Exception> for String {
    fn from(e: Exception) -> String {
        e.to_string()
    }
}

impl fmt::Display for Exception {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.net.prefix_len() == self.net.max_prefix_len();
        let host = if whole { self.net.addr().to_string() } else { self.net.to_string() };
        match (self.net, self.port) {
            (ipnet::IpNet::V4(_), None) => f.write_str(&host),
            (ipnet::IpNet::V4(_), Some(p)) => write!(f, "{host}:{p}"),
            (ipnet::IpNet::V6(_), None) => write!(f, "[{host}]"),
            (ipnet::IpNet::V6(_), Some(p)) => write!(f, "[{host}]:{p}"),
        }
    }
}

/// The fence for one box: its exceptions and the resolvers it may ask.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    pub exceptions: Vec<Exception>,
    /// The name servers the box's network gives it (slirp4netns's
    /// `10.0.2.3`, say), reachable on port 53 only.
    pub resolvers: Vec<Ipv4Addr>,
}

/// The IPv4 rules in two parts: what comes before the host's own
/// addresses (loopback, resolvers, exceptions) and what comes after them
/// (the refused ranges, `COMMIT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    pub head: String,
    pub tail: String,
}

impl Fence {
    /// `iptables-restore` input; between `head` and `tail` go the
    /// [`host_address_rule`]s of the host's own IPv4 addresses.
    pub fn v4(&self) -> Rules {
        let mut head = String::from("*filter\n:OUTPUT ACCEPT [0:0]\n");
        head.push_str(&refuse_chain("icmp-admin-prohibited"));
        head.push_str("-A OUTPUT -o lo -j ACCEPT\n");
        for r in &self.resolvers {
            for proto in ["udp", "tcp"] {
                head.push_str(&format!("-A OUTPUT -d {r}/32 -p {proto} --dport 53 -j ACCEPT\n"));
            }
        }
        for e in self.exceptions.iter().filter(|e| e.net.addr().is_ipv4()) {
            head.push_str(&accept(e));
        }
        let mut tail = String::new();
        for net in REFUSED_V4 {
            tail.push_str(&format!("-A OUTPUT -d {net} {REFUSE}\n"));
        }
        tail.push_str("COMMIT\n");
        Rules { head, tail }
    }

    /// `ip6tables-restore` input: loopback and the IPv6 exceptions, nothing else.
    pub fn v6(&self) -> String {
        let mut rules = String::from("*filter\n:OUTPUT ACCEPT [0:0]\n");
        rules.push_str(&refuse_chain("icmp6-adm-prohibited"));
        rules.push_str("-A OUTPUT -o lo -j ACCEPT\n");
        for e in self.exceptions.iter().filter(|e| e.net.addr().is_ipv6()) {
            rules.push_str(&accept(e));
        }
        rules.push_str(&format!("-A OUTPUT {REFUSE}\nCOMMIT\n"));
        rules
    }
}

fn accept(e: &Exception) -> String {
    match e.port {
        None => format!("-A OUTPUT -d {} -j ACCEPT\n", e.net),
        Some(p) => ["tcp", "udp"]
            .iter()
            .map(|proto| format!("-A OUTPUT -d {} -p {proto} --dport {p} -j ACCEPT\n", e.net))
            .collect(),
    }
}

/// The rule refusing one of the host's own IPv4 addresses, as a `printf`
/// format taking the address (the driver's script fills it in on the host
/// the box runs on, from addresses it checked are dotted quads).
pub const HOST_ADDRESS_RULE: &str = "-A OUTPUT -d %s/32 -j tinybox-refuse\\n";

/// The same rule, made here (for tests and drivers that know the address).
pub fn host_address_rule(addr: Ipv4Addr) -> String {
    format!("-A OUTPUT -d {addr}/32 {REFUSE}\n")
}

/// Where a fence's iptables is looked for (as netwrap.sh does: the sbin
/// directories are often not on a user's PATH).
pub const SBIN: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// What netwrap.sh needs on `PATH` beside iptables, each with the Debian
/// package that has it.
pub const NETWRAP_TOOLS: &[(&str, &str)] =
    &[("slirp4netns", "slirp4netns"), ("unshare", "util-linux"), ("setpriv", "util-linux")];

/// The packages this machine lacks to put the fence in force: iptables
/// and ip6tables (`iptables-restore` or its `-nft` form, in [`SBIN`]), and
/// each of `programs` on `PATH`; `None` when nothing is missing. A driver
/// whose box would run here declares `egress_fence` only when nothing is,
/// so a missing tool narrows the declaration by that one feature (plain
/// egress is refused before dispatch, naming it) instead of failing the
/// kit's fence claims and the whole sandbox with them.
pub fn missing_tools(programs: &[(&str, &str)]) -> Option<String> {
    missing_tools_with(std::env::var_os("PATH").as_deref(), &SBIN.map(std::path::Path::new), programs)
}

/// [`missing_tools`] with this `PATH` and these sbin directories.
pub fn missing_tools_with(
    path: Option<&std::ffi::OsStr>,
    sbin: &[&std::path::Path],
    programs: &[(&str, &str)],
) -> Option<String> {
    let on_path = |program: &str| path.is_some_and(|p| std::env::split_paths(p).any(|d| d.join(program).is_file()));
    let in_sbin = |names: [&str; 2]| sbin.iter().any(|d| names.iter().any(|n| d.join(n).is_file()));
    let mut missing: Vec<&str> = Vec::new();
    for (program, package) in programs {
        if !on_path(program) && !missing.contains(package) {
            missing.push(package);
        }
    }
    if !in_sbin(["iptables-nft-restore", "iptables-restore"])
        || !in_sbin(["ip6tables-nft-restore", "ip6tables-restore"])
    {
        missing.push("iptables");
    }
    (!missing.is_empty()).then(|| missing.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exceptions_parse_to_one_canonical_form_and_bad_ones_name_the_rule() {
        for (given, canonical) in [
            ("10.254.16.2", "10.254.16.2"),
            ("10.254.16.2:8080", "10.254.16.2:8080"),
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("10.0.0.0/8:53", "10.0.0.0/8:53"),
            ("10.1.2.3/32", "10.1.2.3"),
            ("[fd00::1]", "[fd00::1]"),
            ("fd00::1", "[fd00::1]"),
            ("[fd00::/8]:53", "[fd00::/8]:53"),
        ] {
            let e: Exception = given.parse().unwrap_or_else(|err| panic!("{given}: {err}"));
            assert_eq!(e.to_string(), canonical, "{given}");
            assert_eq!(canonical.parse::<Exception>().unwrap(), e, "{canonical} reads back");
        }
        for (bad, says) in [
            ("example.com", "not an address or network"),
            ("10.1.2.3:0", "a port is 1 to 65535"),
            ("10.1.2.3:http", "a port is 1 to 65535"),
            ("10.1.2.3:99999", "a port is 1 to 65535"),
            ("10.1.2.3/8", "host bits set; write the network, 10.0.0.0/8"),
            ("10.1.2.3 -j ACCEPT", "not an address or network"),
            ("[fd00::1]x", "not an address or network"),
            ("", "not an address or network"),
        ] {
            let err = bad.parse::<Exception>().unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn the_v4_rules_accept_loopback_resolvers_and_exceptions_before_refusing_every_listed_range() {
        let fence = Fence {
            exceptions: vec!["10.254.16.2:8080".parse().unwrap(), "192.168.0.0/16".parse().unwrap()],
            resolvers: vec![Ipv4Addr::new(10, 0, 2, 3)],
        };
        let Rules { head, tail } = fence.v4();
        let head: Vec<&str> = head.lines().collect();
        assert_eq!(
            head,
            [
                "*filter",
                ":OUTPUT ACCEPT [0:0]",
                ":tinybox-refuse - [0:0]",
                "-A tinybox-refuse -p tcp -j REJECT --reject-with tcp-reset",
                "-A tinybox-refuse -j REJECT --reject-with icmp-admin-prohibited",
                "-A OUTPUT -o lo -j ACCEPT",
                "-A OUTPUT -d 10.0.2.3/32 -p udp --dport 53 -j ACCEPT",
                "-A OUTPUT -d 10.0.2.3/32 -p tcp --dport 53 -j ACCEPT",
                "-A OUTPUT -d 10.254.16.2/32 -p tcp --dport 8080 -j ACCEPT",
                "-A OUTPUT -d 10.254.16.2/32 -p udp --dport 8080 -j ACCEPT",
                "-A OUTPUT -d 192.168.0.0/16 -j ACCEPT",
            ]
        );
        let refused: Vec<&str> = tail.lines().filter_map(|l| l.strip_prefix("-A OUTPUT -d ")).collect();
        assert_eq!(refused.len(), REFUSED_V4.len());
        for (rule, net) in refused.iter().zip(REFUSED_V4) {
            assert_eq!(*rule, format!("{net} -j tinybox-refuse"));
        }
        assert_eq!(tail.lines().last(), Some("COMMIT"));
        assert_eq!(
            host_address_rule(Ipv4Addr::new(192, 0, 2, 7)),
            HOST_ADDRESS_RULE.replace("%s", "192.0.2.7").replace("\\n", "\n")
        );
    }

    #[test]
    fn the_v6_rules_refuse_everything_but_loopback_and_v6_exceptions() {
        let fence = Fence {
            exceptions: vec!["[fd00::/8]:53".parse().unwrap(), "10.0.0.1".parse().unwrap()],
            resolvers: vec![],
        };
        assert_eq!(
            fence.v6(),
            "*filter\n:OUTPUT ACCEPT [0:0]\n:tinybox-refuse - [0:0]\n\
             -A tinybox-refuse -p tcp -j REJECT --reject-with tcp-reset\n\
             -A tinybox-refuse -j REJECT --reject-with icmp6-adm-prohibited\n-A OUTPUT -o lo -j ACCEPT\n\
             -A OUTPUT -d fd00::/8 -p tcp --dport 53 -j ACCEPT\n-A OUTPUT -d fd00::/8 -p udp --dport 53 -j ACCEPT\n\
             -A OUTPUT -j tinybox-refuse\nCOMMIT\n"
        );
    }

    #[test]
    fn every_refused_range_parses_and_is_truncated() {
        for net in REFUSED_V4 {
            let n: ipnet::Ipv4Net = net.parse().unwrap();
            assert_eq!(n, n.trunc(), "{net}");
        }
    }

    #[test]
    fn the_fence_s_missing_tools_are_named_as_the_packages_to_install() {
        let bin = tempfile::tempdir().unwrap();
        let sbin = tempfile::tempdir().unwrap();
        let path = bin.path().as_os_str();
        let dirs = [sbin.path()];
        let missing = |programs| missing_tools_with(Some(path), &dirs, programs);
        assert_eq!(missing(NETWRAP_TOOLS).as_deref(), Some("slirp4netns, util-linux, iptables"));
        assert_eq!(missing(&[]).as_deref(), Some("iptables"), "docker's fence needs iptables alone");
        for tool in ["slirp4netns", "unshare", "setpriv"] {
            std::fs::write(bin.path().join(tool), b"").unwrap();
        }
        assert_eq!(missing(NETWRAP_TOOLS).as_deref(), Some("iptables"), "a fresh Debian machine");
        std::fs::write(sbin.path().join("iptables-nft-restore"), b"").unwrap();
        assert_eq!(missing(NETWRAP_TOOLS).as_deref(), Some("iptables"), "ip6tables too");
        std::fs::write(sbin.path().join("ip6tables-restore"), b"").unwrap();
        assert_eq!(missing(NETWRAP_TOOLS), None);
        assert_eq!(missing(&[]), None);
    }
}
