//! The egress fence for a docker box (`Feature::EgressFence`, ADR 0021):
//! the rules of `tinybox_sdk::fence` in force in the box's network
//! namespace before any program of the box's runs there.
//!
//! An egress box does not get a network of its own. Its network namespace
//! is made by a holder container (`tinybox.net-<namespace>-<box id>`) on
//! docker's bridge, which publishes the box's ports and runs nothing but
//! the host's `sleep`. A short-lived fence container
//! (`tinybox.fence-<namespace>-<box id>`), joined to that namespace with
//! `CAP_NET_ADMIN` (and `CAP_NET_RAW`, which legacy iptables wants), puts
//! the rules there with the host's `iptables-restore`; only then is the
//! box's own container started, with `--network container:<holder>` and no
//! capability at all, so it cannot remove them. Both helpers run from an
//! empty image this driver imports (one empty tar, checked by its layer
//! before each use) with the host's `/usr`, `/lib*`, `/bin` and `/sbin`
//! bound read-only: no binary, library or environment of the box's image
//! ever holds a capability. Every box container docker starts is made by
//! a create, so every path that gives a box a network namespace (fork,
//! resume, a template, a pool) makes a holder and fences it first.
//!
//! What the rules name that only the host knows: the host's own IPv4
//! addresses (`hostname -I` on the box's host, which is the daemon's: the
//! fence is declared only where the docker CLI talks to a local socket),
//! and the resolvers docker wrote into the holder's `/etc/resolv.conf`
//! (read from the holder, which runs none of the box's code, before the box
//! starts; kept in the handle).

use std::net::Ipv4Addr;

use tinybox_sdk::fence::{Exception, Fence, host_address_rule};
use tinybox_sdk::model::PortMapping;
use tinybox_sdk::protocol::DriverError;

use crate::argv::docker;
use crate::failure::{self, Cause};
use crate::host::{Capture, Host};

/// The image both helpers run: empty, so nothing of its own can run.
pub const IMAGE: &str = "tinybox-fence:empty";
/// Its one layer: an empty tar (its two end-of-archive blocks).
pub const EMPTY_TAR: [u8; 1024] = [0; 1024];
/// docker's id of that layer, the tar's sha256: an image of [`IMAGE`]'s
/// name with any other layer is not this driver's and is never run.
pub const EMPTY_LAYER: &str = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef";
/// The host directories the helpers may bind (those the host has).
pub const HOST_DIRS: [&str; 7] = ["/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"];

/// The container holding box `container`'s network namespace. Never a
/// box's own name: those all begin `tinybox-`.
pub fn holder_name(container: &str) -> String {
    format!("tinybox.net-{}", container.strip_prefix("tinybox-").unwrap_or(container))
}

/// The short-lived container putting the rules in place.
pub fn helper_name(container: &str) -> String {
    format!("tinybox.fence-{}", container.strip_prefix("tinybox-").unwrap_or(container))
}

/// Run on the box's host with [`EMPTY_TAR`] on its input: makes sure
/// [`IMAGE`] is there with the empty layer (importing it if missing), then
/// prints `dir D` for each of [`HOST_DIRS`] the host has and `addr A` for
/// each of its own addresses (`hostname -I`, else `ip`).
const PREPARE: &str = r#"layers() { docker image inspect --format '{{join .RootFS.Layers " "}}' "$1" 2>/dev/null; }
if ! have=$(layers "$1"); then
    docker import - "$1" >/dev/null || exit 14
    have=$(layers "$1") || exit 14
fi
if [ "$have" != "$2" ]; then
    echo "image $1 has layers $have, not the one empty layer tinybox imports; remove it (docker rmi $1)" >&2
    exit 13
fi
for d in /usr /lib /lib64 /lib32 /libx32 /bin /sbin; do [ -d "$d" ] && echo "dir $d"; done
a=$(hostname -I 2>/dev/null) || a=
if [ -z "$a" ]; then
    a=$(PATH=/usr/sbin:/sbin:$PATH ip -o -4 addr show 2>/dev/null | awk '{ sub("/.*", "", $4); print $4 }') || exit 15
fi
for x in $a; do echo "addr $x"; done
exit 0"#;

