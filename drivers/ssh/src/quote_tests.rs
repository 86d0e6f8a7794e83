//! The quoting suite: exact strings for every rule, every refusal, the probe
//! verdicts, and property tests that round-trip arbitrary bytes through every
//! POSIX shell installed here, byte-exact.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;

use proptest::prelude::*;

use super::*;

fn line(argv: &[&str]) -> String {
    String::from_utf8(command_line(argv, None, false).unwrap().text).unwrap()
}

fn env_of(pairs: &[(&str, &str)]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    pairs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect()
}

#[test]
fn plain_words_are_sent_as_they_are() {
    assert_eq!(
        line(&["cat", ".tinybox/workspaces/default-box-0/.tinybox-fingerprint"]),
        "exec cat .tinybox/workspaces/default-box-0/.tinybox-fingerprint"
    );
    assert_eq!(line(&["true"]), "exec true");
    assert_eq!(line(&["ls", "-la", "/tmp"]), "exec ls -la /tmp");
    let cmd = command_line(&["true"], None, false).unwrap();
    assert!(cmd.plain);
}

#[test]
fn anything_else_is_single_quoted_word_by_word() {
    assert_eq!(line(&["echo", "a b"]), "exec 'echo' 'a b'");
    assert_eq!(line(&["echo", ""]), "exec 'echo' ''");
    assert_eq!(line(&["echo", "it's"]), r"exec 'echo' 'it'\''s'");
    assert_eq!(line(&["echo", "'"]), r"exec 'echo' ''\'''");
    assert_eq!(line(&["echo", "''"]), r"exec 'echo' ''\'''\'''");
    assert_eq!(line(&["echo", "$HOME"]), "exec 'echo' '$HOME'");
    assert_eq!(line(&["echo", "`id`"]), "exec 'echo' '`id`'");
    assert_eq!(line(&["echo", "$(id)"]), "exec 'echo' '$(id)'");
    assert_eq!(line(&["echo", "a\\b"]), "exec 'echo' 'a\\b'");
    assert_eq!(line(&["echo", "a\nb"]), "exec 'echo' 'a\nb'");
    assert_eq!(line(&["echo", "; rm -rf ~"]), "exec 'echo' '; rm -rf ~'");
    assert_eq!(
        line(&["echo", "*", "?", "[a]", "{a,b}", "~", "!x", "#c"]),
        "exec 'echo' '*' '?' '[a]' '{a,b}' '~' '!x' '#c'"
    );
    assert_eq!(line(&["echo", "a|b&c>d<e"]), "exec 'echo' 'a|b&c>d<e'");
    assert_eq!(line(&["echo", "\"q\""]), "exec 'echo' '\"q\"'");
    assert_eq!(line(&["echo", "x=1"]), "exec 'echo' 'x=1'");
    assert_eq!(line(&["sh", "-c", "echo $0", "--"]), "exec 'sh' '-c' 'echo $0' '--'");
    // One unplain word quotes them all, so the whole line has one rule.
    assert_eq!(line(&["ls", "a b"]), "exec 'ls' 'a b'");
}

#[test]
fn words_outside_the_plain_set_are_not_plain() {
    for w in ["", "a b", "~", "a=b", "a,b", "a:b", "a+b", "a@b", "%x", "é", "a\tb", "*"] {
        assert!(!is_plain_word(w.as_bytes()), "{w:?}");
    }
    for w in ["a", "A-Z_0.9", "/usr/bin/env", "-la", "..", "."] {
        assert!(is_plain_word(w.as_bytes()), "{w:?}");
    }
    // A program starting with '-' is never plain: it would read as an option to exec.
    let cmd = command_line(&["-x"], None, false);
    assert!(matches!(cmd, Err(QuoteError::AmbiguousProgram { .. })), "{cmd:?}");
}

