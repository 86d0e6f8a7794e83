//! Image references, normalized the way docker reads them (`busybox` is
//! `docker.io/library/busybox:latest`), so one image has one name here.

use oci_client::Reference;

use crate::error::{ImageError, Result};

pub fn parse(reference: &str) -> Result<Reference> {
    Reference::try_from(reference)
        .map_err(|e| ImageError::BadReference { reference: reference.to_owned(), detail: e.to_string() })
}

/// The full form of `reference`.
pub fn normalize(reference: &str) -> Result<String> {
    Ok(parse(reference)?.whole())
}

/// Whether a registry (`host[:port]`) is this machine's own loopback,
/// the only place plain http is spoken: `localhost`, 127.0.0.0/8, `::1`.
/// By name, never by resolving it, as docker decides.
pub fn is_loopback(registry: &str) -> bool {
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        registry.rsplit_once(':').map(|(h, _)| h).unwrap_or(registry)
    };
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(v4)) => v4.is_loopback(),
        Ok(std::net::IpAddr::V6(v6)) => v6.is_loopback(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_normalize_as_docker_reads_them() {
        assert_eq!(normalize("busybox").unwrap(), "docker.io/library/busybox:latest");
        assert_eq!(normalize("127.0.0.1:5000/x:1").unwrap(), "127.0.0.1:5000/x:1");
        assert!(normalize("no spaces allowed").is_err());
    }

    #[test]
    fn only_loopback_names_are_loopback() {
        for yes in ["localhost:5000", "127.0.0.1:5000", "127.9.9.9", "[::1]:5000", "LOCALHOST"] {
            assert!(is_loopback(yes), "{yes}");
        }
        for no in
            ["0.0.0.0:5000", "10.0.0.1:5000", "registry.example:5000", "localhost.example", "[::]:5000", "128.0.0.1"]
        {
            assert!(!is_loopback(no), "{no}");
        }
    }
}
