//! A box's egress: passt, the guest's user-mode network stack, run in the
//! foreground inside a fenced network namespace of its own
//! (`tinybox_sdk::fence::NETWRAP`), whose only way out is slirp4netns with
//! the host's loopback disabled. The fence is on the host's side: the
//! guest's root can change anything inside the guest, nothing in that
//! namespace. QEMU reaches passt over its UNIX socket in the box's
//! directory, a file that crosses the namespace boundary.
//!
//! Every process this makes names the box's directory on its command line
//! (the wrapper through passt's arguments, its helpers through `TMPDIR`),
//! so `vm::kill_all_naming` finds them all from the record alone.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tinybox_sdk::fence::{Exception, Fence, NETWRAP, SLIRP_DNS};
use tinybox_sdk::protocol::DriverError;

use crate::vm::{self, whole_argument};

/// How long passt may take to bind its socket, slirp4netns included.
const READY_LIMIT: Duration = Duration::from_secs(30);

/// The programs the fence needs on this machine besides passt.
const FENCE_TOOLS: [&str; 3] = ["slirp4netns", "unshare", "setpriv"];
/// Where iptables lives, whatever the caller's PATH.
const SBIN: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

fn in_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).chain(SBIN.iter().map(PathBuf::from)).any(|d| d.join(program).is_file())
}

/// Refuses egress, in one line naming the packages, where the fence cannot
/// be put up (`netwrap.sh` would fail the same way, later and less clearly).
pub fn check_tools() -> Result<(), DriverError> {
    let missing: Vec<&str> = FENCE_TOOLS.into_iter().filter(|p| !in_path(p)).collect();
    if !missing.is_empty() {
        return Err(DriverError::unavailable(format!(
            "egress for a microVM runs passt behind the egress fence, which needs {}; install the slirp4netns and util-linux packages",
            missing.join(", ")
        )));
    }
    let iptables = |names: [&str; 2]| names.iter().any(|n| SBIN.iter().any(|d| Path::new(d).join(n).is_file()));
    if !iptables(["iptables-nft-restore", "iptables-restore"])
        || !iptables(["ip6tables-nft-restore", "ip6tables-restore"])
    {
        return Err(DriverError::unavailable(
            "egress for a microVM needs iptables and ip6tables on the host for its fence (no host, no private ranges); install the iptables package",
        ));
    }
    Ok(())
}

/// passt's arguments for the box in `dir`, run as `uid`:`gid` (started as
/// root, passt would otherwise become nobody): in the foreground (the
/// wrapper's command, so it stays in the fenced namespace), one client
/// (QEMU), then gone; the guest's address, gateway and DNS fixed to what
/// its init sets; the gateway NOT mapped to the host; and no DNS address
/// of passt's own (`--dns none`): the guest's resolver, 10.0.2.3, is
/// slirp4netns's name server in the fenced namespace too, so the guest's
/// queries go there as they are, the one resolver the fence lets through.
/// (This passt's `--dns-forward` forwards only to a resolver read from the
/// host's resolv.conf, which may be a private or loopback address.)
pub fn passt_args(dir: &Path, uid: u32, gid: u32) -> Result<Vec<String>, String> {
    // passt takes each path as a whole argument.
    let p = |name: &str| whole_argument("the box directory", &dir.join(name));
    let mut a: Vec<String> = vec!["--runas".into(), format!("{uid}:{gid}")];
    a.extend(
        [
            "--foreground",
            "--one-off",
            "--no-map-gw",
            "--quiet",
            "--ipv4-only",
            "--address",
            "10.0.2.15",
            "--netmask",
            "24",
        ]
        .map(String::from),
    );
    a.extend(["--gateway", "10.0.2.2", "--dns", "none"].map(String::from));
    a.extend([
        "--socket".into(),
        p("passt.sock")?,
        "--pid".into(),
        p("passt.pid")?,
        "--log-file".into(),
        p("passt.log")?,
    ]);
    Ok(a)
}

/// The whole command: `sh -c NETWRAP` with the fence's rules, then passt
/// with no capability at all (not even in its bounding set, root or not),
/// so that passt, which parses what the guest sends, holds nothing over
/// the namespace's rules.
pub fn fenced_passt(
    passt: &Path,
    dir: &Path,
    exceptions: &[Exception],
    (uid, gid): (u32, u32),
) -> Result<Vec<String>, String> {
    let fence = Fence { exceptions: exceptions.to_vec(), resolvers: vec![SLIRP_DNS] };
    let v4 = fence.v4();
    let mut argv: Vec<String> = ["sh", "-c", NETWRAP, "tinybox-netwrap"].map(String::from).into();
    argv.extend([v4.head, v4.tail, fence.v6()]);
    argv.extend(["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"].map(String::from));
    argv.push(whole_argument("passt", passt)?);
    argv.extend(passt_args(dir, uid, gid)?);
    Ok(argv)
}

