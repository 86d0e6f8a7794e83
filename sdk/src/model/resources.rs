//! Resource limits. A limit is either in force or absent: a sandbox that
//! cannot apply a limit declines it, it never accepts and ignores it.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

const GIB: u64 = 1024 * 1024 * 1024;

/// One kind of resource limit a sandbox may enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    Cpu,
    Memory,
    Pids,
    Disk,
}

impl Limit {
    pub const ALL: [Limit; 4] = [Limit::Cpu, Limit::Memory, Limit::Pids, Limit::Disk];

    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Cpu => "cpu",
            Limit::Memory => "memory",
            Limit::Pids => "pids",
            Limit::Disk => "disk",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Resource limits; `None` means "not in force" (or, in a request, "not asked").
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// CPU cores, possibly fractional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Memory in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Maximum number of processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Disk in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
}

/// A limit that is zero, negative or not a number.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{limit} limit {value} is not positive; every limit must be greater than zero (zero means \"unlimited\" to some backends and \"nothing\" to others)"
)]
pub struct NonPositiveLimit {
    pub limit: Limit,
    pub value: String,
}

impl Resources {
    /// The spec's defaults: sized for an agent task, not a build farm.
    pub fn defaults() -> Self {
        Resources { cpus: Some(2.0), memory_bytes: Some(2 * GIB), pids: Some(512), disk_bytes: Some(8 * GIB) }
    }

    /// The limits that are set.
    pub fn set(&self) -> BTreeSet<Limit> {
        Limit::ALL.into_iter().filter(|l| self.is_set(*l)).collect()
    }

    pub fn is_set(&self, limit: Limit) -> bool {
        match limit {
            Limit::Cpu => self.cpus.is_some(),
            Limit::Memory => self.memory_bytes.is_some(),
            Limit::Pids => self.pids.is_some(),
            Limit::Disk => self.disk_bytes.is_some(),
        }
    }

    /// Keeps only the limits in `keep`.
    pub fn restricted_to(&self, keep: &BTreeSet<Limit>) -> Self {
        Resources {
            cpus: self.cpus.filter(|_| keep.contains(&Limit::Cpu)),
            memory_bytes: self.memory_bytes.filter(|_| keep.contains(&Limit::Memory)),
            pids: self.pids.filter(|_| keep.contains(&Limit::Pids)),
            disk_bytes: self.disk_bytes.filter(|_| keep.contains(&Limit::Disk)),
        }
    }

    /// Fills every limit not set here from `other`.
    pub fn or(&self, other: &Resources) -> Self {
        Resources {
            cpus: self.cpus.or(other.cpus),
            memory_bytes: self.memory_bytes.or(other.memory_bytes),
            pids: self.pids.or(other.pids),
            disk_bytes: self.disk_bytes.or(other.disk_bytes),
        }
    }

    /// Every set limit must be positive (and finite).
    pub fn validate(&self) -> Result<(), NonPositiveLimit> {
        if let Some(c) = self.cpus
            && !(c.is_finite() && c > 0.0)
        {
            return Err(NonPositiveLimit { limit: Limit::Cpu, value: c.to_string() });
        }
        for (limit, v) in [(Limit::Memory, self.memory_bytes), (Limit::Pids, self.pids), (Limit::Disk, self.disk_bytes)]
        {
            if v == Some(0) {
                return Err(NonPositiveLimit { limit, value: "0".into() });
            }
        }
        Ok(())
    }
}

/// Parses a size such as `512M`, `2GiB`, `1g` or `4096` (bytes).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("size {text:?} is not a number with an optional unit (K, M, G, T; e.g. 512M, 2G)"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("size {text:?} has unknown unit {unit:?}; use K, M, G or T (powers of 1024)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("size {text:?} is too large"))
}

/// Formats bytes the way [`parse_size`] reads them, exactly where possible.
pub fn format_size(bytes: u64) -> String {
    for (unit, m) in [("T", 1u64 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)] {
        if bytes >= m && bytes.is_multiple_of(m) {
            return format!("{}{unit}", bytes / m);
        }
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_specs() {
        let d = Resources::defaults();
        assert_eq!(d.cpus, Some(2.0));
        assert_eq!(d.memory_bytes, Some(2 * GIB));
        assert_eq!(d.pids, Some(512));
        assert_eq!(d.disk_bytes, Some(8 * GIB));
        assert!(d.validate().is_ok());
    }

    #[test]
    fn zero_and_negative_limits_are_rejected() {
        for bad in [
            Resources { cpus: Some(0.0), ..Default::default() },
            Resources { cpus: Some(-1.0), ..Default::default() },
            Resources { cpus: Some(f64::NAN), ..Default::default() },
            Resources { memory_bytes: Some(0), ..Default::default() },
            Resources { pids: Some(0), ..Default::default() },
            Resources { disk_bytes: Some(0), ..Default::default() },
        ] {
            let err = bad.validate().unwrap_err();
            assert!(err.to_string().contains("not positive"), "{err}");
        }
    }

    #[test]
    fn restriction_keeps_only_enforced_limits() {
        let keep: BTreeSet<Limit> = [Limit::Memory, Limit::Pids].into();
        let r = Resources::defaults().restricted_to(&keep);
        assert_eq!(r.set(), keep);
    }

    #[test]
    fn sizes_parse_and_format() {
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("2X").unwrap_err().contains("unknown unit"));
        assert!(parse_size("-1G").unwrap_err().contains("not a number"));
        assert_eq!(format_size(2 << 30), "2G");
        assert_eq!(format_size(1500), "1500");
    }
}