#[test]
fn cwd_is_cd_and_then_never_semicolon() {
    let abs = command_line(&["make"], Some(b"/src/my dir".as_slice()), false).unwrap();
    assert_eq!(String::from_utf8(abs.text).unwrap(), "cd '/src/my dir' && exec 'make'");
    assert!(!abs.plain);
    let rel = command_line(&["make"], Some(b"-weird".as_slice()), false).unwrap();
    assert_eq!(String::from_utf8(rel.text).unwrap(), "cd './-weird' && exec 'make'");
    let plain_dir = command_line(&["make"], Some(b"src".as_slice()), false).unwrap();
    assert_eq!(String::from_utf8(plain_dir.text).unwrap(), "cd './src' && exec 'make'");
    assert_eq!(command_line(&["make"], Some(b"".as_slice()), false), Err(QuoteError::EmptyCwd));
    assert_eq!(command_line(&["make"], Some(b"a\0b".as_slice()), false), Err(QuoteError::NulInCwd));
}

#[test]
fn the_environment_goes_in_a_file_and_the_command_line_names_only_the_file() {
    let env = env_of(&[("PATH", "/bin"), ("Q", "it's $(x)\nnext"), ("TOKEN", "hunter2")]);
    let script = env_script(&env).unwrap();
    assert_eq!(
        String::from_utf8(script).unwrap(),
        "export PATH='/bin'\nexport Q='it'\\''s $(x)\nnext'\nexport TOKEN='hunter2'\n"
    );
    let file = b"/tmp/tinybox-env.Ab12Cd34";
    let cmd = sourced_command_line(&["prog", "arg"], Some(b"w d".as_slice()), file, false).unwrap();
    let text = String::from_utf8(cmd.text).unwrap();
    assert!(text.starts_with("exec /bin/sh -c '"), "{text}");
    assert!(text.ends_with(" sh '/tmp/tinybox-env.Ab12Cd34' './w d' 'prog' 'arg'"), "{text}");
    for value in ["hunter2", "it's", "next"] {
        assert!(!text.contains(value), "{value} in {text}");
    }
    let cleared = String::from_utf8(sourced_command_line(&["prog"], None, file, true).unwrap().text).unwrap();
    assert!(cleared.starts_with("exec env -i /bin/sh -c '"), "{cleared}");
    assert!(cleared.ends_with(" sh '/tmp/tinybox-env.Ab12Cd34' '.' 'prog'"), "{cleared}");
    let cleared_empty = command_line(&["prog"], None, true).unwrap();
    assert_eq!(String::from_utf8(cleared_empty.text).unwrap(), "exec env -i -- 'prog'");
}

#[test]
fn an_upload_then_its_command_runs_with_exactly_the_environment_and_leaves_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    let env = env_of(&[("A_1", "x 'y' $(z) `w` \\ \n\t end"), ("EMPTY", ""), ("PATH", "/usr/bin:/bin")]);
    let input = tmp.path().join("upload-input");
    std::fs::write(&input, env_script(&env).unwrap()).unwrap();
    for shell in posix_shells() {
        // What the remote side makes of the upload: a 0600 file of the bytes.
        let out = Command::new(shell)
            .arg("-c")
            .arg(UPLOAD_ENV)
            .env("TMPDIR", tmp.path())
            .stdin(std::fs::File::open(&input).unwrap())
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let file = String::from_utf8(out.stdout).unwrap().trim_end().to_owned();
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600, "{shell}");
        assert_eq!(std::fs::read(&file).unwrap(), std::fs::read(&input).unwrap(), "{shell}");
        for clear in [true, false] {
            let this = format!("{file}.{clear}");
            std::fs::copy(&file, &this).unwrap();
            let cmd = sourced_command_line(&[b"/usr/bin/env".as_slice(), b"-0"], None, this.as_bytes(), clear).unwrap();
            let out = run_in(shell, &cmd.text);
            assert!(out.status.success(), "{shell}: {out:?}");
            let mut seen: Vec<&[u8]> = out.stdout.split(|b| *b == 0).filter(|e| !e.is_empty()).collect();
            seen.sort();
            let expected: Vec<Vec<u8>> = env.iter().map(|(k, v)| [k.as_slice(), b"=", v.as_slice()].concat()).collect();
            for e in &expected {
                assert!(seen.contains(&e.as_slice()), "{shell}: {:?} missing", String::from_utf8_lossy(e));
            }
            if clear {
                assert_eq!(seen.len(), expected.len(), "{shell}: exactly these: {seen:?}");
            }
            assert!(!std::path::Path::new(&this).exists(), "{shell}: the file is gone once the program runs");
        }
        std::fs::remove_file(&file).unwrap();
    }
}