/// Starts fenced passt for the box in `dir` and waits until it serves; its
/// socket. The wrapper runs in a process group of its own (no terminal's
/// signal reaches it) and outlives this driver; it goes when passt does,
/// once QEMU leaves, or when `create::tear_down` stops it.
pub async fn start(passt: &Path, dir: &Path, exceptions: &[Exception]) -> Result<PathBuf, DriverError> {
    let ids = (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw());
    let argv = fenced_passt(passt, dir, exceptions, ids).map_err(DriverError::invalid)?;
    let log_path = dir.join("netwrap.log");
    let log = std::fs::File::create(&log_path)
        .map_err(|e| DriverError::failed(format!("cannot make {}: {e}", log_path.display())))?;
    let mut child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env("TMPDIR", dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| DriverError::failed(format!("cannot run sh for the egress fence: {e}")))?;
    let deadline = Instant::now() + READY_LIMIT;
    loop {
        // passt writes its pid once its socket listens.
        if vm::live_pid(&dir.join("passt.pid"), dir).is_some() && dir.join("passt.sock").exists() {
            // Not waited for: tokio reaps it should it end while this
            // driver still runs, init once the driver is gone.
            drop(child);
            return Ok(dir.join("passt.sock"));
        }
        if let Ok(Some(status)) = child.try_wait() {
            let said = std::fs::read_to_string(&log_path).unwrap_or_default();
            let passt_said = std::fs::read_to_string(dir.join("passt.log")).unwrap_or_default();
            let why = [said.trim(), passt_said.trim()].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>();
            return Err(DriverError::failed(format!(
                "passt behind the egress fence did not start ({status}): {}",
                if why.is_empty() { "it said nothing".to_owned() } else { why.join(" | ").replace('\n', " ") }
            )));
        }
        if Instant::now() >= deadline {
            return Err(DriverError::failed(format!(
                "passt behind the egress fence did not bind its socket within {}s",
                READY_LIMIT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after<'a>(args: &'a [String], flag: &str) -> Vec<&'a str> {
        args.windows(2).filter(|w| w[0] == flag).map(|w| w[1].as_str()).collect()
    }

    #[test]
    fn passt_takes_box_paths_whole_and_refuses_what_it_cannot_carry() {
        let a = passt_args(Path::new("/run/a,b=c"), 0, 0).unwrap();
        assert_eq!(after(&a, "--socket"), ["/run/a,b=c/passt.sock"]);
        assert_eq!(after(&a, "--pid"), ["/run/a,b=c/passt.pid"]);
        assert_eq!(after(&a, "--log-file"), ["/run/a,b=c/passt.log"]);
        use std::os::unix::ffi::OsStrExt;
        let err = passt_args(Path::new(std::ffi::OsStr::from_bytes(b"/run/\xfe")), 0, 0).unwrap_err();
        assert!(err.contains("not valid UTF-8"), "{err}");
    }

    #[test]
    fn passt_never_maps_the_gateway_to_the_host_and_serves_one_vm_in_the_foreground() {
        let a = passt_args(Path::new("/run/b"), 1000, 1000).unwrap();
        for flag in ["--no-map-gw", "--one-off", "--foreground"] {
            assert!(a.contains(&flag.to_owned()), "{flag}: {a:?}");
        }
        assert_eq!(after(&a, "--runas"), ["1000:1000"]);
        // What init.sh configures in the guest.
        assert_eq!(after(&a, "--address"), ["10.0.2.15"]);
        assert_eq!(after(&a, "--gateway"), ["10.0.2.2"]);
        assert!(crate::guest::INIT.contains("ip addr add 10.0.2.15/24") && crate::guest::INIT.contains("via 10.0.2.2"));
        // The guest's resolver is the one the fence lets through, reached as it is.
        assert!(crate::guest::INIT.contains(&format!("nameserver {SLIRP_DNS}\"")));
        assert_eq!(after(&a, "--dns"), ["none"]);
        assert!(after(&a, "--dns-forward").is_empty());
    }

    #[test]
    fn passt_runs_capless_inside_the_fence_with_the_exceptions_the_box_was_given() {
        let exceptions: Vec<Exception> = vec!["10.254.16.2:8080".parse().unwrap()];
        let argv = fenced_passt(Path::new("/usr/bin/passt"), Path::new("/run/b"), &exceptions, (0, 0)).unwrap();
        assert_eq!(argv[..4], ["sh", "-c", NETWRAP, "tinybox-netwrap"]);
        let fence = Fence { exceptions, resolvers: vec![SLIRP_DNS] };
        assert_eq!(argv[4..7], [fence.v4().head, fence.v4().tail, fence.v6()]);
        assert!(argv[4].contains("-A OUTPUT -d 10.254.16.2/32 -p tcp --dport 8080 -j ACCEPT\n"), "{}", argv[4]);
        assert!(argv[4].contains("-A OUTPUT -d 10.0.2.3/32 -p udp --dport 53 -j ACCEPT\n"), "{}", argv[4]);
        let passt = argv.iter().position(|a| a == "/usr/bin/passt").unwrap();
        assert_eq!(argv[7..passt], ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"]);
        assert_eq!(argv[passt + 1..], passt_args(Path::new("/run/b"), 0, 0).unwrap()[..]);
        // The wrapper's own command line names the box directory: found by it.
        assert!(argv.iter().any(|a| a.starts_with("/run/b/")));
        assert!(NETWRAP.contains("--disable-host-loopback") && NETWRAP.contains("$d/userns"));
    }
}
