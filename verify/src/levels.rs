//! The isolation levels' checklists (docs/specs/isolation-levels.md), the
//! items that need the host's side of the story: the kit plants canaries on
//! the host — a secret file, a file the box must leave alone, a marked
//! process, listening sockets — runs one probe in the box, and judges by
//! what it then finds on the host and by whether what the box names is the
//! host's own file (same device and inode), never by the box's word alone.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tinybox_core::{Error, Result};
use tinybox_sdk::model::BoxId;

use super::probe_tools::Bystander;
use super::{Kit, Status};

type Verdict = (Status, String);

/// A fresh word no box can guess: what canaries carry, so a box that
/// prints it can only have read it from the host.
pub(super) fn nonce() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    blake3::hash(format!("{}-{now}-{n}", std::process::id()).as_bytes()).to_hex()[..16].to_owned()
}

/// `s` as one word of the box's `sh`.
pub(super) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(format!("cannot {what} for the probe"), e)
}

/// The host files a probe plants, in a fresh directory of the kit's own
/// outside any workspace; all removed on drop.
struct Plant {
    dir: tempfile::TempDir,
    /// Mode 0600, holding [`Plant::secret_word`].
    secret: PathBuf,
    secret_word: String,
    /// Mode 0644, holding [`Plant::keep_word`]: the box must leave it as it is.
    keep: PathBuf,
    keep_word: String,
}

impl Plant {
    fn new() -> Result<Plant> {
        let dir = tempfile::Builder::new().prefix("tinybox-kit-").tempdir().map_err(io("make a directory"))?;
        // Traversable by anyone, so it is the files' own modes a
        // process-level box (another user) meets.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).map_err(io("open a directory"))?;
        let secret_word = format!("tinybox-kit-secret-{}", nonce());
        let secret = dir.path().join("secret");
        write_mode(&secret, &secret_word, 0o600)?;
        let keep_word = format!("tinybox-kit-keep-{}", nonce());
        let keep = dir.path().join("keep");
        write_mode(&keep, &keep_word, 0o644)?;
        Ok(Plant { dir, secret, secret_word, keep, keep_word })
    }
}

fn write_mode(path: &Path, text: &str, mode: u32) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f =
        std::fs::File::options().write(true).create_new(true).mode(mode).open(path).map_err(io("plant a file"))?;
    f.write_all(text.as_bytes()).map_err(io("plant a file"))?;
    // The umask may have taken bits the probe relies on.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io("plant a file"))
}

/// A 0600 canary in the caller's home, when it is writable; removed on drop.
struct HomeCanary {
    path: PathBuf,
    word: String,
}

impl HomeCanary {
    fn plant() -> Option<HomeCanary> {
        let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute() && h != Path::new("/"))?;
        let path = home.join(format!(".tinybox-kit-{}", nonce()));
        let word = format!("tinybox-kit-home-{}", nonce());
        write_mode(&path, &word, 0o600).ok()?;
        Some(HomeCanary { path, word })
    }
}

impl Drop for HomeCanary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A path as a shell word, or `None` for one that is not UTF-8 (skipped).
fn word(p: &Path) -> Option<String> {
    p.to_str().map(quote)
}

async fn sh(kit: &Kit<'_>, id: &BoxId, script: &str) -> Result<super::Output> {
    super::run(kit.tb, id, &["sh", "-c", script], &[], std::future::pending()).await
}

/// The host's boot id: a box that shows another runs on another kernel.
pub(super) fn host_boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default().trim().to_owned()
}

/// The value of the first `name=` line the box printed.
pub(super) fn field<'a>(stdout: &'a str, name: &str) -> Option<&'a str> {
    stdout.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix('=')).map(str::trim)
}

/// Whether the box showed a boot id other than the host's: its own kernel.
pub(super) fn own_kernel(stdout: &str, host: &str) -> bool {
    field(stdout, "boot").is_some_and(|b| !b.is_empty() && !host.is_empty() && b != host)
}