#[test]
fn a_name_the_remote_shell_cannot_set_is_refused() {
    for name in ["A-B", "1X", "a.b", "é"] {
        let env = env_of(&[(name, "v")]);
        assert!(matches!(env_script(&env), Err(QuoteError::EnvNameNotShell { .. })), "{name}");
    }
    assert!(env_script(&env_of(&[("_ok9", "v")])).is_ok());
    assert!(matches!(sourced_command_line(&["a"], None, b"tmp/relative", false), Err(QuoteError::BadEnvFile { .. })));
    assert!(matches!(sourced_command_line(&["a"], None, b"/tmp/a b", false), Err(QuoteError::BadEnvFile { .. })));
}

#[test]
fn what_cannot_be_carried_is_refused() {
    assert_eq!(command_line::<&str>(&[], None, false), Err(QuoteError::EmptyArgv));
    assert_eq!(command_line(&["a", "b\0c"], None, false), Err(QuoteError::NulInArg { index: 1 }));
    assert_eq!(command_line(&["a\0"], None, false), Err(QuoteError::NulInArg { index: 0 }));
    for (k, v) in [("", "v"), ("A=B", "v"), ("A\0", "v"), ("A", "v\0")] {
        let env: BTreeMap<Vec<u8>, Vec<u8>> = [(k.as_bytes().to_vec(), v.as_bytes().to_vec())].into();
        assert!(matches!(env_script(&env), Err(QuoteError::BadEnv { .. })), "{k:?}={v:?}");
    }
    assert!(matches!(command_line(&["-a"], None, true), Err(QuoteError::AmbiguousProgram { .. })));
    assert!(matches!(sourced_command_line(&["-a"], None, b"/f", false), Err(QuoteError::AmbiguousProgram { .. })));
    // A program with '=' is an ordinary quoted word (quoted, it is no assignment).
    assert_eq!(line(&["a=b"]), "exec 'a=b'");
}

#[test]
fn non_utf8_bytes_are_quoted_like_any_other() {
    let cmd = command_line(&[b"echo".as_slice(), b"\xff\xfe'".as_slice()], None, false).unwrap();
    assert_eq!(cmd.text, b"exec 'echo' '\xff\xfe'\\'''".to_vec());
}

#[test]
fn the_string_form_matches_the_byte_form() {
    let (text, plain) = command_line_str(&["a".into(), "b c".into()], Some("/d"), false).unwrap();
    assert_eq!(text, "cd '/d' && exec 'a' 'b c'");
    assert!(!plain);
    let env: BTreeMap<String, String> = [("K".to_owned(), "v v".to_owned())].into();
    assert_eq!(env_script_str(&env).unwrap(), b"export K='v v'\n");
    let sourced = sourced_command_line_str(&["a".into()], None, "/f", false).unwrap();
    assert_eq!(sourced.as_bytes(), sourced_command_line(&["a"], None, b"/f", false).unwrap().text);
}

#[test]
fn probe_verdicts() {
    let posix = b"/bin/bash\ntinybox\\\\probe\nsingle'quote\n";
    assert_eq!(classify_probe(posix), ShellVerdict::Posix("/bin/bash".into()));
    assert_eq!(
        classify_probe(b"/usr/bin/dash\ntinybox\\\\probe\nsingle'quote\n"),
        ShellVerdict::Posix("/usr/bin/dash".into())
    );
    let fish = classify_probe(b"/usr/bin/fish\ntinybox\\probe\nsingle'quote\n");
    assert!(
        matches!(&fish, ShellVerdict::Refused(m) if m.contains("/usr/bin/fish") && m.contains("does not parse POSIX quoting")),
        "{fish:?}"
    );
    let tcsh = classify_probe(b"/bin/tcsh\ntinybox\\\\probe\nsingle'quote\n");
    assert!(matches!(&tcsh, ShellVerdict::Refused(m) if m.contains("/bin/tcsh")), "{tcsh:?}");
    let unknown = classify_probe(b"/opt/bin/mysh\ntinybox\\\\probe\nsingle'quote\n");
    assert!(matches!(&unknown, ShellVerdict::Refused(m) if m.contains("does not know")), "{unknown:?}");
    let liar = classify_probe(b"/bin/sh\ntinybox\\probe\nsingle'quote\n");
    assert!(matches!(&liar, ShellVerdict::Refused(m) if m.contains("did not read single quotes")), "{liar:?}");
    assert!(matches!(classify_probe(b""), ShellVerdict::Refused(m) if m.contains("$SHELL is empty")));
    assert!(matches!(classify_probe(b"\n"), ShellVerdict::Refused(_)));
}