/// Run in the fence container: `$1` and `$2` to the host's
/// `iptables-restore` and `ip6tables-restore` (nft's when there).
const APPLY: &str = r#"PATH=/usr/sbin:/sbin:/usr/bin:/bin
ipt=$(command -v iptables-nft-restore || command -v iptables-restore) || exit 12
ip6t=$(command -v ip6tables-nft-restore || command -v ip6tables-restore) || exit 12
printf '%s' "$1" | "$ipt" || exit 16
printf '%s' "$2" | "$ip6t" || exit 16"#;

/// What the host told [`PREPARE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostView {
    pub dirs: Vec<&'static str>,
    pub addrs: Vec<Ipv4Addr>,
}

/// Reads [`PREPARE`]'s lines; only known directories and IPv4 addresses
/// count (IPv6 is refused whole by the rules).
pub fn read_host_view(out: &str) -> HostView {
    let mut view = HostView { dirs: Vec::new(), addrs: Vec::new() };
    for line in out.lines() {
        match line.split_once(' ') {
            Some(("dir", d)) => view.dirs.extend(HOST_DIRS.iter().copied().find(|known| *known == d)),
            Some(("addr", a)) => view.addrs.extend(a.parse::<Ipv4Addr>().ok()),
            _ => {}
        }
    }
    view
}

/// The IPv4 name servers of a `resolv.conf`.
pub fn resolvers(resolv_conf: &str) -> Vec<Ipv4Addr> {
    let mut found: Vec<Ipv4Addr> = resolv_conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    found.dedup();
    found
}

/// Lets out the replies on a connection someone else opened: a published
/// port's connections come from docker's side of the bridge (a host
/// address, refused), so without it no answer would get back. A box never
/// opens such a connection itself: its first packet would be refused, and
/// a refused packet leaves conntrack no entry.
pub const REPLIES: &str = "-A OUTPUT -m conntrack --ctstate ESTABLISHED -j ACCEPT\n";

/// The `iptables-restore` and `ip6tables-restore` input for one box;
/// `published`: whether it publishes ports (then [`REPLIES`] go out too).
pub fn rules(
    exceptions: &[Exception],
    resolvers: &[Ipv4Addr],
    host_addrs: &[Ipv4Addr],
    published: bool,
) -> (String, String) {
    let fence = Fence { exceptions: exceptions.to_vec(), resolvers: resolvers.to_vec() };
    let v4 = fence.v4();
    let mut all = v4.head;
    if published {
        all.push_str(REPLIES);
    }
    for a in host_addrs {
        all.push_str(&host_address_rule(*a));
    }
    all.push_str(&v4.tail);
    (all, fence.v6())
}

/// The host's directories, read-only, over the empty image.
fn host_binds(a: &mut Vec<String>, dirs: &[&str]) {
    for d in dirs {
        a.extend(["--mount".into(), format!("type=bind,source={d},target={d},readonly")]);
    }
}

fn labels(a: &mut Vec<String>, box_id: &str, namespace: &str, role: &str) {
    a.extend(["--label".into(), format!("tinybox.box={box_id}")]);
    a.extend(["--label".into(), format!("tinybox.namespace={namespace}")]);
    a.extend(["--label".into(), format!("tinybox.role={role}")]);
}

/// Who the helpers are for.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    pub container: &'a str,
    pub box_id: &'a str,
    pub namespace: &'a str,
}

/// `docker run -d` of the holder: on the bridge, publishing the box's
/// ports (on loopback, as a box's own would be), running the host's sleep.
pub fn holder_run(o: Owner<'_>, dirs: &[&str], ports: &[PortMapping]) -> Vec<String> {
    let mut a = docker(&["run", "-d", "--name", &holder_name(o.container)]);
    labels(&mut a, o.box_id, o.namespace, "netns");
    a.extend(
        ["--network", "bridge", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only"]
            .map(String::from),
    );
    a.extend(["--log-driver", "none", "--pull", "never"].map(String::from));
    for p in ports {
        a.extend(["--publish".into(), format!("127.0.0.1:{}:{}", p.host, p.guest)]);
    }
    host_binds(&mut a, dirs);
    a.extend(["--entrypoint", "sleep", IMAGE, "infinity"].map(String::from));
    a
}

/// `docker run --rm` of the fence container in the holder's namespace.
pub fn helper_run(o: Owner<'_>, dirs: &[&str], v4: &str, v6: &str) -> Vec<String> {
    let mut a = docker(&["run", "--rm", "--name", &helper_name(o.container)]);
    labels(&mut a, o.box_id, o.namespace, "fence");
    a.extend(["--network".into(), format!("container:{}", holder_name(o.container))]);
    a.extend(["--cap-drop", "ALL", "--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW"].map(String::from));
    a.extend(["--security-opt", "no-new-privileges", "--read-only", "--tmpfs", "/run"].map(String::from));
    a.extend(["--user", "0:0", "--log-driver", "none", "--pull", "never"].map(String::from));
    host_binds(&mut a, dirs);
    a.extend(["--entrypoint", "sh", IMAGE, "-c", APPLY, "tinybox-fence", v4, v6].map(String::from));
    a
}

/// What a fenced box's handle keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    pub holder: String,
    pub resolvers: Vec<Ipv4Addr>,
}

