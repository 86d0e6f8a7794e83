//! The request rules for an allowlist: entries parse (through the proxy's
//! own parser, so what is accepted here is what the proxy enforces), and
//! an allowlist and its entries come together. With plain egress, the
//! entries are the exceptions to the egress fence instead: addresses and
//! networks only, parsed by the sdk's fence parser the drivers use.

use tinybox_egress::Policy;
use tinybox_sdk::fence::Exception;
use tinybox_sdk::model::NetworkPolicy;

use super::AllowlistError;
use crate::model::NetworkChoice;

/// The exceptions to the egress fence `allow_hosts` names, canonical.
pub fn exceptions(allow_hosts: &[String]) -> Result<Vec<Exception>, AllowlistError> {
    allow_hosts
        .iter()
        .map(|value| {
            value.parse::<Exception>().map_err(|rule| {
                let rule = rule.strip_prefix(&format!("{value:?} ")).unwrap_or(&rule).to_owned();
                AllowlistError::NotAnException { value: value.clone(), rule }
            })
        })
        .collect()
}

/// The network policy and canonical entries a request's `network` and
/// `allow_hosts` make: entries alone mean an allowlist; an allowlist
/// needs entries; deny or egress take none.
pub fn requested(
    network: Option<NetworkChoice>,
    allow_hosts: &[String],
) -> Result<(Option<NetworkPolicy>, Vec<String>), AllowlistError> {
    let network = match (network, allow_hosts.is_empty()) {
        (None, true) => return Ok((None, Vec::new())),
        (Some(NetworkChoice::Deny), false) => return Err(AllowlistError::OtherNetwork("deny")),
        (Some(NetworkChoice::Egress), false) => {
            let canonical = exceptions(allow_hosts)?.into_iter().map(String::from).collect();
            return Ok((Some(NetworkPolicy::Egress), canonical));
        }
        (Some(NetworkChoice::Allowlist), true) => return Err(AllowlistError::Empty),
        (Some(other), true) => return Ok((Some(other.into()), Vec::new())),
        (None | Some(NetworkChoice::Allowlist), false) => NetworkPolicy::Allowlist,
    };
    let policy = Policy::parse(allow_hosts)?;
    Ok((Some(network), policy.into()))
}

/// The same rule on a spec, however it was made: entries exactly with an
/// allowlist, and every entry one the proxy takes.
pub fn check_spec(network: Option<NetworkPolicy>, allow_hosts: &[String]) -> Result<(), AllowlistError> {
    match (network, allow_hosts.is_empty()) {
        (Some(NetworkPolicy::Allowlist), true) => Err(AllowlistError::Empty),
        (Some(NetworkPolicy::Allowlist), false) => Policy::parse(allow_hosts).map(drop).map_err(Into::into),
        (_, true) => Ok(()),
        (Some(NetworkPolicy::Denied), false) => Err(AllowlistError::OtherNetwork("deny")),
        (Some(NetworkPolicy::Egress), false) => exceptions(allow_hosts).map(drop),
        (None, false) => Err(AllowlistError::OtherNetwork("default")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(h: &[&str]) -> Vec<String> {
        h.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn entries_alone_make_an_allowlist_in_canonical_spelling() {
        let (network, entries) =
            requested(None, &hosts(&["Allowed.Test.:8080", "*.example.com", "10.0.0.0/8"])).unwrap();
        assert_eq!(network, Some(NetworkPolicy::Allowlist));
        assert_eq!(entries, hosts(&["allowed.test:8080", "*.example.com", "10.0.0.0/8"]));
        let (network, _) = requested(Some(NetworkChoice::Allowlist), &hosts(&["a.test"])).unwrap();
        assert_eq!(network, Some(NetworkPolicy::Allowlist));
        assert_eq!(requested(None, &[]).unwrap(), (None, Vec::new()));
        assert_eq!(requested(Some(NetworkChoice::Egress), &[]).unwrap(), (Some(NetworkPolicy::Egress), Vec::new()));
    }

    #[test]
    fn a_bad_entry_is_one_line_naming_it_and_the_rule() {
        let err = requested(None, &hosts(&["good.test", "*.com", "bad entry"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"allow entry "*.com": a wildcard must be below a name of two labels or more (*.example.com, not *.com)"#
        );
        let err = requested(None, &hosts(&["a.test:0"])).unwrap_err().to_string();
        assert_eq!(err, r#"allow entry "a.test:0": the port must be a number from 1 to 65535"#);
        assert!(!err.contains('\n'));
    }

    #[test]
    fn an_allowlist_and_its_entries_come_together() {
        assert_eq!(requested(Some(NetworkChoice::Allowlist), &[]).unwrap_err(), AllowlistError::Empty);
        let err = requested(Some(NetworkChoice::Egress), &hosts(&["a.test"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"allow entry "a.test" with network egress: is not an address or network with an optional port (1.2.3.4, 10.0.0.0/8, 10.1.2.3:80, [fd00::1]:443); with egress, list only addresses or networks to let through its fence (a name needs an allowlist: leave out --network egress)"#
        );
        assert!(matches!(
            check_spec(Some(NetworkPolicy::Egress), &hosts(&["a.test"])),
            Err(AllowlistError::NotAnException { .. })
        ));
        assert_eq!(
            requested(Some(NetworkChoice::Deny), &hosts(&["a.test"])).unwrap_err(),
            AllowlistError::OtherNetwork("deny")
        );
        assert_eq!(check_spec(Some(NetworkPolicy::Allowlist), &[]), Err(AllowlistError::Empty));
        assert_eq!(check_spec(None, &hosts(&["a.test"])), Err(AllowlistError::OtherNetwork("default")));
        assert!(matches!(check_spec(Some(NetworkPolicy::Allowlist), &hosts(&["*"])), Err(AllowlistError::Entry(_))));
        assert_eq!(check_spec(Some(NetworkPolicy::Allowlist), &hosts(&["a.test"])), Ok(()));
        assert_eq!(check_spec(Some(NetworkPolicy::Egress), &[]), Ok(()));
    }

    #[test]
    fn with_plain_egress_the_entries_are_the_fences_exceptions_in_canonical_spelling() {
        let (network, entries) =
            requested(Some(NetworkChoice::Egress), &hosts(&["10.254.16.2:8080", "fd00::1", "10.0.0.0/8"])).unwrap();
        assert_eq!(network, Some(NetworkPolicy::Egress));
        assert_eq!(entries, hosts(&["10.254.16.2:8080", "[fd00::1]", "10.0.0.0/8"]));
        assert_eq!(check_spec(Some(NetworkPolicy::Egress), &entries), Ok(()));
        assert_eq!(exceptions(&entries).unwrap().len(), 3);
        let err = requested(Some(NetworkChoice::Egress), &hosts(&["10.1.2.3/8"])).unwrap_err().to_string();
        assert!(err.contains("has host bits set; write the network, 10.0.0.0/8"), "{err}");
    }
}