/// POSIX shells installed here (dash is /bin/sh on Debian).
fn posix_shells() -> Vec<&'static str> {
    ["/bin/sh", "/bin/dash", "/bin/bash", "/bin/zsh", "/bin/ksh93", "/bin/mksh"]
        .into_iter()
        .filter(|s| std::path::Path::new(s).exists())
        .collect()
}

/// Runs `text` the way sshd does: `SHELL -c TEXT`.
fn run_in(shell: &str, text: &[u8]) -> std::process::Output {
    Command::new(shell).arg("-c").arg(std::ffi::OsStr::from_bytes(text)).env("CDPATH", "/").output().expect("run shell")
}

#[test]
fn the_probe_tells_posix_shells_from_the_rest_for_real() {
    for shell in posix_shells() {
        let out = Command::new(shell).arg("-c").arg(PROBE).env("SHELL", shell).output().unwrap();
        assert_eq!(classify_probe(&out.stdout), ShellVerdict::Posix(shell.into()), "{shell}");
    }
    let mut refused = 0;
    for shell in ["/usr/bin/fish", "/bin/tcsh", "/bin/csh"] {
        if !std::path::Path::new(shell).exists() {
            eprintln!("skipped: probe under {shell}: not installed (apt-get install fish tcsh)");
            continue;
        }
        let out = Command::new(shell).arg("-c").arg(PROBE).env("SHELL", shell).output().unwrap();
        assert!(matches!(classify_probe(&out.stdout), ShellVerdict::Refused(_)), "{shell}: {out:?}");
        // And the probe did only print: its words came back (in that shell's reading).
        assert!(String::from_utf8_lossy(&out.stdout).contains("probe"), "{shell}: {out:?}");
        refused += 1;
    }
    eprintln!("non-POSIX shells checked: {refused}");
}

#[test]
fn plain_commands_mean_the_same_in_every_shell_we_know() {
    let argv = ["printf", "%s", "a-b_c./d"];
    // `%` is not plain, so check the plain form on a command of plain words only.
    let cmd = command_line(&["echo", "a-b_c./d", "-n"], None, false).unwrap();
    assert!(cmd.plain);
    let mut shells = posix_shells();
    shells.extend(["/usr/bin/fish", "/bin/tcsh"].into_iter().filter(|s| std::path::Path::new(s).exists()));
    for shell in shells {
        let out = run_in(shell, &cmd.text);
        assert_eq!(out.stdout, b"a-b_c./d -n\n", "{shell}: {out:?}");
    }
    assert!(!command_line(&argv, None, false).unwrap().plain);
}

/// Arguments built to hurt: every metacharacter, quotes, backslashes,
/// newlines, leading dashes, empty strings, and arbitrary non-NUL bytes.
fn nasty_arg() -> impl Strategy<Value = Vec<u8>> {
    let meta: Vec<u8> = b" \t\n'\"\\$`!*?[]{}()<>|&;#~=%^,:@+-./\r\x01\x7f\xff\xc3\xa9".to_vec();
    let byte = prop_oneof![
        4 => proptest::sample::select(meta),
        2 => proptest::char::range('a', 'z').prop_map(|c| c as u8),
        1 => 1u8..=255u8,
    ];
    prop_oneof![
        1 => Just(Vec::new()),
        1 => Just(b"-".to_vec()),
        1 => Just(b"--".to_vec()),
        1 => Just(b"'".to_vec()),
        8 => proptest::collection::vec(byte, 0..24),
    ]
}

