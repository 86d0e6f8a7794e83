//! Validated names: box, snapshot, host and sandbox identifiers.
//!
//! The permitted set is the intersection of what a path component, a
//! container name and a shell word all accept unquoted, so every backend can
//! interpolate a name without escaping. A name is validated once, when it is
//! constructed — including when it is deserialized, so a hand-edited store
//! cannot introduce a name the constructor would have rejected.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest name accepted.
pub const MAX_NAME_LEN: usize = 64;

/// Why a name was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{kind} name is empty; names are 1 to 64 characters from [A-Za-z0-9._-]")]
    Empty { kind: &'static str },
    #[error("{kind} name {value:?} is {len} characters long; the limit is 64")]
    TooLong { kind: &'static str, value: String, len: usize },
    #[error("{kind} name {value:?} contains {ch:?}; names use only [A-Za-z0-9._-]")]
    BadChar { kind: &'static str, value: String, ch: char },
    #[error("{kind} name {value:?} is reserved; `.` and `..` are never names")]
    Reserved { kind: &'static str, value: String },
}

/// Checks `value` against the name rules; `kind` names the thing in errors.
pub fn validate_name(kind: &'static str, value: &str) -> Result<(), NameError> {
    if value.is_empty() {
        return Err(NameError::Empty { kind });
    }
    if let Some(ch) = value.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(NameError::BadChar { kind, value: value.to_owned(), ch });
    }
    if value.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong { kind, value: value.to_owned(), len: value.len() });
    }
    if value == "." || value == ".." {
        return Err(NameError::Reserved { kind, value: value.to_owned() });
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $ty:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $ty(String);

        impl $ty {
            /// Validates and wraps `value`.
            pub fn new(value: impl Into<String>) -> Result<Self, NameError> {
                let value = value.into();
                validate_name($kind, &value)?;
                Ok(Self(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $ty {
            type Err = NameError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                Self::new(raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

name_type!(
    /// A box's identifier, unique within one store (`box-0`, `box-1`, ...).
    BoxId, "box"
);
name_type!(
    /// A snapshot's identifier, chosen by the sandbox that took it.
    SnapshotId, "snapshot"
);
name_type!(
    /// A host's name: `local`, or a configured remote.
    HostName, "host"
);
name_type!(
    /// A sandbox's name: `passthrough` or a driver's name.
    SandboxName, "sandbox"
);
name_type!(
    /// A template's name: a named snapshot.
    TemplateName, "template"
);

impl HostName {
    /// `local`: this machine, the built-in host.
    pub fn local() -> HostName {
        HostName("local".to_owned())
    }
}

impl SandboxName {
    /// `passthrough`: the built-in sandbox that confines nothing.
    pub fn passthrough() -> SandboxName {
        SandboxName("passthrough".to_owned())
    }
}

#[cfg(test)]
#[path = "names_tests.rs"]
mod tests;