/// Makes box `o`'s holder and puts its fence in place. On any failure what
/// was made is removed and the error names what is missing.
pub async fn prepare(
    host: &dyn Host,
    o: Owner<'_>,
    exceptions: &[Exception],
    ports: &[PortMapping],
) -> Result<Fenced, DriverError> {
    let made = fence(host, o, exceptions, ports).await;
    if made.is_err() {
        let _ = remove_helpers(host, o.container).await;
    }
    made
}

async fn fence(
    host: &dyn Host,
    o: Owner<'_>,
    exceptions: &[Exception],
    ports: &[PortMapping],
) -> Result<Fenced, DriverError> {
    let script: Vec<String> =
        ["sh", "-c", PREPARE, "tinybox-fence-prepare", IMAGE, EMPTY_LAYER].map(String::from).into();
    let seen = host.capture_with_input(script, &EMPTY_TAR).await?;
    match seen.status.code {
        Some(0) => {}
        Some(13) => return Err(DriverError::unavailable(format!("egress fence: {}", seen.stderr_text().trim()))),
        _ => return Err(failure::error("preparing the egress fence (docker import of its empty image)", &seen)),
    }
    let view = read_host_view(&seen.stdout_text());
    if view.addrs.is_empty() || !view.dirs.contains(&"/usr") {
        return Err(DriverError::unavailable(format!(
            "egress fence: the box's host showed no /usr to run iptables from or none of its own IPv4 addresses \
             (hostname -I and ip found {:?})",
            view.addrs
        )));
    }
    let holder = host.capture(holder_run(o, &view.dirs, ports)).await?;
    if !holder.success() {
        return Err(failure::error("docker run of the box's network holder", &holder));
    }
    let resolv = host.capture(docker(&["exec", &holder_name(o.container), "cat", "/etc/resolv.conf"])).await?;
    if !resolv.success() {
        return Err(failure::error("reading the box's resolv.conf from its network holder", &resolv));
    }
    let resolvers = resolvers(&resolv.stdout_text());
    let (v4, v6) = rules(exceptions, &resolvers, &view.addrs, !ports.is_empty());
    let applied = host.capture(helper_run(o, &view.dirs, &v4, &v6)).await?;
    match applied.status.code {
        Some(0) => Ok(Fenced { holder: holder_name(o.container), resolvers }),
        Some(12) => Err(DriverError::unavailable(
            "egress needs iptables and ip6tables on the docker host for its fence (no host, no private ranges); \
             install the iptables package there",
        )),
        Some(16) => Err(DriverError::failed(format!(
            "the egress fence could not be put in place in the box's network namespace: {}",
            applied.stderr_text().trim()
        ))),
        _ => Err(failure::error("docker run of the egress fence", &applied)),
    }
}

/// Removes box `container`'s holder and fence container, whichever exist:
/// named from the box alone, so an interrupted create's are found too.
pub async fn remove_helpers(host: &dyn Host, container: &str) -> Result<(), DriverError> {
    remove_if_there(host, &helper_name(container)).await?;
    remove_if_there(host, &holder_name(container)).await
}

/// `docker rm --force NAME`; a container that is not there is no failure.
pub async fn remove_if_there(host: &dyn Host, name: &str) -> Result<(), DriverError> {
    let done = host.capture(crate::argv::remove(name)).await?;
    if !done.success() && failure::cause(&done) != Cause::NoSuchContainer {
        return Err(failure::error(&format!("docker rm {name}"), &done));
    }
    Ok(())
}

#[cfg(test)]
#[path = "fence_tests.rs"]
mod tests;
