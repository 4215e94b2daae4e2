//! The one owner of object-key rules and of the remote WAL's key layout.
//!
//! # Valid keys (every backend)
//!
//! [`validate_key`] accepts keys that mean the same thing on S3 and as a relative path under a
//! local directory: non-empty, at most [`MAX_KEY_LEN`] bytes, `/`-separated segments that are
//! neither empty nor `.`/`..`, no leading `/`, no `\` and no control characters.
//!
//! # WAL object keys
//!
//! ```text
//! wal/<broker-id>/<created-ms, 13 digits>-<seq, 10 digits>.wal
//! wal/3/1732873212345-0000000042.wal
//! ```
//!
//! - `broker-id` is the uploading broker (decimal, not padded); [`WalObjectKey::broker_prefix`]
//!   ends with `/` so `wal/1/` never matches broker 10's objects.
//! - `created-ms` is the uploader's clock when it sealed the object, zero-padded to 13 digits
//!   (enough until the year 2286), so within a broker keys sort by creation time: listings and
//!   garbage collection can stop at a time bound without parsing every key.
//! - `seq` is a per-broker counter that breaks ties within one millisecond and, with the broker id,
//!   makes keys unique even when a clock steps backwards (the uploader keeps `seq` increasing).
//!
//! Objects are written with `put_if_absent`, so a key is written at most once; a retried upload
//! reuses the same key and so cannot create a duplicate.
//!
//! # Long-term tier keys (KIP-405)
//!
//! ```text
//! tier/<topic-id>/<partition>/<start-offset, 20 digits>-<segment-id>.<file>
//! tier/5b6c.../3/00000000000000001000-0f1e....log
//! ```
//!
//! One object per file of a copied segment (`log`, `index`, `timeindex`, `txnindex`, `snapshot`,
//! `leader-epoch-checkpoint`). The topic id, not its name, so a topic deleted and created again
//! under the same name never meets the old one's objects; the segment id is new for every copy,
//! so a copy retried by another leader never overwrites one that readers may be using.

use std::fmt;
use std::str::FromStr;

use crate::{ObjStoreError, Result};

/// Longest accepted key in bytes (S3's limit).
pub const MAX_KEY_LEN: usize = 1024;

/// Top-level prefix of all remote WAL objects.
pub const WAL_PREFIX: &str = "wal/";

/// Top-level prefix of all long-term tier objects.
pub const TIER_PREFIX: &str = "tier/";

/// The prefix of one partition's objects in the tier (ends with `/`).
pub fn tier_partition_prefix(topic_id: impl fmt::Display, partition: i32) -> String {
    format!("{TIER_PREFIX}{topic_id}/{partition}/")
}

/// The key of one file of one copied segment in the tier (see the module docs).
pub fn tier_segment_key(
    topic_id: impl fmt::Display,
    partition: i32,
    start_offset: i64,
    segment_id: impl fmt::Display,
    file: &str,
) -> String {
    format!(
        "{}{start_offset:020}-{segment_id}.{file}",
        tier_partition_prefix(topic_id, partition)
    )
}

/// Checks that `key` is a valid object key (see the module docs).
pub fn validate_key(key: &str) -> Result<()> {
    let invalid = |reason| {
        Err(ObjStoreError::InvalidKey {
            key: key.to_owned(),
            reason,
        })
    };
    if key.is_empty() {
        return invalid("empty key");
    }
    if key.len() > MAX_KEY_LEN {
        return invalid("longer than 1024 bytes");
    }
    if key.starts_with('/') {
        return invalid("absolute key (leading '/')");
    }
    if key.contains('\\') {
        return invalid("contains '\\'");
    }
    if key.chars().any(char::is_control) {
        return invalid("contains control characters");
    }
    for segment in key.split('/') {
        match segment {
            "" => return invalid("empty path segment ('//' or trailing '/')"),
            "." | ".." => return invalid("'.' or '..' path segment"),
            _ => {}
        }
    }
    Ok(())
}

/// The parts of a remote WAL object key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WalObjectKey {
    pub broker_id: i32,
    /// Milliseconds since the Unix epoch when the object was sealed; `0..=9_999_999_999_999`.
    pub created_ms: i64,
    pub seq: u64,
}

/// Why a string is not a [`WalObjectKey`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a WAL object key ({reason}): {key:?}")]
pub struct WalKeyParseError {
    pub key: String,
    pub reason: &'static str,
}

const MAX_CREATED_MS: i64 = 9_999_999_999_999;
const MAX_SEQ: u64 = 9_999_999_999;

impl WalObjectKey {
    /// Builds a key; `None` when a field does not fit the fixed-width layout (negative broker id
    /// or time, time beyond 13 digits, sequence beyond 10 digits).
    pub fn new(broker_id: i32, created_ms: i64, seq: u64) -> Option<Self> {
        let ok = broker_id >= 0 && (0..=MAX_CREATED_MS).contains(&created_ms) && seq <= MAX_SEQ;
        ok.then_some(Self {
            broker_id,
            created_ms,
            seq,
        })
    }

    /// `wal/<broker-id>/`: lists every WAL object one broker uploaded.
    pub fn broker_prefix(broker_id: i32) -> String {
        format!("{WAL_PREFIX}{broker_id}/")
    }