fn printf_argv(args: &[Vec<u8>]) -> Vec<Vec<u8>> {
    // A first word of our own: printf runs its format once even with no arguments.
    let mut argv = vec![b"/usr/bin/printf".to_vec(), b"%s\\0".to_vec(), b"start".to_vec()];
    argv.extend(args.iter().cloned());
    argv
}

fn nul_joined(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"start\0".to_vec();
    out.extend(args.iter().flat_map(|a| a.iter().copied().chain([0])));
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn argv_round_trips_byte_exact_through_every_posix_shell(args in proptest::collection::vec(nasty_arg(), 0..6)) {
        let cmd = command_line(&printf_argv(&args), None, false).unwrap();
        for shell in posix_shells() {
            let out = run_in(shell, &cmd.text);
            prop_assert!(out.status.success(), "{shell}: {:?}", out);
            prop_assert_eq!(&out.stdout, &nul_joined(&args), "{} parsed {:?}", shell, String::from_utf8_lossy(&cmd.text));
        }
    }

    #[test]
    fn env_and_cwd_round_trip_through_every_posix_shell(
        values in proptest::collection::vec(nasty_arg(), 1..4),
        dir in proptest::collection::vec(proptest::sample::select(b"ab -'\"$`\\!*;&|<>\n x".to_vec()), 1..12),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(std::ffi::OsStr::from_bytes(&dir));
        std::fs::create_dir_all(&dir).unwrap();
        let env: BTreeMap<Vec<u8>, Vec<u8>> =
            values.iter().enumerate().map(|(i, v)| (format!("V{i}_x").into_bytes(), v.clone())).collect();
        let script = env_script(&env).unwrap();
        let argv: Vec<&[u8]> = vec![b"/usr/bin/env", b"-0"];
        let expected: Vec<u8> = env.iter().flat_map(|(k, v)| [k.as_slice(), b"=", v.as_slice(), b"\0"].concat()).collect();
        let pwd = command_line(&[b"/bin/pwd".as_slice(), b"-P"], Some(dir.as_os_str().as_bytes()), false).unwrap();
        let real = std::fs::canonicalize(&dir).unwrap();
        for shell in posix_shells() {
            let file = tmp.path().join("env-file");
            std::fs::write(&file, &script).unwrap();
            let cmd = sourced_command_line(&argv, Some(dir.as_os_str().as_bytes()), file.as_os_str().as_bytes(), true).unwrap();
            let out = run_in(shell, &cmd.text);
            prop_assert!(out.status.success(), "{shell}: {:?}", out);
            prop_assert_eq!(&out.stdout, &expected, "{} env: exactly the file's", shell);
            prop_assert!(!file.exists(), "{} left the file", shell);
            let out = run_in(shell, &pwd.text);
            prop_assert_eq!(&out.stdout, &[real.as_os_str().as_bytes(), b"\n"].concat(), "{} cwd", shell);
        }
    }
}

#[test]
fn a_missing_directory_fails_the_command_instead_of_running_it_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let flag = tmp.path().join("ran");
    let argv = ["/usr/bin/touch".to_owned(), flag.to_string_lossy().into_owned()];
    let (text, _) = command_line_str(&argv, Some("/nonexistent/tinybox"), false).unwrap();
    for shell in posix_shells() {
        let out = run_in(shell, text.as_bytes());
        assert!(!out.status.success(), "{shell}");
        assert!(!flag.exists(), "{shell} ran the command although cd failed");
    }
}

#[test]
fn a_missing_directory_fails_a_sourced_command_and_still_removes_its_file() {
    let tmp = tempfile::tempdir().unwrap();
    let flag = tmp.path().join("ran");
    let argv = ["/usr/bin/touch".to_owned(), flag.to_string_lossy().into_owned()];
    for shell in posix_shells() {
        for clear in [false, true] {
            let file = tmp.path().join("env-file");
            std::fs::write(&file, b"export A='1'\n").unwrap();
            let text =
                sourced_command_line_str(&argv, Some("/nonexistent/tinybox"), file.to_str().unwrap(), clear).unwrap();
            let out = run_in(shell, text.as_bytes());
            assert!(!out.status.success(), "{shell}");
            assert!(!flag.exists(), "{shell} ran the command although cd failed");
            assert!(!file.exists(), "{shell} left the environment file");
        }
    }
}