/// Process: a process of the caller's can neither be traced (opening its
/// `/proc/<pid>/mem` is ptrace's attach check) nor have its environment
/// read, which carries a word only the kit knows.
pub(super) async fn cannot_ptrace(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let mark = format!("tinybox-kit-ptrace-{}", nonce());
    let by = Bystander::start_marked(&mark)?;
    let pid = by.pid();
    let script = format!(
        "(exec 3</proc/{pid}/mem) 2>/dev/null && echo mem=open; c=$(cat /proc/{pid}/comm 2>/dev/null) && echo \"comm=$c\"; \
         cat /proc/{pid}/environ 2>/dev/null; echo; echo done"
    );
    let out = sh(kit, id, &script).await?;
    Ok(ptrace_verdict(&out.stdout, pid, &mark)
        .unwrap_or_else(|| (Status::Fail, format!("the probe did not finish ({}): {}", out.status, out.stderr_line()))))
}

fn ptrace_verdict(stdout: &str, pid: u32, mark: &str) -> Option<Verdict> {
    stdout.lines().any(|l| l.trim() == "done").then_some(())?;
    let opened = field(stdout, "mem") == Some("open");
    let comm = field(stdout, "comm");
    Some(if stdout.contains(mark) {
        (Status::Fail, format!("the box read the environment of the caller's process {pid} (/proc/{pid}/environ)"))
    } else if opened && comm == Some("sleep") {
        (Status::Fail, format!("the box opened /proc/{pid}/mem of the caller's process {pid}: it may ptrace it"))
    } else if opened {
        (
            Status::Pass,
            format!("pid {pid} in the box is the box's own {:?}, not the caller's process", comm.unwrap_or_default()),
        )
    } else {
        (
            Status::Pass,
            format!("the box can neither open /proc/{pid}/mem nor read the environment of the caller's process {pid}"),
        )
    })
}

/// The host's /etc/shadow, when the kit may read it.
fn host_shadow() -> Option<String> {
    std::fs::read_to_string("/etc/shadow").ok().filter(|s| !s.trim().is_empty())
}

/// Process: the caller's private files stay private — a 0600 canary the
/// kit planted, one in the caller's home, and the host's /etc/shadow (the
/// box's own, an image's say, may be there: it must not be the host's).
pub(super) async fn cannot_read(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let plant = Plant::new()?;
    let home = HomeCanary::plant();
    let mut script = String::new();
    for p in [Some(&plant.secret), home.as_ref().map(|h| &h.path)].into_iter().flatten() {
        if let Some(w) = word(p) {
            script += &format!("cat {w} 2>/dev/null; echo; ");
        }
    }
    script += "echo '<<<shadow'; cat /etc/shadow 2>/dev/null; echo 'shadow>>>'; echo done";
    let out = sh(kit, id, &script).await?;
    if !out.stdout.lines().any(|l| l.trim() == "done") {
        return Ok((Status::Fail, format!("the probe did not finish ({}): {}", out.status, out.stderr_line())));
    }
    let mut read = Vec::new();
    if out.stdout.contains(&plant.secret_word) {
        read.push(format!("the caller's 0600 file {}", plant.secret.display()));
    }
    if let Some(h) = &home
        && out.stdout.contains(&h.word)
    {
        read.push(format!("the caller's 0600 file {} in its home", h.path.display()));
    }
    let shadow = host_shadow();
    if let Some(host) = &shadow
        && shadow_leaked(host, &out.stdout)
    {
        read.push("the host's /etc/shadow".into());
    }
    let home_note = if home.is_some() { ", one in the caller's home" } else { "" };
    let shadow_note = if shadow.is_some() {
        "and the host's /etc/shadow"
    } else {
        "(the host's /etc/shadow is unreadable to the kit, so not compared)"
    };
    Ok(if read.is_empty() {
        (Status::Pass, format!("the box read none of: a 0600 canary outside its workspace{home_note} {shadow_note}"))
    } else {
        (Status::Fail, format!("the box read {}", read.join(", ")))
    })
}

