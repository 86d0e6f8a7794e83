//! `tinybox drivers verify`'s arguments, parsed as the CLI parses them: the
//! same create options as `tinybox create`, refused the same way.

use std::collections::BTreeMap;

use clap::Parser;
use tinybox_core::request;

use crate::commands::drivers::DriversAction;
use crate::{Cli, Command};

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("tinybox").chain(args.iter().copied()))
}

fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// The create options `tinybox drivers verify ARGS` gives the kit's boxes.
fn verify_options(args: &[&str]) -> Result<BTreeMap<String, String>, String> {
    let mut all = vec!["drivers", "verify", "microvm"];
    all.extend_from_slice(args);
    let cli = parse(&all).map_err(|e| e.to_string())?;
    let Command::Drivers(d) = cli.command else { panic!("parsed as another verb") };
    let Some(DriversAction::Verify(v)) = d.action else { panic!("not verify") };
    request::merge_options(v.options.iter().cloned(), v.accel.as_deref()).map_err(|e| e.to_string())
}

#[test]
fn verify_takes_the_same_options_as_create() {
    assert!(verify_options(&[]).unwrap().is_empty(), "no option unless asked");
    assert_eq!(verify_options(&["--accel", "tcg"]).unwrap(), options(&[("accel", "tcg")]));
    assert_eq!(
        verify_options(&["--option", "cpu=max", "--option", "note=", "--accel", "kvm"]).unwrap(),
        options(&[("accel", "kvm"), ("cpu", "max"), ("note", "")])
    );
    let err = verify_options(&["--accel", "kvm", "--option", "accel=tcg"]).unwrap_err();
    assert_eq!(err, r#"option accel is given twice, as "tcg" and "kvm"; give it once (accel sets it too)"#);
    let err = parse(&["drivers", "verify", "microvm", "--accel", "hvf"]).unwrap_err();
    assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
    for bad in ["accel", "=tcg", ""] {
        let err = parse(&["drivers", "verify", "microvm", "--option", bad]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{bad:?}");
        assert!(err.to_string().contains("is not an option KEY=VALUE with a non-empty KEY"), "{err}");
    }
}
