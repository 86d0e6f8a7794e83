//! Unit tables for the secrets' request rules and the proxy's rules.

use super::*;

fn policy() -> Policy {
    Policy::parse(["api.test", "other.test:8443", "*.wild.test", "10.0.0.1"]).unwrap()
}

fn spec(sources: &[(&str, &str)], hosts: &[(&str, &str)], headers: &[(&str, &str)]) -> SecretsSpec {
    let mut s = SecretsSpec::default();
    for (n, src) in sources {
        s.sources.insert((*n).into(), (*src).into());
    }
    for (n, h) in hosts {
        s.hosts.entry((*n).into()).or_default().push((*h).into());
    }
    for (h, t) in headers {
        s.headers.entry((*h).into()).or_default().push((*t).into());
    }
    s
}

fn file_with(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

#[test]
fn a_file_source_is_read_without_its_newline_and_hosts_come_back_canonical() {
    let f = file_with("s3cret\n");
    let src = format!("file:{}", f.path().display());
    let s = spec(&[("TOKEN", &src)], &[("TOKEN", "API.test.")], &[("Other.Test", "Authorization: Bearer {TOKEN}")]);
    let checked = s.checked(Some(&policy())).unwrap();
    assert_eq!(checked.hosts["TOKEN"], ["api.test"]);
    assert_eq!(checked.headers["other.test"], ["Authorization: Bearer {TOKEN}"]);
    assert_eq!(checked.values().unwrap()["TOKEN"], "s3cret");
    assert_eq!(checked.sources["TOKEN"], src, "the spec keeps the source, not the value");
}

#[test]
fn each_broken_rule_is_one_line_naming_the_value() {
    let f = file_with("v");
    let src = format!("file:{}", f.path().display());
    let empty = file_with("\n");
    let empty_src = format!("file:{}", empty.path().display());
    let cases: Vec<(SecretsSpec, &str)> = vec![
        (spec(&[("1X", &src)], &[("1X", "api.test")], &[]), "secret name \"1X\" is not a variable name"),
        (
            spec(&[("T", "vault:x")], &[("T", "api.test")], &[]),
            "secret T source \"vault:x\" is none of env:VAR, file:PATH or cmd:COMMAND",
        ),
        (
            spec(&[("T", "file:/nonexistent/tbx")], &[("T", "api.test")], &[]),
            "secret T source \"file:/nonexistent/tbx\" gives no value: /nonexistent/tbx:",
        ),
        (spec(&[("T", &empty_src)], &[("T", "api.test")], &[]), "gives no value: it is empty"),
        (
            spec(&[("T", "env:TINYBOX_SURELY_UNSET_VARIABLE")], &[("T", "api.test")], &[]),
            "variable TINYBOX_SURELY_UNSET_VARIABLE",
        ),
        (
            spec(&[("T", &src)], &[("U", "api.test")], &[]),
            "secret binding \"U=api.test\" names secret U, which no --secret defines",
        ),
        (spec(&[("T", &src)], &[("T", "nope.test")], &[]), "host \"nope.test\", which is not on the allowlist"),
        (spec(&[("T", &src)], &[("T", "wild.test")], &[]), "host \"wild.test\", which is not on the allowlist"),
        (spec(&[("T", &src)], &[("T", "10.0.0.1")], &[]), "no address, port or wildcard"),
        (spec(&[("T", &src)], &[], &[("api.test", "Authorization: Bearer x")]), "it names no secret"),
        (spec(&[("T", &src)], &[], &[("api.test", "Authorization: {U}")]), "{U} names no secret"),
        (spec(&[("T", &src)], &[], &[("api.test", "no colon {T}")]), "write it as 'Header-Name: text {NAME}'"),
        (spec(&[("T", &src), ("U", &src)], &[("T", "api.test")], &[]), "secret U is bound to no host"),
    ];
    for (s, want) in cases {
        let err = s.checked(Some(&policy())).unwrap_err().to_string();
        assert!(err.contains(want), "{err:?} should contain {want:?}");
        assert!(!err.contains('\n'), "{err}");
    }
    let s = spec(&[("T", &src)], &[("T", "api.test")], &[]);
    assert_eq!(s.checked(None).unwrap_err(), SecretError::NoAllowlist);
    assert!(s.checked(Some(&policy())).is_ok());
    assert_eq!(SecretsSpec::default().checked(None).unwrap(), SecretsSpec::default());
}

#[test]
fn templates_fill_their_holes_and_leave_unknown_ones() {
    assert_eq!(template_names("Bearer {A} and {B}"), ["A", "B"]);
    let filled = fill_template("Bearer {A}/{Z}", |n| (n == "A").then(|| "v".to_owned()));
    assert_eq!(filled, "Bearer v/{Z}");
    assert_eq!(split_header("X-Key:  {A}"), Some(("X-Key", "{A}")));
    assert_eq!(split_header("bad name: {A}"), None);
}

#[test]
fn rules_give_each_secret_a_placeholder_and_say_which_hosts_are_intercepted() {
    let s = spec(&[("T", "env:X")], &[("T", "api.test")], &[("other.test", "X-Key: {T}")]);
    let mut n = 0;
    let rules = InjectRules::new("box-1", &s, || {
        n += 1;
        format!("{n:032x}")
    });
    assert_eq!(rules.env(), [("T".to_owned(), format!("tinybox-placeholder-{:032x}", 1))]);
    assert!(rules.intercepts("api.test") && rules.intercepts("other.test"));
    assert!(!rules.intercepts("third.test"));
}

#[test]
fn a_command_source_is_its_output_without_the_newline_and_each_failure_says_why() {
    let s = spec(&[("TOKEN", "cmd:printf 'from-%s\\n' command")], &[("TOKEN", "api.test")], &[]);
    assert_eq!(s.checked(Some(&policy())).unwrap().values().unwrap()["TOKEN"], "from-command");
    assert_eq!(s.sources["TOKEN"], "cmd:printf 'from-%s\\n' command", "the spec keeps the command, not its output");
    let cases = [
        ("cmd:echo nope >&2; exit 3", "the command failed (exit status: 3): nope"),
        ("cmd:true", "it is empty"),
        ("cmd:printf 'a\\nb'", "it holds a line break or NUL"),
        ("cmd:head -c 70000 /dev/zero | tr '\\0' x", "it is over 65536 bytes"),
        ("cmd:   ", "is none of env:VAR, file:PATH or cmd:COMMAND"),
    ];
    for (source, want) in cases {
        let err = spec(&[("T", source)], &[("T", "api.test")], &[]).checked(Some(&policy())).unwrap_err().to_string();
        assert!(err.contains(want), "{source}: {err:?} should contain {want:?}");
        assert!(!err.contains('\n'), "{err}");
    }
    // A command printing without end is cut off, not waited for.
    let err = spec(&[("T", "cmd:yes")], &[("T", "api.test")], &[]).checked(Some(&policy())).unwrap_err().to_string();
    assert!(err.contains("it is over 65536 bytes"), "{err}");
}

#[test]
fn a_command_source_that_outlives_its_time_is_killed_with_what_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    // A grandchild that would hold the pipe open: killed with the group.
    let command = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
    let err = run_source(&command, std::time::Duration::from_millis(300)).unwrap_err();
    assert!(err.contains("did not finish within 300ms and was killed"), "{err}");
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    // SIGKILL is sent when the call returns; the child is gone (or a
    // zombie) once the kernel has run its exit, which this waits for.
    let alive = || {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        state.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()).is_some_and(|s| s != "Z" && s != "X")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert!(!alive(), "the command's child (pid {pid}) runs on");
}
