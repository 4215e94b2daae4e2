//! The feature levels ferry reports in ApiVersions v3+ (KIP-584), as a Kafka 4.x broker does:
//! the range of each feature this broker can run at, and the level the cluster runs at.
//!
//! ferry's levels are fixed by what the binary serves, not set by an operator (ferry does not
//! serve UpdateFeatures), so each supported range is exactly its finalized level and both tables
//! change only with the code. Invariants: every finalized feature is also supported, at a level
//! inside its range; a feature at level 0 is left out of the finalized list (Kafka's rule: level
//! 0 means "off"); and, for ApiVersions below v4, a supported range starting at 0 is left out
//! (KAFKA-17492: older clients fail to read a minimum of 0).
//!
//! The levels, and why:
//! - `metadata.version` 25 (Kafka's `4.0-IV3`, the newest production level of Kafka 4.0): the
//!   request versions that Kafka gates behind the 3.x and 4.0 levels are the ones ferry serves
//!   (ListOffsets v9 and v10 with KIP-1005 and KIP-1075, Fetch v15+ replica state, KIP-848 groups
//!   at `4.0-IV0`). ELR (KIP-966), which `4.0-IV1` makes possible, stays off: Kafka enables it
//!   with its own feature, `eligible.leader.replicas.version`, which ferry does not report.
//! - `group.version` 1: the consumer rebalance protocol of KIP-848 (ConsumerGroupHeartbeat and
//!   ConsumerGroupDescribe) is served.
//! - `transaction.version` 1: Kafka's level 1 only switches the `__transaction_state` records to
//!   their flexible value version 1, which ferry writes; level 2 (KIP-890 part 2: an epoch bump
//!   per transaction, EndTxn v5 and TxnOffsetCommit v5) is not served, so a client that reads
//!   level 1 keeps to transactions v1, as it must. The supported range is 0..=1.
//!
//! `kraft.version` is not reported: ferry's controller quorum is not KRaft, and no client reads
//! it.

use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::protocol::StrBytes;

/// Kafka 4.0's `MetadataVersion.IBP_4_0_IV3`.
pub const METADATA_VERSION_4_0_IV3: i16 = 25;

/// (feature, lowest supported level, highest supported level, finalized level).
pub const FEATURES: &[(&str, i16, i16, i16)] = &[
    (
        "metadata.version",
        METADATA_VERSION_4_0_IV3,
        METADATA_VERSION_4_0_IV3,
        METADATA_VERSION_4_0_IV3,
    ),
    ("group.version", 0, 1, 1),
    ("transaction.version", 0, 1, 1),
];

/// The first ApiVersions version whose supported features may start at level 0.
const ZERO_MIN_VERSION: i16 = 4;

/// Adds the supported and finalized features to `response`, an answer to ApiVersions
/// `version`; `epoch` is the offset of the cluster metadata the levels come from (Kafka's
/// `FinalizedFeaturesEpoch`, which only grows).
pub fn add_features(response: &mut ApiVersionsResponse, version: i16, epoch: i64) {
    if version < 3 {
        return;
    }
    response.supported_features = FEATURES
        .iter()
        .filter(|(_, min, _, _)| *min > 0 || version >= ZERO_MIN_VERSION)
        .map(|&(name, min, max, _)| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    response.finalized_features = FEATURES
        .iter()
        .filter(|(_, _, _, level)| *level > 0)
        .map(|&(name, _, _, level)| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version_level(level)
                .with_max_version_level(level)
        })
        .collect();
    response.finalized_features_epoch = epoch.max(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(r: &ApiVersionsResponse) -> (Vec<&str>, Vec<&str>) {
        (
            r.supported_features
                .iter()
                .map(|f| f.name.as_str())
                .collect(),
            r.finalized_features
                .iter()
                .map(|f| f.name.as_str())
                .collect(),
        )
    }

    #[test]
    fn every_finalized_level_is_inside_its_supported_range() {
        for &(name, min, max, level) in FEATURES {
            assert!(min <= max, "{name}");
            assert!(level == 0 || (min..=max).contains(&level), "{name}");
        }
    }

    #[test]
    fn v4_lists_every_feature_and_v3_leaves_out_ranges_from_zero() {
        let mut v4 = ApiVersionsResponse::default();
        add_features(&mut v4, 4, 7);
        let (supported, finalized) = names(&v4);
        assert_eq!(
            supported,
            ["metadata.version", "group.version", "transaction.version"]
        );
        assert_eq!(
            finalized,
            ["metadata.version", "group.version", "transaction.version"]
        );
        assert_eq!(v4.finalized_features_epoch, 7);
        let mv = &v4.finalized_features[0];
        assert_eq!((mv.min_version_level, mv.max_version_level), (25, 25));

        let mut v3 = ApiVersionsResponse::default();
        add_features(&mut v3, 3, 7);
        let (supported, finalized) = names(&v3);
        assert_eq!(supported, ["metadata.version"]);
        assert_eq!(
            finalized,
            ["metadata.version", "group.version", "transaction.version"]
        );
    }

    #[test]
    fn before_v3_there_is_nowhere_to_put_features() {
        let mut v2 = ApiVersionsResponse::default();
        add_features(&mut v2, 2, 7);
        assert!(v2.supported_features.is_empty() && v2.finalized_features.is_empty());
        assert_eq!(v2.finalized_features_epoch, -1);
    }
}