    /// Parses a key produced by `Display`; rejects anything else, including non-canonical
    /// padding, so parse and format are exact inverses.
    pub fn parse(key: &str) -> std::result::Result<Self, WalKeyParseError> {
        let err = |reason| WalKeyParseError {
            key: key.to_owned(),
            reason,
        };
        let rest = key
            .strip_prefix(WAL_PREFIX)
            .ok_or_else(|| err("no 'wal/' prefix"))?;
        let (broker, file) = rest.split_once('/').ok_or_else(|| err("no broker id"))?;
        let stem = file
            .strip_suffix(".wal")
            .ok_or_else(|| err("no '.wal' suffix"))?;
        let (created, seq) = stem
            .split_once('-')
            .ok_or_else(|| err("no '-' between time and sequence"))?;
        let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(broker) || (broker.len() > 1 && broker.starts_with('0')) {
            return Err(err("broker id is not a canonical decimal"));
        }
        if created.len() != 13 || !all_digits(created) {
            return Err(err("time is not 13 digits"));
        }
        if seq.len() != 10 || !all_digits(seq) {
            return Err(err("sequence is not 10 digits"));
        }
        let broker_id = broker.parse().map_err(|_| err("broker id out of range"))?;
        let created_ms = created.parse().map_err(|_| err("bad time"))?;
        let seq = seq.parse().map_err(|_| err("bad sequence"))?;
        Ok(Self {
            broker_id,
            created_ms,
            seq,
        })
    }
}

impl fmt::Display for WalObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{WAL_PREFIX}{}/{:013}-{:010}.wal",
            self.broker_id, self.created_ms, self.seq
        )
    }
}

impl FromStr for WalObjectKey {
    type Err = WalKeyParseError;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tier_keys_sort_by_start_offset_within_a_partition() {
        let a = tier_segment_key("t1", 3, 999, "seg-b", "log");
        let b = tier_segment_key("t1", 3, 1_000, "seg-a", "log");
        assert_eq!(a, "tier/t1/3/00000000000000000999-seg-b.log");
        assert!(a < b);
        assert!(b.starts_with(&tier_partition_prefix("t1", 3)));
        assert!(
            !tier_segment_key("t1", 30, 0, "s", "log").starts_with(&tier_partition_prefix("t1", 3))
        );
        assert!(validate_key(&b).is_ok());
    }

    #[test]
    fn wal_key_formats_fixed_width_and_round_trips() {
        let key = WalObjectKey::new(3, 1_732_873_212_345, 42).unwrap();
        let s = key.to_string();
        assert_eq!(s, "wal/3/1732873212345-0000000042.wal");
        assert_eq!(WalObjectKey::parse(&s).unwrap(), key);
        assert!(validate_key(&s).is_ok());
        assert!(s.starts_with(&WalObjectKey::broker_prefix(3)));
    }

    #[test]
    fn wal_keys_of_one_broker_sort_by_time_then_seq() {
        let keys = [
            WalObjectKey::new(7, 5, 9).unwrap(),
            WalObjectKey::new(7, 10, 1).unwrap(),
            WalObjectKey::new(7, 10, 2).unwrap(),
            WalObjectKey::new(7, 1_000_000_000_000, 0).unwrap(),
        ];
        let strings: Vec<String> = keys.iter().map(ToString::to_string).collect();
        let mut sorted = strings.clone();
        sorted.sort();
        assert_eq!(strings, sorted);
    }

    #[test]
    fn broker_prefix_does_not_match_other_brokers() {
        let ten = WalObjectKey::new(10, 1, 1).unwrap().to_string();
        assert!(!ten.starts_with(&WalObjectKey::broker_prefix(1)));
    }

    #[test]
    fn wal_key_rejects_out_of_range_fields() {
        assert!(WalObjectKey::new(-1, 0, 0).is_none());
        assert!(WalObjectKey::new(0, -1, 0).is_none());
        assert!(WalObjectKey::new(0, 10_000_000_000_000, 0).is_none());
        assert!(WalObjectKey::new(0, 0, 10_000_000_000).is_none());
        assert!(WalObjectKey::new(i32::MAX, MAX_CREATED_MS, MAX_SEQ).is_some());
    }

    #[test]
    fn wal_key_parser_rejects_non_canonical_keys() {
        for bad in [
            "wal/3/1732873212345-0000000042",
            "wal/3/1732873212345-42.wal",
            "wal/03/1732873212345-0000000042.wal",
            "wal/x/1732873212345-0000000042.wal",
            "wal/3/173287321234-0000000042.wal",
            "wal/3/1732873212345_0000000042.wal",
            "tier/3/1732873212345-0000000042.wal",
            "wal/3/sub/1732873212345-0000000042.wal",
            "wal/99999999999/1732873212345-0000000042.wal",
        ] {
            assert!(WalObjectKey::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn validate_key_rejects_paths_that_escape_or_mean_different_things() {
        for bad in [
            "", "/abs", "a/../b", "..", "a/./b", "a//b", "a/", "a\\b", "a\nb", "a\0b",
        ] {
            assert!(
                matches!(validate_key(bad), Err(ObjStoreError::InvalidKey { .. })),
                "{bad:?} accepted"
            );
        }
        assert!(validate_key(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        for good in ["a", "a/b/c.wal", "a b+c=d%e", "..a/b..", ".hidden"] {
            assert!(validate_key(good).is_ok(), "{good:?} rejected");
        }
    }
}
