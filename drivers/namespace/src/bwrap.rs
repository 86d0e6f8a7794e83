//! The bwrap command line for one command in a box. A pure function, so
//! every flag that forms the boundary is pinned by a unit test.

use std::collections::BTreeMap;

/// Where the box's one writable directory appears, and commands start.
pub const WORKSPACE: &str = "/workspace";

/// PATH given to bwrap itself (never to the box): bwrap runs with an empty
/// environment so that nothing of the caller's — tokens included — is
/// readable through the sandbox's /proc/1/environ.
pub const BWRAP_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The host files a box sees under /etc: these four, never the whole
/// directory, which holds every credential and host key the user can read.
pub const ETC_ALLOWED: [&str; 4] = ["/etc/passwd", "/etc/group", "/etc/resolv.conf", "/etc/ssl/certs"];

/// Where an allowlist box sees the relay program and its proxy's socket.
pub const RELAY_IN_BOX: &str = "/run/tinybox/egress-relay";
pub const PROXY_IN_BOX: &str = "/run/tinybox/egress.sock";

/// What one command needs to know about its box.
#[derive(Debug, Clone)]
pub struct Layout<'a> {
    /// The host directory bound at /workspace.
    pub workspace: &'a str,
    /// Where the command starts, inside the box.
    pub cwd: Option<&'a str>,
    /// The whole environment the command gets.
    pub env: &'a BTreeMap<String, String>,
    /// Stay in the network namespace bwrap starts in. Only ever true for
    /// egress, where that namespace is a private one netwrap.sh made and
    /// slirp4netns serves — never the host's.
    pub share_net: bool,
    /// The box's cgroup directories on the host, shown read-only inside.
    pub cgroups: &'a [String],
    /// They are cgroup v2 directories.
    pub cgroup_v2: bool,
    /// Whether the command runs on a terminal its host made for it
    /// (`RunParams::tty`), and whose session that terminal belongs to.
    pub terminal: Terminal,
    /// An allowlist box's proxy: its socket and the relay are bound
    /// read-only into the box (whose network stays loopback only), and the
    /// command runs under the relay, which listens on the box's loopback.
    pub egress: Option<&'a tinybox_sdk::protocol::EgressEndpoint>,
}

/// How a command meets its terminal (docs/adr/0025-namespace-terminal-on-a-remote-host.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    /// No terminal made for it: its descriptors may be the caller's own
    /// terminal, so the box leads a session of its own (bwrap's
    /// `--new-session`), where TIOCSTI cannot reach that terminal.
    None,
    /// A terminal its host made for this run and left unowned (this
    /// machine, `tty_session_inside`): the box leads a session of its own
    /// and takes the terminal there (`setsid -c`, see [`checked_setsid`]).
    Unowned,
    /// The controlling terminal of the session its host made for this run
    /// and nothing else (sshd's, on an ssh host), which no session of the
    /// box's can take: the box stays in that session (so the terminal's
    /// SIGWINCH reaches it) and runs the command under util-linux `script`,
    /// which makes a terminal of the box's own devpts for it, and a session
    /// inside the pid namespace controlling that one (see [`checked_script`]).
    /// Nothing reads the host's terminal but `script`, so TIOCSTI from
    /// the box reaches only the box.
    HostSession,
}

/// The descriptor bwrap reads the seccomp program from (see `sandbox::start_script`).
pub const SECCOMP_FD: &str = "3";

/// The descriptor bwrap reads the box's environment from, as more of its
/// own arguments (`--args`): NUL-separated `--setenv NAME VALUE` triples
/// the start shell prints from the variables carrying them
/// (`tinybox_sdk::carried_env`, see `sandbox::env_feed`).
pub const ENV_FD: &str = "5";

