//! KIP-320: where a follower's log stops matching its leader's, by leader epoch.

/// Over a leader's epoch history `end_for_epoch` (epoch → the largest epoch not above it and
/// where it ends): where a follower whose last batch has epoch `last_fetched_epoch` and whose
/// log ends at `fetch_offset` stops matching, as (epoch, end offset); `None` when it matches.
pub fn divergence(
    end_for_epoch: impl Fn(i32) -> Option<(i32, i64)>,
    fetch_offset: i64,
    last_fetched_epoch: i32,
) -> Option<(i32, i64)> {
    if last_fetched_epoch < 0 {
        return None;
    }
    let (epoch, end_offset) = end_for_epoch(last_fetched_epoch)?;
    (epoch != last_fetched_epoch || end_offset < fetch_offset).then_some((epoch, end_offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The leader's epochs: 0 ends at 50, 3 at 100, 5 is current (ends at its log end, 150).
    fn leader(epoch: i32) -> Option<(i32, i64)> {
        match epoch {
            0..=2 => Some((0, 50)),
            3 | 4 => Some((3, 100)),
            e if e >= 5 => Some((5, 150)),
            _ => None,
        }
    }

    #[test]
    fn divergence_from_a_table() {
        // (fetch offset, last fetched epoch) → divergence
        let table: &[(i64, i32, Option<(i32, i64)>)] = &[
            (120, 3, Some((3, 100))), // follower wrote past the end of epoch 3
            (100, 3, None),           // ends exactly where epoch 3 ended
            (150, 5, None),           // current epoch, within the log
            (150, 4, Some((3, 100))), // epoch 4 never led here: back to epoch 3's end
            (40, 0, None),            // epoch 0 ended at 50, follower is below
            (60, 1, Some((0, 50))),   // epoch 1 unknown: the largest below it is 0
            (120, -1, None),          // no epoch yet: nothing to compare
        ];
        for &(fetch_offset, last_epoch, want) in table {
            assert_eq!(
                divergence(leader, fetch_offset, last_epoch),
                want,
                "fetch offset {fetch_offset}, last fetched epoch {last_epoch}"
            );
        }
    }
}