/// The host's shadow is in what the box printed between the markers: the
/// same bytes, or any of its password hashes.
fn shadow_leaked(host: &str, stdout: &str) -> bool {
    let Some(section) = stdout.split_once("<<<shadow\n").and_then(|(_, rest)| rest.split_once("shadow>>>")) else {
        return false;
    };
    let boxed = section.0;
    let hashed = host.lines().filter(|l| l.split(':').nth(1).is_some_and(|h| h.starts_with('$')));
    boxed == host || hashed.into_iter().any(|l| boxed.lines().any(|b| b == l))
}

/// Process: the caller's files stay as they are — a 0644 file of the
/// caller's is not overwritten, appended to or removed, nothing new
/// appears beside it, and nothing new appears in the host's /etc.
pub(super) async fn cannot_write(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let plant = Plant::new()?;
    let fresh = plant.dir.path().join("new");
    let etc = PathBuf::from(format!("/etc/tinybox-kit-{}", nonce()));
    let (Some(keep), Some(new), Some(etc_w)) = (word(&plant.keep), word(&fresh), word(&etc)) else {
        return Ok((Status::Skipped, "the kit's temporary directory is not a UTF-8 path".into()));
    };
    let script = format!(
        "echo tampered > {keep}; echo tampered >> {keep}; echo new > {new}; echo new > {etc_w}; rm -f {keep}; echo done"
    );
    let out = sh(kit, id, &format!("{{ {script}; }} 2>/dev/null")).await?;
    let etc_made = etc.exists();
    if etc_made {
        let _ = std::fs::remove_file(&etc);
    }
    if !out.stdout.lines().any(|l| l.trim() == "done") {
        return Ok((Status::Fail, format!("the probe did not finish ({}): {}", out.status, out.stderr_line())));
    }
    let mut changed = Vec::new();
    match std::fs::read_to_string(&plant.keep) {
        Ok(now) if now == plant.keep_word => {}
        Ok(_) => changed.push(format!("the caller's 0644 file {} was rewritten", plant.keep.display())),
        Err(_) => changed.push(format!("the caller's 0644 file {} was removed", plant.keep.display())),
    }
    if fresh.exists() {
        changed.push(format!("{} was created in the caller's directory", fresh.display()));
    }
    if etc_made {
        changed.push(format!("{} was created on the host (removed again)", etc.display()));
    }
    Ok(if changed.is_empty() {
        (
            Status::Pass,
            format!(
                "after the box tried, the caller's file is unchanged and nothing new is beside it or in the host's /etc ({})",
                plant.dir.path().display()
            ),
        )
    } else {
        (Status::Fail, changed.join("; "))
    })
}

/// One host path the box must not reach: what it is, and its identity.
struct Secret {
    what: String,
    path: PathBuf,
    dev_ino: (u64, u64),
}

/// Host paths that hold secrets or belong to someone else, with the
/// identity each has on the host; those that do not exist are left out.
fn secrets(plant: &Plant, home: Option<&HomeCanary>, store: Option<&Path>) -> Vec<Secret> {
    let mut list: Vec<(String, PathBuf)> = vec![
        ("the kit's canary directory".into(), plant.dir.path().to_owned()),
        ("the kit's 0600 canary".into(), plant.secret.clone()),
        ("the host's /etc/shadow".into(), "/etc/shadow".into()),
        ("the host's /root".into(), "/root".into()),
        ("the host's /root/.ssh".into(), "/root/.ssh".into()),
        ("the docker socket".into(), "/var/run/docker.sock".into()),
        ("the docker socket".into(), "/run/docker.sock".into()),
    ];
    if let Some(h) = home {
        list.push(("a canary in the caller's home".into(), h.path.clone()));
    }
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute() && h != Path::new("/")) {
        list.push(("the caller's home".into(), home.clone()));
        list.push(("the caller's ssh keys".into(), home.join(".ssh")));
    }
    if let Ok(users) = std::fs::read_dir("/home") {
        for u in users.flatten() {
            list.push(("a home under /home".into(), u.path()));
        }
    }
    if let Some(s) = store {
        list.push(("tinybox's store".into(), s.to_owned()));
    }
    let mut seen = BTreeSet::new();
    list.into_iter()
        .filter_map(|(what, path)| {
            let m = std::fs::metadata(&path).ok()?;
            let dev_ino = (m.dev(), m.ino());
            seen.insert(dev_ino).then_some(Secret { what, path, dev_ino })
        })
        .collect()
}