/// The arguments after `bwrap`, ending with `--` and the command.
pub fn args(layout: &Layout<'_>, argv: &[String]) -> Vec<String> {
    let mut a: Vec<String> = Vec::with_capacity(64 + argv.len());
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
    push(&["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup"]);
    if !layout.share_net {
        push(&["--unshare-net"]);
    }
    // Without these two the box outlives its command's parent, and can push
    // keystrokes into the caller's terminal through TIOCSTI. In the session
    // its host made around a terminal made for this run, it stays: that
    // session holds no terminal but the run's own (`Terminal::HostSession`).
    push(&["--die-with-parent"]);
    if layout.terminal != Terminal::HostSession {
        push(&["--new-session"]);
    }
    push(&["--cap-drop", "ALL"]);
    // No nested user namespace: inside one the box would hold CAP_SETFCAP
    // over its own files and could give them file capabilities.
    push(&["--disable-userns"]);
    push(&["--seccomp", SECCOMP_FD]);
    push(&["--ro-bind", "/usr", "/usr"]);
    for (link, target) in [("/bin", "usr/bin"), ("/sbin", "usr/sbin"), ("/lib", "usr/lib"), ("/lib64", "usr/lib64")] {
        push(&["--symlink", target, link]);
    }
    // /proc/1 is bwrap's init, the one process of the box the seccomp
    // program does not filter: hidden, so no /proc/1/mem reaches it.
    push(&["--proc", "/proc", "--tmpfs", "/proc/1", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/etc"]);
    for path in ETC_ALLOWED {
        push(&["--ro-bind-try", path, path]);
    }
    for dir in layout.cgroups {
        if let Some(inside) = crate::cgroup::in_box(dir, layout.cgroup_v2) {
            push(&["--ro-bind", dir, &inside]);
        }
    }
    if let Some(egress) = layout.egress {
        let (relay, socket) = (egress.relay.to_string_lossy(), egress.socket.to_string_lossy());
        push(&["--ro-bind", &relay, RELAY_IN_BOX, "--ro-bind", &socket, PROXY_IN_BOX]);
        // A box with secrets trusts its proxy's CA (ADR 0032); the file is there only then.
        let bundle = egress.ca_bundle();
        push(&["--ro-bind-try", &bundle.to_string_lossy(), tinybox_sdk::protocol::egress::CA_BUNDLE_IN_BOX]);
    }
    push(&["--bind", layout.workspace, WORKSPACE]);
    // Everything outside /workspace and /tmp is read-only.
    push(&["--remount-ro", "/"]);
    let cwd = match layout.cwd {
        None => WORKSPACE.to_owned(),
        Some(c) if c.starts_with('/') => c.to_owned(),
        Some(c) => format!("{WORKSPACE}/{c}"),
    };
    push(&["--chdir", &cwd]);
    // The box's environment is exactly its own: bwrap's is cleared, then
    // bwrap reads the box's `--setenv NAME VALUE` triples from a pipe the
    // start shell feeds ([`ENV_FD`]), never from its command line, which
    // every user of the host can read.
    push(&["--clearenv"]);
    if !layout.env.is_empty() {
        push(&["--args", ENV_FD]);
    }
    push(&["--"]);
    // The box's own sh checks the program first, then becomes it: a
    // missing one is 127 with one line naming it, never bwrap's execvp error.
    let mut command = vec!["/bin/sh".to_owned(), "-c".to_owned()];
    match layout.terminal {
        Terminal::None => command.extend([checked_exec(), "sh".to_owned()]),
        Terminal::Unowned => command.extend([checked_setsid(), "sh".to_owned()]),
        Terminal::HostSession => {
            command.extend([checked_script(), "sh".to_owned(), script_command(argv)]);
        }
    }
    command.extend(argv.iter().cloned());
    match layout.egress {
        Some(egress) => a.extend(egress.relay_argv(RELAY_IN_BOX, PROXY_IN_BOX, &command)),
        None => a.extend(command),
    }
    a
}

/// The check, then `exec "$@"`: the command replaces the shell, so the box
/// holds no process of ours beside it.
pub fn checked_exec() -> String {
    format!("{}\nexec \"$@\"", tinybox_sdk::process::PROGRAM_CHECK)
}

/// On a terminal: the check, then the command under `setsid -c`, a session
/// of its own inside the box whose controlling terminal is the one its
/// host made for this run (and left unowned). Run as a child, not exec'd:
/// this shell leads the session bwrap made, and setsid would have to fork
/// (losing the command's status) to leave it. The shell's status is the
/// command's, 128 + N for a signal N.
pub fn checked_setsid() -> String {
    format!("{}\nsetsid -c \"$@\"; exit $?", tinybox_sdk::process::PROGRAM_CHECK)
}

/// Where a box finds util-linux's `script` (Debian's bsdutils, Essential):
/// under /usr, the only host tree a box sees.
pub const SCRIPT: &str = "/usr/bin/script";

/// On a terminal its host's session holds: `$1` is the command line for
/// `script -c` ([`script_command`]), the rest the command. The check, then
/// `script`, which opens a terminal of the box's devpts, starts `$SHELL -c
/// LINE` leading a session that controls it, copies between it and the
/// host's terminal (in raw mode, so Ctrl-C is a byte the box's terminal
/// turns into SIGINT for its foreground group), passes on each window
/// change, and with `-e` ends with the command's status (128 + N for a
/// signal N). `-q`: no banner; the typescript goes to /dev/null. SHELL is
/// /bin/sh for `script` alone: the line is quoted for a POSIX shell. The
/// box's own SHELL travels to the line in [`SAVED_SHELL`] (`+VALUE`, or
/// `-` when it had none), never in the line, which is on command lines.
pub fn checked_script() -> String {
    format!(
        r#"line=$1; shift
[ -x {SCRIPT} ] || {{ echo "tinybox: a terminal in a namespace box on this host needs util-linux's script at {SCRIPT} (Debian: bsdutils)" >&2; exit 125; }}
{}
if [ -n "${{SHELL+x}}" ]; then {SAVED_SHELL}=+$SHELL; else {SAVED_SHELL}=-; fi
export {SAVED_SHELL}
SHELL=/bin/sh exec {SCRIPT} -q -e -c "$line" /dev/null"#,
        tinybox_sdk::process::PROGRAM_CHECK
    )
}

/// Where [`checked_script`] keeps the box's SHELL for the line `script`
/// runs, which puts it back. A box variable of this very name does not
/// survive a terminal run on a remote host.
pub const SAVED_SHELL: &str = "TINYBOX_BOX_SHELL";

/// The line `script`'s /bin/sh runs: the box's own SHELL put back from
/// [`SAVED_SHELL`] (or unset, as it was), then the command, each word
/// quoted for that shell. It names no value of the box's environment.
pub fn script_command(argv: &[String]) -> String {
    let restore = format!(
        "case ${{{SAVED_SHELL}-}} in +*) SHELL=${{{SAVED_SHELL}#+}}; export SHELL;; *) unset SHELL;; esac; unset {SAVED_SHELL}"
    );
    let words: Vec<String> = argv.iter().map(|w| shell_word(w)).collect();
    format!("{restore}; exec {}", words.join(" "))
}

/// Quotes a word for a POSIX shell: as it is when it holds nothing a shell
/// reads specially, else in single quotes (a quote inside as `'\''`).
pub fn shell_word(w: &str) -> String {
    if !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "/._-=".contains(c)) {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A box on `/home/u/proj` with no terminal, network, cgroups or egress.
    fn plain(env: &BTreeMap<String, String>) -> Layout<'_> {
        Layout {
            workspace: "/home/u/proj",
            cwd: None,
            env,
            share_net: false,
            cgroups: &[],
            cgroup_v2: false,
            terminal: Terminal::None,
            egress: None,
        }
    }

    fn build(env: &BTreeMap<String, String>, cwd: Option<&str>) -> Vec<String> {
        args(&Layout { cwd, ..plain(env) }, &["sh".into(), "-c".into(), "x; y".into()])
    }

    fn has_seq(a: &[String], seq: &[&str]) -> bool {
        a.windows(seq.len()).any(|w| w.iter().zip(seq).all(|(x, y)| x == y))
    }

    #[test]
    fn the_boundary_flags_are_always_there() {
        let a = build(&BTreeMap::new(), None);
        for flag in [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup",
            "--unshare-net",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--disable-userns",
        ] {
            assert!(a.iter().any(|x| x == flag), "missing {flag}");
        }
        assert!(has_seq(&a, &["--cap-drop", "ALL"]));
        assert!(has_seq(&a, &["--ro-bind", "/usr", "/usr"]));
        assert!(has_seq(&a, &["--bind", "/home/u/proj", "/workspace"]));
        assert!(has_seq(&a, &["--chdir", "/workspace"]));
        assert!(has_seq(&a, &["--proc", "/proc", "--tmpfs", "/proc/1"]) && has_seq(&a, &["--tmpfs", "/tmp"]));
        assert!(has_seq(&a, &["--seccomp", "3"]));
    }

    #[test]
    fn a_terminal_run_takes_its_terminal_in_a_session_of_its_own_and_keeps_every_boundary() {
        let env = BTreeMap::new();
        let layout = plain(&env);
        let plain = args(&layout, &["sh".to_owned()]);
        let terminal = args(&Layout { terminal: Terminal::Unowned, ..layout }, &["sh".to_owned()]);
        assert!(terminal.iter().any(|x| x == "--new-session"), "the box never shares the caller's session");
        let sep = terminal.iter().position(|x| x == "--").unwrap();
        assert_eq!(&terminal[sep + 1..], ["/bin/sh", "-c", &checked_setsid(), "sh", "sh"]);
        assert!(checked_setsid().contains("setsid -c \"$@\""));
        assert_eq!(plain[..sep], terminal[..sep], "nothing before the command changes");
    }

    #[test]
    fn on_a_terminal_of_the_hosts_session_the_box_stays_in_that_session_and_keeps_every_other_boundary() {
        let env = BTreeMap::new();
        let layout = plain(&env);
        let plain = args(&layout, &["sh".to_owned()]);
        let hosted = args(&Layout { terminal: Terminal::HostSession, ..layout }, &["sh".to_owned()]);
        assert!(!hosted.iter().any(|x| x == "--new-session"), "a session of its own could not take the terminal");
        let sep = hosted.iter().position(|x| x == "--").unwrap();
        let plain_sep = plain.iter().position(|x| x == "--").unwrap();
        let without: Vec<&String> = plain[..plain_sep].iter().filter(|x| *x != "--new-session").collect();
        assert_eq!(hosted[..sep].iter().collect::<Vec<_>>(), without, "only --new-session goes");
        assert_eq!(
            &hosted[sep + 1..],
            ["/bin/sh", "-c", &checked_script(), "sh", &script_command(&["sh".to_owned()]), "sh"],
            "the command runs under script, checked first"
        );
    }

    #[test]
    fn the_line_script_runs_is_the_command_quoted_with_the_boxs_own_shell_put_back() {
        let argv: Vec<String> = ["printf", "%s|", "a b", "it's", "$(x)", "", "`y`"].map(String::from).to_vec();
        let line = script_command(&argv);
        assert!(line.ends_with(r#"; exec printf '%s|' 'a b' 'it'\''s' '$(x)' '' '`y`'"#), "{line}");
        // The shell script runs reads back exactly the words given.
        let out = std::process::Command::new("/bin/sh").args(["-c", &line]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|it's|$(x)||`y`|");
    }

    /// Runs [`checked_script`] for real with a stand-in for `script` that
    /// runs `$SHELL -c LINE` as script does, in environment `env` alone.
    fn through_checked_script(env: &[(&str, &str)], argv: &[&str]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("script");
        std::fs::write(&fake, "#!/bin/sh\n[ \"$SHELL\" = /bin/sh ] || exit 99\nexec \"$SHELL\" -c \"$4\"\n").unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let start = checked_script().replace(SCRIPT, fake.to_str().unwrap());
        let argv: Vec<String> = argv.iter().map(|w| w.to_string()).collect();
        let out = std::process::Command::new("/bin/sh")
            .env_clear()
            .envs(env.iter().copied())
            .env("PATH", "/usr/bin:/bin")
            .args(["-c", &start, "sh", &script_command(&argv)])
            .args(&argv)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn a_terminal_run_on_a_remote_host_keeps_the_boxs_shell_and_no_value_on_a_command_line() {
        let secret = "/bin/my shell 'with' $(quotes)";
        let line = script_command(&["sh".to_owned(), "-c".to_owned(), "echo \"$SHELL\"".to_owned()]);
        assert!(!line.contains("my shell"), "{line}");
        let seen = through_checked_script(
            &[("SHELL", secret)],
            &["sh", "-c", "printf '%s|' \"$SHELL\" \"${TINYBOX_BOX_SHELL-gone}\""],
        );
        assert_eq!(seen, format!("{secret}|gone|"), "the box's SHELL, not script's, and no helper left");
        let seen = through_checked_script(&[], &["sh", "-c", "echo ${SHELL-unset}"]);
        assert_eq!(seen, "unset\n");
        let seen = through_checked_script(&[("SHELL", "")], &["sh", "-c", "echo \"[${SHELL-unset}]\""]);
        assert_eq!(seen, "[]\n", "an empty SHELL stays set and empty");
    }

    #[test]
    fn without_script_the_terminal_run_ends_with_one_line_naming_it() {
        let start = checked_script();
        assert!(start.contains(&format!("[ -x {SCRIPT} ] ||")), "{start}");
        let missing = start.replace(SCRIPT, "/nonexistent/script");
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &missing, "sh", "unset SHELL; exec true", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("needs util-linux's script at /nonexistent/script"), "{err}");
    }

    #[test]
    fn only_four_etc_entries_are_bound() {
        let a = build(&BTreeMap::new(), None);
        let etc: Vec<&String> = a.iter().filter(|x| x.starts_with("/etc/")).collect();
        assert_eq!(etc.len(), 8, "each allowed file appears as source and destination: {etc:?}");
        assert!(
            !a.iter().any(|x| x == "/etc" && a.iter().any(|y| y == "--ro-bind")) || has_seq(&a, &["--dir", "/etc"])
        );
        assert!(!has_seq(&a, &["--ro-bind", "/etc", "/etc"]) && !has_seq(&a, &["--bind", "/", "/"]));
    }

    #[test]
    fn the_command_follows_the_separator_verbatim() {
        let a = build(&BTreeMap::new(), None);
        let sep = a.iter().position(|x| x == "--").unwrap();
        assert_eq!(&a[sep + 1..sep + 5], ["/bin/sh", "-c", &checked_exec(), "sh"]);
        assert_eq!(&a[sep + 5..], ["sh", "-c", "x; y"]);
    }

    #[test]
    fn the_environment_is_read_from_its_descriptor_and_cwd_resolves_under_the_workspace() {
        let env: BTreeMap<String, String> = [("A".to_string(), "1 2".to_string())].into();
        let a = build(&env, Some("sub/dir"));
        assert!(has_seq(&a, &["--clearenv", "--args", ENV_FD]), "{a:?}");
        assert!(!a.iter().any(|x| x == "--setenv"), "{a:?}");
        let none = build(&BTreeMap::new(), None);
        assert!(!none.iter().any(|x| x == "--args"), "no box environment, nothing to read: {none:?}");
        assert!(has_seq(&none, &["--clearenv"]));
        assert!(has_seq(&a, &["--chdir", "/workspace/sub/dir"]));
        let a = build(&env, Some("/tmp"));
        assert!(has_seq(&a, &["--chdir", "/tmp"]));
    }

    #[test]
    fn no_value_of_the_boxs_environment_is_on_bwraps_command_line_whatever_the_box() {
        let env: BTreeMap<String, String> = [
            ("SECRET".to_owned(), "hunter2-value".to_owned()),
            ("SHELL".to_owned(), "/bin/shell-value".to_owned()),
            ("odd name-1".to_owned(), "second value\nwith a newline".to_owned()),
        ]
        .into();
        let egress = tinybox_sdk::protocol::EgressEndpoint {
            socket: "/s/proxy.sock".into(),
            relay: "/opt/tinybox-egress".into(),
            port: 3128,
        };
        for terminal in [Terminal::None, Terminal::Unowned, Terminal::HostSession] {
            for allowlist in [None, Some(&egress)] {
                let layout = Layout { terminal, egress: allowlist, share_net: allowlist.is_none(), ..plain(&env) };
                let a = args(&layout, &["sh".to_owned()]);
                for value in env.values() {
                    assert!(!a.iter().any(|x| x.contains(value.as_str())), "{value:?} on {terminal:?}: {a:?}");
                }
                assert!(has_seq(&a, &["--clearenv", "--args", ENV_FD]), "{a:?}");
            }
        }
        // What the start shell gets instead: variables no host program reads.
        let vars = tinybox_sdk::carried_env::vars(&env);
        assert_eq!(vars.len(), 3);
        assert_eq!(vars["TINYBOX_BOXENV_0"], "SECRET=hunter2-value");
        assert_eq!(vars["TINYBOX_BOXENV_1"], "SHELL=/bin/shell-value");
        assert_eq!(vars["TINYBOX_BOXENV_2"], "odd name-1=second value\nwith a newline");
    }

    #[test]
    fn an_allowlist_box_has_no_network_but_the_relay_and_its_proxy_bound_read_only() {
        let env = BTreeMap::new();
        let egress = tinybox_sdk::protocol::EgressEndpoint {
            socket: "/s/egress/ns-box-1/proxy.sock".into(),
            relay: "/opt/tb/tinybox-egress".into(),
            port: 3128,
        };
        let layout = Layout { egress: Some(&egress), ..plain(&env) };
        let a = args(&layout, &["sh".into(), "-c".into(), "x; y".into()]);
        assert!(a.iter().any(|x| x == "--unshare-net"), "loopback only: no path out but the socket");
        assert!(has_seq(&a, &["--ro-bind", "/opt/tb/tinybox-egress", RELAY_IN_BOX]));
        assert!(has_seq(&a, &["--ro-bind", "/s/egress/ns-box-1/proxy.sock", PROXY_IN_BOX]));
        let bundle = ["--ro-bind-try", "/s/egress/ns-box-1/ca-bundle.pem", "/run/tinybox/egress/ca-bundle.pem"];
        assert!(has_seq(&a, &bundle), "the CA bundle of a box with secrets, when there is one");
        let sep = a.iter().position(|x| x == "--").unwrap();
        assert_eq!(
            &a[sep + 1..],
            [
                RELAY_IN_BOX,
                "relay",
                "--listen",
                "127.0.0.1:3128",
                "--to",
                PROXY_IN_BOX,
                "--",
                "/bin/sh",
                "-c",
                &checked_exec(),
                "sh",
                "sh",
                "-c",
                "x; y"
            ],
            "the relay runs the usual checked start, which runs the command verbatim"
        );
        // Every boundary flag before the separator is as for any box, plus the three binds.
        let plain = args(&Layout { egress: None, ..layout.clone() }, &["true".into()]);
        let binds = 9;
        assert_eq!(a[..sep].len(), plain.iter().position(|x| x == "--").unwrap() + binds);
    }
}
