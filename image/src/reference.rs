//! Image references, normalized the way docker reads them (`busybox` is
//! `docker.io/library/busybox:latest`), so one image has one name here.

use oci_client::Reference;

use crate::error::{ImageError, Result};

/// `reference` parsed by docker's grammar and normalization, by hand:
/// the grammar's regex (oci-spec's) takes longer to compile than a cached
/// pull takes to run.
pub fn parse(reference: &str) -> Result<Reference> {
    let bad = |detail: &str| ImageError::BadReference { reference: reference.to_owned(), detail: detail.to_owned() };
    let (rest, digest) = match reference.split_once('@') {
        Some((rest, digest)) => (
            rest,
            Some(
                crate::digest::Digest::parse(digest)
                    .map_err(|_| bad("the digest is not sha256: and 64 lowercase hex digits"))?,
            ),
        ),
        None => (reference, None),
    };
    let last = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
    let (name, tag) = match rest[last..].rfind(':') {
        Some(i) => (&rest[..last + i], Some(&rest[last + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        let mut chars = tag.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !first_ok || tag.len() > 128 || !chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
            return Err(bad("a tag is up to 128 letters, digits, _ . and -, not starting with . or -"));
        }
    }
    let (registry, repository) = match name.split_once('/') {
        Some((left, right)) if left.contains('.') || left.contains(':') || left == "localhost" => {
            (left.to_owned(), right.to_owned())
        }
        _ => ("docker.io".to_owned(), name.to_owned()),
    };
    let registry = if registry == "index.docker.io" { "docker.io".to_owned() } else { registry };
    if registry.is_empty() || !registry.chars().all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c)) {
        return Err(bad("the registry is a host name or address with an optional :port"));
    }
    let repository =
        if registry == "docker.io" && !repository.contains('/') { format!("library/{repository}") } else { repository };
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch))
            && c.starts_with(|ch: char| ch.is_ascii_alphanumeric())
            && c.ends_with(|ch: char| ch.is_ascii_alphanumeric())
    };
    if !repository.split('/').all(component_ok) || repository.len() > 255 {
        return Err(bad("a repository is lowercase letters, digits and . _ - between slashes"));
    }
    Ok(match (tag, digest) {
        (Some(tag), Some(d)) => Reference::with_tag_and_digest(registry, repository, tag.to_owned(), d.to_string()),
        (None, Some(d)) => Reference::with_digest(registry, repository, d.to_string()),
        (tag, None) => Reference::with_tag(registry, repository, tag.unwrap_or("latest").to_owned()),
    })
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
    fn the_hand_parser_agrees_with_the_grammar() {
        let digest = format!("sha256:{}", "a".repeat(64));
        for r in [
            "busybox".to_owned(),
            "busybox:1.36".to_owned(),
            "library/busybox".to_owned(),
            "user/app:v1.2-rc_3".to_owned(),
            "index.docker.io/x/y".to_owned(),
            "127.0.0.1:5000/a/b/c:1".to_owned(),
            "localhost/app".to_owned(),
            "reg.example:443/team/app".to_owned(),
            format!("app@{digest}"),
            format!("127.0.0.1:5000/app:1@{digest}"),
        ] {
            let ours = parse(&r).unwrap();
            let theirs = Reference::try_from(r.as_str()).unwrap();
            assert_eq!(ours.whole(), theirs.whole(), "{r}");
        }
        for bad in ["no spaces", "Upper/Case", "a//b", "app:", "app:-x", "-app", "app@sha256:12", "/app"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
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
