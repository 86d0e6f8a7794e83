//! Protocol versioning: the protocol's version is this crate's version, and
//! two peers are compatible when their versions are semver-caret compatible.

use semver::{Version, VersionReq};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn protocol_version() -> Version {
    Version::parse(PROTOCOL_VERSION).expect("the crate version is valid semver")
}

/// Whether a peer speaking `theirs` can talk to one speaking `ours`.
pub fn compatible(ours: &Version, theirs: &Version) -> bool {
    let req = VersionReq::parse(&format!("^{ours}")).expect("a version is a valid caret requirement");
    let back = VersionReq::parse(&format!("^{theirs}")).expect("a version is a valid caret requirement");
    req.matches(theirs) || back.matches(ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn caret_rules() {
        assert!(compatible(&v("0.1.0"), &v("0.1.7")));
        assert!(compatible(&v("0.1.7"), &v("0.1.0")));
        assert!(!compatible(&v("0.1.0"), &v("0.2.0")));
        assert!(compatible(&v("1.2.0"), &v("1.9.3")));
        assert!(!compatible(&v("1.0.0"), &v("2.0.0")));
        assert!(!compatible(&v("0.1.0"), &v("1.0.0")));
    }
}