/// Kernel: host files outside the workspace are not there to read or
/// write — none of the host's secret paths (the kit's canaries, /etc/shadow,
/// /root, homes, ssh keys, the store, the docker socket) is, in the box,
/// the host's own file (same device and inode by `stat -L`).
pub(super) async fn host_files_hidden(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let plant = Plant::new()?;
    let home = HomeCanary::plant();
    let list = secrets(&plant, home.as_ref(), kit.tb.store_dir());
    let mut script = String::from("command -v stat >/dev/null 2>&1 || echo no-stat; ");
    for (i, s) in list.iter().enumerate() {
        if let Some(w) = word(&s.path) {
            script += &format!("s=$(stat -L -c '%d %i' {w} 2>/dev/null) && echo \"id {i} $s\"; ");
        }
    }
    script += "echo done";
    let out = sh(kit, id, &script).await?;
    Ok(hidden_verdict(&out, &list))
}

fn hidden_verdict(out: &super::Output, list: &[Secret]) -> Verdict {
    if !out.stdout.lines().any(|l| l.trim() == "done") {
        return (Status::Fail, format!("the probe did not finish ({}): {}", out.status, out.stderr_line()));
    }
    if out.stdout.lines().any(|l| l.trim() == "no-stat") {
        return (Status::Skipped, "the box has no `stat` to name a file's device and inode with".into());
    }
    let mut reached = Vec::new();
    for line in out.stdout.lines() {
        let mut w = line.split_whitespace();
        if w.next() != Some("id") {
            continue;
        }
        let nums: Vec<u64> = w.filter_map(|n| n.parse().ok()).collect();
        let [i, dev, ino] = nums[..] else { continue };
        if let Some(s) = usize::try_from(i).ok().and_then(|i| list.get(i))
            && s.dev_ino == (dev, ino)
        {
            reached.push(format!("{} ({})", s.what, s.path.display()));
        }
    }
    if reached.is_empty() {
        let mut kinds: Vec<&str> = Vec::new();
        for s in list {
            if !kinds.contains(&s.what.as_str()) {
                kinds.push(&s.what);
            }
        }
        (
            Status::Pass,
            format!("none of {} host paths is the host's own file in the box ({})", list.len(), kinds.join(", ")),
        )
    } else {
        (Status::Fail, format!("the box reaches the host's own files: {}", reached.join(", ")))
    }
}

/// Kernel: the host's devices stay the host's — /dev/kmsg, /dev/mem,
/// /dev/kmem, /dev/port and every block device cannot be opened. A box on
/// a kernel of its own (another boot id) has only its own devices.
pub(super) async fn no_host_devices(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let script = "echo \"boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)\"; \
                  for d in /dev/kmsg /dev/mem /dev/kmem /dev/port $(find /dev -type b 2>/dev/null); do \
                  [ -e \"$d\" ] && (exec 3<\"$d\") 2>/dev/null && echo \"open=$d\"; done; echo done";
    let out = sh(kit, id, script).await?;
    Ok(devices_verdict(&out, &host_boot_id()))
}

fn devices_verdict(out: &super::Output, host_boot: &str) -> Verdict {
    if !out.stdout.lines().any(|l| l.trim() == "done") {
        return (Status::Fail, format!("the probe did not finish ({}): {}", out.status, out.stderr_line()));
    }
    let opened: Vec<&str> = out.stdout.lines().filter_map(|l| l.strip_prefix("open=")).collect();
    if own_kernel(&out.stdout, host_boot) {
        (
            Status::Pass,
            format!(
                "the box runs a kernel of its own (boot id {}), so its {} openable device(s) are its own",
                field(&out.stdout, "boot").unwrap_or_default(),
                opened.len()
            ),
        )
    } else if opened.is_empty() {
        (Status::Pass, "on the host's kernel, the box can open none of /dev/kmsg, /dev/mem, /dev/kmem, /dev/port or a block device".into())
    } else {
        (Status::Fail, format!("on the host's kernel, the box can open {}", opened.join(", ")))
    }
}

