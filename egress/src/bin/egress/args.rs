//! The command line of `tinybox-egress`, parsed by hand: two modes, a few
//! flags, and everything after `--` is the relay's command, untouched.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use tinybox_egress::ResolverChoice;
use tinybox_egress::relay::Relay;

/// What the binary was asked to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Invocation {
    /// `serve --dir DIR [--resolver IP:PORT]`: one box's proxy.
    Serve { dir: PathBuf, resolver: ResolverChoice },
    /// `relay --listen ADDR --to SOCKET -- COMMAND...`: the box's end.
    Relay(Relay),
    /// `--version`.
    Version,
}

pub const USAGE: &str = "usage: tinybox-egress serve --dir DIR [--resolver IP:PORT] | tinybox-egress relay --listen IP:PORT --to SOCKET -- COMMAND [ARG...]";

/// Parses the arguments after the program name.
pub fn parse(args: Vec<OsString>) -> Result<Invocation, String> {
    let mut args = args.into_iter();
    let mode = args.next().ok_or_else(|| "no mode given".to_owned())?;
    match mode.to_str() {
        Some("--version") => Ok(Invocation::Version),
        Some("serve") => serve(args),
        Some("relay") => relay(args),
        _ => Err(format!("mode {mode:?} is not serve or relay")),
    }
}

fn text(flag: &str, value: Option<OsString>) -> Result<String, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    value.into_string().map_err(|v| format!("{flag} {v:?} is not UTF-8"))
}

fn address(flag: &str, value: Option<OsString>) -> Result<SocketAddr, String> {
    let value = text(flag, value)?;
    value.parse().map_err(|_| format!("{flag} {value:?} is not IP:PORT, like 127.0.0.1:53"))
}

fn serve(mut args: impl Iterator<Item = OsString>) -> Result<Invocation, String> {
    let (mut dir, mut resolver) = (None, ResolverChoice::System);
    while let Some(flag) = args.next() {
        match flag.to_str() {
            Some("--dir") => dir = Some(PathBuf::from(args.next().ok_or("--dir needs a value")?)),
            Some("--resolver") => resolver = ResolverChoice::Dns { server: address("--resolver", args.next())? },
            _ => return Err(format!("serve does not take {flag:?}")),
        }
    }
    let dir = dir.ok_or("serve needs --dir DIR")?;
    if !dir.is_absolute() {
        return Err(format!("--dir {} is not an absolute path", dir.display()));
    }
    Ok(Invocation::Serve { dir, resolver })
}

fn relay(mut args: impl Iterator<Item = OsString>) -> Result<Invocation, String> {
    let (mut listen, mut to) = (None, None);
    while let Some(flag) = args.next() {
        match flag.to_str() {
            Some("--listen") => listen = Some(address("--listen", args.next())?),
            Some("--to") => to = Some(PathBuf::from(args.next().ok_or("--to needs a value")?)),
            Some("--") => break,
            _ => return Err(format!("relay does not take {flag:?} (the command follows --)")),
        }
    }
    let command: Vec<OsString> = args.collect();
    if command.is_empty() {
        return Err("relay needs a command after --".into());
    }
    Ok(Invocation::Relay(Relay {
        listen: listen.ok_or("relay needs --listen IP:PORT")?,
        to: to.ok_or("relay needs --to SOCKET")?,
        command,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<OsString> {
        w.iter().map(OsString::from).collect()
    }

    #[test]
    fn serve_takes_a_directory_and_maybe_a_nameserver() {
        assert_eq!(
            parse(words(&["serve", "--dir", "/s/egress/default-box-1"])).unwrap(),
            Invocation::Serve { dir: "/s/egress/default-box-1".into(), resolver: ResolverChoice::System }
        );
        assert_eq!(
            parse(words(&["serve", "--resolver", "127.0.0.1:5353", "--dir", "/d"])).unwrap(),
            Invocation::Serve {
                dir: "/d".into(),
                resolver: ResolverChoice::Dns { server: "127.0.0.1:5353".parse().unwrap() }
            }
        );
    }

    #[test]
    fn the_relay_command_after_the_separator_is_kept_whole() {
        let got =
            parse(words(&["relay", "--listen", "127.0.0.1:3128", "--to", "/run/s", "--", "sh", "--", "-c"])).unwrap();
        assert_eq!(
            got,
            Invocation::Relay(Relay {
                listen: "127.0.0.1:3128".parse().unwrap(),
                to: "/run/s".into(),
                command: words(&["sh", "--", "-c"]),
            })
        );
    }

    #[test]
    fn bad_invocations_name_the_value_and_the_rule() {
        let cases: [(&[&str], &str); 8] = [
            (&[], "no mode given"),
            (&["proxy"], "mode \"proxy\" is not serve or relay"),
            (&["serve"], "serve needs --dir DIR"),
            (&["serve", "--dir", "rel"], "--dir rel is not an absolute path"),
            (
                &["serve", "--dir", "/d", "--resolver", "dns.test"],
                "--resolver \"dns.test\" is not IP:PORT, like 127.0.0.1:53",
            ),
            (&["relay", "--listen", "127.0.0.1:1", "--to", "/s"], "relay needs a command after --"),
            (&["relay", "--to", "/s", "--", "true"], "relay needs --listen IP:PORT"),
            (&["relay", "-x"], "relay does not take \"-x\" (the command follows --)"),
        ];
        for (args, error) in cases {
            assert_eq!(parse(words(args)).unwrap_err(), error, "{args:?}");
        }
    }
}