/// The kit's own mount namespace, as `readlink /proc/self/ns/mnt` names it.
fn host_mount_ns() -> String {
    std::fs::read_link("/proc/self/ns/mnt").map(|p| p.display().to_string()).unwrap_or_default()
}

/// Kernel: the box cannot change the host's mount table — mounting is
/// refused, or lands in a mount namespace (or a kernel) of the box's own,
/// and the host's table never shows the box's mount.
pub(super) async fn mounts_stay_inside(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let tag = format!("tinybox-kit-{}", nonce());
    // The mount point is made, and removed, where the box may write: its
    // own temporary directory, or its working directory.
    let script = format!(
        "d=$(mktemp -d 2>/dev/null) || {{ d=./{tag}; mkdir \"$d\"; }}; \
         if mount -t tmpfs {tag} \"$d\" 2>/dev/null; then echo mount=made; else echo mount=refused; fi; \
         echo \"mntns=$(readlink /proc/self/ns/mnt 2>/dev/null)\"; \
         echo \"boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)\"; \
         umount \"$d\" 2>/dev/null; rmdir \"$d\" 2>/dev/null; echo done"
    );
    let out = sh(kit, id, &script).await?;
    let host_table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    Ok(mounts_verdict(&out, &tag, &host_table, &host_mount_ns(), &host_boot_id()))
}

fn mounts_verdict(out: &super::Output, tag: &str, host_table: &str, host_ns: &str, host_boot: &str) -> Verdict {
    if !out.stdout.lines().any(|l| l.trim() == "done") {
        return (Status::Fail, format!("the probe did not finish ({}): {}", out.status, out.stderr_line()));
    }
    if host_table.contains(tag) {
        return (Status::Fail, format!("the box's mount ({tag}) is in the host's mount table"));
    }
    let made = field(&out.stdout, "mount") == Some("made");
    let ns = field(&out.stdout, "mntns").unwrap_or_default();
    if !made {
        (Status::Pass, "mounting a tmpfs in the box was refused".into())
    } else if own_kernel(&out.stdout, host_boot) {
        (Status::Pass, "the box mounted a tmpfs on a kernel of its own; the host's mount table is unchanged".into())
    } else if ns.is_empty() || ns == host_ns {
        (Status::Fail, format!("the box mounted a tmpfs in the host's mount namespace ({host_ns})"))
    } else {
        (
            Status::Pass,
            format!("the box mounted a tmpfs only in its own mount namespace ({ns}, the host's is {host_ns})"),
        )
    }
}

/// How many addresses a probe tries at once (see [`each_address`]).
const AT_ONCE: usize = 8;

/// A shell fragment running `each(address)` for every address in the
/// background, [`AT_ONCE`] at a time, and waiting for all of them. A fence
/// drops packets rather than refusing them, so each try lasts its whole
/// timeout: one after another, a machine with many bridges (every docker
/// egress box makes one) would need longer than [`super::GUARD`] allows.
pub(super) fn each_address(addrs: &[String], each: impl Fn(&str) -> String) -> String {
    let mut script = String::new();
    for (i, a) in addrs.iter().enumerate() {
        // A newline ends the command whatever it ends with (`;` or not).
        script += &format!("{{ {}\n}} & ", each(a));
        if (i + 1) % AT_ONCE == 0 {
            script += "wait; ";
        }
    }
    script + "wait; "
}

/// The host's IPv4 addresses (the kernel's local routes), loopback first.
pub(super) fn host_addresses() -> Vec<String> {
    let trie = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    let mut addrs = vec!["127.0.0.1".to_owned()];
    let lines: Vec<&str> = trie.lines().collect();
    for w in lines.windows(2) {
        let Some(addr) = w[0].trim().strip_prefix("|-- ") else { continue };
        if w[1].contains("/32 host LOCAL") && !addrs.iter().any(|a| a == addr) && !addr.starts_with("127.") {
            addrs.push(addr.to_owned());
        }
    }
    addrs
}

/// Network denied: nothing on the host is reachable over IP — the kit
/// listens on every host address, the box tries each (with `nc`, or
/// bash's /dev/tcp), and the kit's listener must accept nothing.
pub(super) async fn no_route_to_host(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let listener = std::net::TcpListener::bind("0.0.0.0:0").map_err(io("listen on a host port"))?;
    listener.set_nonblocking(true).map_err(io("listen on a host port"))?;
    let port = listener.local_addr().map_err(io("listen on a host port"))?.port();
    let addrs = host_addresses();
    let mut script = String::from(
        "if command -v nc >/dev/null 2>&1; then t=nc; elif command -v bash >/dev/null 2>&1; then t=bash; else t=none; fi; echo tool=$t; ",
    );
    script += &each_address(&addrs, |a| {
        format!(
            "case $t in nc) nc -w 2 {a} {port} </dev/null >/dev/null 2>&1;; \
             bash) bash -c 'exec 3<>/dev/tcp/{a}/{port}' 2>/dev/null;; esac;"
        )
    });
    script += "echo routes=$(tail -n +2 /proc/net/route 2>/dev/null | wc -l); echo done";
    let out = sh(kit, id, &script).await?;
    let accepted = listener.accept().is_ok();
    Ok(route_verdict(&out, accepted, &addrs, port))
}

fn route_verdict(out: &super::Output, accepted: bool, addrs: &[String], port: u16) -> Verdict {
    if accepted {
        return (Status::Fail, format!("the kit's host listener on port {port} accepted a connection from the box"));
    }
    if !out.stdout.lines().any(|l| l.trim() == "done") {
        return (Status::Fail, format!("the probe did not finish ({}): {}", out.status, out.stderr_line()));
    }
    let tool = field(&out.stdout, "tool").unwrap_or("none");
    let routes: usize = field(&out.stdout, "routes").and_then(|r| r.parse().ok()).unwrap_or(usize::MAX);
    match tool {
        "none" if routes == 0 => {
            (Status::Pass, "the box has no tool to connect with, and its IPv4 routing table is empty".into())
        }
        "none" => (
            Status::Skipped,
            format!("the box has neither nc nor bash to connect with, and shows {routes} IPv4 route(s)"),
        ),
        t => (
            Status::Pass,
            format!(
                "connections from the box ({t}) to the host's {} on port {port} never reached the kit",
                addrs.join(", ")
            ),
        ),
    }
}

/// Network denied: no host socket is reachable either — an abstract socket
/// the kit listens on (named in the host's network namespace) is not in
/// the box's /proc/net/unix, a filesystem socket the kit listens on is not
/// there as the host's, and neither accepted a connection.
pub(super) async fn no_host_sockets(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let name = format!("tinybox-kit-{}", nonce());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(io("name an abstract socket"))?;
    let abstract_l = UnixListener::bind_addr(&addr).map_err(io("listen on an abstract socket"))?;
    abstract_l.set_nonblocking(true).map_err(io("listen on an abstract socket"))?;
    let plant = Plant::new()?;
    let path = plant.dir.path().join("s");
    let file_l = UnixListener::bind(&path).map_err(io("listen on a socket file"))?;
    file_l.set_nonblocking(true).map_err(io("listen on a socket file"))?;
    let host_id = std::fs::metadata(&path).map(|m| (m.dev(), m.ino())).map_err(io("listen on a socket file"))?;
    let Some(w) = word(&path) else {
        return Ok((Status::Skipped, "the kit's temporary directory is not a UTF-8 path".into()));
    };
    // A connect where the box has a tool for it; the listing and the
    // socket's identity decide where it has none (busybox's nc has no -U).
    let script = format!(
        "grep -q '@{name}' /proc/net/unix 2>/dev/null && echo abstract=listed; \
         s=$(stat -L -c '%d %i' {w} 2>/dev/null) && echo \"file=$s\"; \
         if command -v socat >/dev/null 2>&1; then socat -u /dev/null ABSTRACT-CONNECT:{name} 2>/dev/null; \
         socat -u /dev/null UNIX-CONNECT:{w} 2>/dev/null; fi; echo done"
    );
    let out = sh(kit, id, &script).await?;
    let accepted = [abstract_l.accept().is_ok(), file_l.accept().is_ok()];
    Ok(sockets_verdict(&out, &name, &path, host_id, accepted))
}

fn sockets_verdict(out: &super::Output, name: &str, path: &Path, host_id: (u64, u64), accepted: [bool; 2]) -> Verdict {
    if !out.stdout.lines().any(|l| l.trim() == "done") && !accepted.contains(&true) {
        return (Status::Fail, format!("the probe did not finish ({}): {}", out.status, out.stderr_line()));
    }
    let mut reached = Vec::new();
    if accepted[0] || field(&out.stdout, "abstract") == Some("listed") {
        reached.push(format!("the host's abstract socket @{name}"));
    }
    let file = field(&out.stdout, "file")
        .map(|f| f.split_whitespace().filter_map(|n| n.parse::<u64>().ok()).collect::<Vec<_>>());
    if accepted[1] || file.is_some_and(|f| f == [host_id.0, host_id.1]) {
        reached.push(format!("the host's socket file {}", path.display()));
    }
    if reached.is_empty() {
        (Status::Pass, format!("the box reaches neither the host's abstract socket @{name} nor its socket file"))
    } else {
        (Status::Fail, format!("the box reaches {}", reached.join(" and ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printed(stdout: &str) -> crate::Output {
        crate::Output {
            status: tinybox_core::model::ExitStatus::code(0),
            stdout: stdout.into(),
            stderr: String::new(),
            elapsed: std::time::Duration::ZERO,
            cancelled: false,
        }
    }

    #[test]
    fn nonces_differ_and_quoting_survives_quotes() {
        assert_ne!(nonce(), nonce());
        assert_eq!(quote("a'b c"), r"'a'\''b c'");
    }

    #[test]
    fn ptrace_fails_only_on_the_callers_own_process() {
        let mark = "tinybox-kit-ptrace-x";
        assert_eq!(ptrace_verdict("done\n", 7, mark).unwrap().0, Status::Pass);
        assert_eq!(ptrace_verdict(&format!("comm=sleep\nA=1\0M={mark}\0\ndone\n"), 7, mark).unwrap().0, Status::Fail);
        assert_eq!(ptrace_verdict("mem=open\ncomm=sleep\ndone\n", 7, mark).unwrap().0, Status::Fail);
        // A VM's kernel thread that happens to have the caller's pid.
        assert_eq!(ptrace_verdict("mem=open\ncomm=kworker/0:1\ndone\n", 7, mark).unwrap().0, Status::Pass);
        assert!(ptrace_verdict("mem=open\n", 7, mark).is_none(), "an unfinished probe is no verdict");
    }

    #[test]
    fn the_hosts_shadow_is_caught_whole_or_by_a_hash() {
        let host = "root:$y$j9T$abc:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n";
        let boxed = |s: &str| format!("<<<shadow\n{s}shadow>>>\ndone\n");
        assert!(shadow_leaked(host, &boxed(host)));
        assert!(shadow_leaked(host, &boxed("x:!:1::::::\nroot:$y$j9T$abc:19000:0:99999:7:::\n")));
        // An image's own shadow, with the same locked system accounts.
        assert!(!shadow_leaked(host, &boxed("root:*:1:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")));
        assert!(!shadow_leaked(host, &boxed("")));
    }

    #[test]
    fn a_secret_is_reached_only_when_the_box_names_the_hosts_own_file() {
        let list = vec![Secret { what: "the host's /root".into(), path: "/root".into(), dev_ino: (2049, 12) }];
        let (s, d) = hidden_verdict(&printed("id 0 2049 12\ndone\n"), &list);
        assert_eq!(s, Status::Fail, "{d}");
        assert!(d.contains("the host's /root"), "{d}");
        // An image's own /root: another device.
        assert_eq!(hidden_verdict(&printed("id 0 39 12\ndone\n"), &list).0, Status::Pass);
        assert_eq!(hidden_verdict(&printed("no-stat\ndone\n"), &list).0, Status::Skipped);
        assert_eq!(hidden_verdict(&printed(""), &list).0, Status::Fail);
    }

    #[test]
    fn devices_on_the_hosts_kernel_fail_and_a_guests_own_pass() {
        let (s, d) = devices_verdict(&printed("boot=h\nopen=/dev/vda\ndone\n"), "h");
        assert_eq!(s, Status::Fail, "{d}");
        assert!(d.contains("/dev/vda"), "{d}");
        assert_eq!(devices_verdict(&printed("boot=g\nopen=/dev/vda\ndone\n"), "h").0, Status::Pass);
        assert_eq!(devices_verdict(&printed("boot=h\ndone\n"), "h").0, Status::Pass);
        // A box that hides its boot id is judged as on the host's kernel.
        assert_eq!(devices_verdict(&printed("boot=\nopen=/dev/mem\ndone\n"), "h").0, Status::Fail);
    }

    #[test]
    fn a_mount_fails_only_where_it_reaches_the_hosts_table() {
        let v = |stdout: &str, table: &str| mounts_verdict(&printed(stdout), "tag", table, "mnt:[1]", "h").0;
        assert_eq!(v("mount=refused\ndone\n", ""), Status::Pass);
        assert_eq!(v("mount=made\nmntns=mnt:[2]\nboot=h\ndone\n", ""), Status::Pass);
        assert_eq!(v("mount=made\nmntns=mnt:[1]\nboot=h\ndone\n", ""), Status::Fail);
        assert_eq!(v("mount=made\nmntns=mnt:[1]\nboot=g\ndone\n", ""), Status::Pass);
        assert_eq!(v("mount=refused\ndone\n", "36 1 0:5 / /x rw - tmpfs tag rw"), Status::Fail);
    }

    #[test]
    fn a_route_fails_on_an_accept_and_needs_a_tool_or_an_empty_table() {
        let a = ["127.0.0.1".to_owned()];
        assert_eq!(route_verdict(&printed("tool=nc\nroutes=0\ndone\n"), true, &a, 1).0, Status::Fail);
        assert_eq!(route_verdict(&printed("tool=bash\nroutes=1\ndone\n"), false, &a, 1).0, Status::Pass);
        assert_eq!(route_verdict(&printed("tool=none\nroutes=0\ndone\n"), false, &a, 1).0, Status::Pass);
        assert_eq!(route_verdict(&printed("tool=none\nroutes=2\ndone\n"), false, &a, 1).0, Status::Skipped);
    }

    #[test]
    fn a_host_socket_is_reached_when_listed_identical_or_accepted() {
        let p = Path::new("/tmp/x/s");
        let v = |stdout: &str, acc| sockets_verdict(&printed(stdout), "n", p, (5, 9), acc).0;
        assert_eq!(v("done\n", [false, false]), Status::Pass);
        assert_eq!(v("abstract=listed\ndone\n", [false, false]), Status::Fail);
        assert_eq!(v("file=5 9\ndone\n", [false, false]), Status::Fail);
        assert_eq!(v("file=6 9\ndone\n", [false, false]), Status::Pass);
        assert_eq!(v("done\n", [false, true]), Status::Fail);
    }

    #[test]
    fn each_address_runs_every_try_and_waits_for_them_all() {
        let addrs: Vec<String> = (0..20).map(|i| format!("10.0.0.{i}")).collect();
        // Each try sleeps a little so that an unwaited one would print after `done`.
        let script = each_address(&addrs, |a| format!("sleep 0.05; echo tried={a}")) + "echo done";
        let out = std::process::Command::new("sh").args(["-c", &script]).output().unwrap();
        let out = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.last(), Some(&"done"), "{out}");
        let mut tried: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("tried=")).collect();
        tried.sort_by_key(|a| a.rsplit('.').next().unwrap().parse::<u32>().unwrap());
        assert_eq!(tried, addrs.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(script.matches("wait;").count(), 3, "two full batches of {AT_ONCE} and the rest");
    }

    #[test]
    fn host_addresses_start_with_loopback() {
        assert_eq!(host_addresses()[0], "127.0.0.1");
    }
}
