//! Table-driven checks; each case names the KIP-1176 rule (module docs) it protects.

use bytes::{BufMut, BytesMut};
use uuid::Uuid;

use super::*;

fn rec(base: i64, last: i64, epoch: i32, key: &str, pos: u64, len: u32) -> WalSliceMetadata {
    WalSliceMetadata {
        bucket: "az1".into(),
        object_key: key.into(),
        byte_position: pos,
        byte_length: len,
        topic_id: Uuid::from_bytes([1; 16]),
        partition: 0,
        base_offset: base,
        last_offset: last,
        leader_epoch: epoch,
        slice_crc: 0,
        object_size: 1 << 20,
        uploader_broker_id: 1,
        upload_time_ms: 0,
    }
}

fn r(base: i64, last: i64, epoch: i32) -> WalSliceMetadata {
    rec(base, last, epoch, "wal/1/o", base as u64 * 100, 100)
}

struct Case {
    rule: &'static str,
    leo: i64,
    epoch: i32,
    records: Vec<WalSliceMetadata>,
    unreadable: &'static [&'static str],
    fetch: Vec<(i64, i64)>,
    skipped: Vec<(i64, SkipReason)>,
    classic: Option<(i64, i64)>,
}

#[test]
fn plan_partition_table() {
    let cases = vec![
        Case {
            rule: "happy path: continuous records from the log end are all fetched",
            leo: 0,
            epoch: 5,
            records: vec![r(0, 9, 5), r(10, 19, 5)],
            unreadable: &[],
            fetch: vec![(0, 9), (10, 19)],
            skipped: vec![],
            classic: None,
        },
        Case {
            rule: "rule 1: metadata of a former leader (stale epoch) is skipped",
            leo: 0,
            epoch: 6,
            records: vec![r(0, 9, 5), rec(0, 9, 6, "wal/2/o", 0, 100)],
            unreadable: &[],
            fetch: vec![(0, 9)],
            skipped: vec![(
                0,
                SkipReason::StaleLeaderEpoch {
                    record: 5,
                    current: 6,
                },
            )],
            classic: None,
        },
        Case {
            rule: "rule 2: a newer epoch than known waits for the metadata image",
            leo: 0,
            epoch: 5,
            records: vec![r(0, 9, 7)],
            unreadable: &[],
            fetch: vec![],
            skipped: vec![(
                0,
                SkipReason::FutureLeaderEpoch {
                    record: 7,
                    current: 5,
                },
            )],
            classic: None,
        },
        Case {
            rule: "rule 3 (AZ outage): unreadable object skipped, republished copy used",
            leo: 0,
            epoch: 6,
            records: vec![
                rec(0, 9, 6, "wal/dead/o", 0, 100),
                rec(0, 9, 6, "wal/new/o", 0, 100),
            ],
            unreadable: &["wal/dead/o"],
            fetch: vec![(0, 9)],
            skipped: vec![(0, SkipReason::ObjectUnreadable)],
            classic: None,
        },
        Case {
            rule: "rule 4: ranges below the log end are skipped",
            leo: 20,
            epoch: 5,
            records: vec![r(0, 9, 5), r(10, 19, 5), r(20, 29, 5)],
            unreadable: &[],
            fetch: vec![(20, 29)],
            skipped: vec![
                (0, SkipReason::AlreadyCovered),
                (10, SkipReason::AlreadyCovered),
            ],
            classic: None,
        },
        Case {
            rule: "rule 4/6: a record straddling the log end is fetched (verify trims)",
            leo: 5,
            epoch: 5,
            records: vec![r(0, 9, 5)],
            unreadable: &[],
            fetch: vec![(0, 9)],
            skipped: vec![],
            classic: None,
        },
        Case {
            rule: "rule 5: a gap (failed upload upstream) means classic fetch, later records wait",
            leo: 10,
            epoch: 5,
            records: vec![r(20, 29, 5), r(30, 39, 5)],
            unreadable: &[],
            fetch: vec![],
            skipped: vec![],
            classic: Some((10, 20)),
        },
        Case {
            rule: "rule 5: fetch up to the gap, then classic for the gap",
            leo: 0,
            epoch: 5,
            records: vec![r(0, 9, 5), r(15, 19, 5)],
            unreadable: &[],
            fetch: vec![(0, 9)],
            skipped: vec![],
            classic: Some((10, 15)),
        },
        Case {
            rule:
                "rule 1+5: skipping stale metadata can open a gap (old leader's unreplicated tail)",
            leo: 0,
            epoch: 6,
            records: vec![r(0, 9, 5), r(10, 19, 6)],
            unreadable: &[],
            fetch: vec![],
            skipped: vec![(
                0,
                SkipReason::StaleLeaderEpoch {
                    record: 5,
                    current: 6,
                },
            )],
            classic: Some((0, 10)),
        },
    ];
    for c in cases {
        let plan = plan_partition(
            FollowerPartition {
                log_end_offset: c.leo,
                leader_epoch: c.epoch,
                log_validated: true,
            },
            &c.records,
            |m| c.unreadable.contains(&m.object_key.as_str()),
        );
        let fetch: Vec<_> = plan
            .fetch
            .iter()
            .map(|m| (m.base_offset, m.last_offset))
            .collect();
        assert_eq!(fetch, c.fetch, "{}", c.rule);
        let skipped: Vec<_> = plan
            .skipped
            .iter()
            .map(|(m, s)| (m.base_offset, *s))
            .collect();
        assert_eq!(skipped, c.skipped, "{}", c.rule);
        let classic = plan.classic.map(|c| (c.from, c.until));
        assert_eq!(classic, c.classic, "{}", c.rule);
        let accounted = plan.fetch.len() + plan.skipped.len() + plan.deferred.len();
        assert_eq!(
            accounted,
            c.records.len(),
            "every record accounted for: {}",
            c.rule
        );
    }
}

#[test]
fn coalesce_table_rule_7() {
    let a = rec(0, 9, 1, "wal/1/x", 8, 100);
    let b = rec(0, 9, 1, "wal/1/x", 108, 50); // adjacent to a
    let c = rec(0, 9, 1, "wal/1/x", 170, 30); // 12 bytes after b
    let d = rec(0, 9, 1, "wal/1/y", 8, 10); // other object
    let cases: Vec<(&str, u64, Vec<Range<u64>>)> = vec![
        (
            "adjacent ranges of one object are one GET",
            0,
            vec![8..158, 170..200, 8..18],
        ),
        (
            "a small hole is cheaper to read than another GET",
            16,
            vec![8..200, 8..18],
        ),
    ];
    for (rule, gap, want) in cases {
        let gets = coalesce(&[c.clone(), d.clone(), b.clone(), a.clone()], gap);
        let ranges: Vec<_> = gets.iter().map(|g| g.range.clone()).collect();
        assert_eq!(ranges, want, "{rule}");
    }
    let gets = coalesce(&[b.clone(), a.clone()], 0);
    let data = Bytes::from((0..150u8).collect::<Vec<_>>());
    let parts = gets[0].split(&data).unwrap();
    assert_eq!(parts[0].0, a);
    assert_eq!(parts[0].1.len(), 100);
    assert_eq!(parts[1].1.to_bytes()[0], 100);
    assert!(gets[0].split(&data.slice(..149)).is_err());
}

/// The body of a GET in the pieces it arrived in gives the same slices as the joined body,
/// wherever the pieces end: inside a slice, on a slice boundary, or in empty pieces.
#[test]
fn split_over_pieces_equals_split_of_the_joined_body() {
    let a = rec(0, 9, 1, "wal/1/x", 8, 100);
    let b = rec(0, 9, 1, "wal/1/x", 108, 50);
    let c = rec(0, 9, 1, "wal/1/x", 170, 30);
    let get = &coalesce(&[a, b, c], 16)[0];
    let data = Bytes::from((0..192u8).collect::<Vec<_>>());
    let whole = get.split(&data).unwrap();
    let cuts: &[&[usize]] = &[
        &[],               // one piece
        &[50],             // inside the first slice
        &[100, 150],       // on a boundary, then inside the second
        &[1, 2, 3, 191],   // many small pieces
        &[0, 0, 100, 100], // empty pieces
    ];
    for &cut in cuts {
        let mut pieces = Vec::new();
        let mut from = 0;
        for &to in cut.iter().chain(std::iter::once(&192)) {
            pieces.push(data.slice(from..to));
            from = to;
        }
        assert_eq!(get.split_pieces(&pieces).unwrap(), whole, "cut at {cut:?}");
    }
    let short = [data.slice(..100), data.slice(100..191)];
    assert!(get.split_pieces(&short).is_err(), "a short body");
}

/// A v2 batch header (no records needed for these checks) for offsets `base..=last`.
fn batch(base: i64, last: i64, epoch: i32) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_i64(base);
    b.put_i32(49 + 8); // length after this field: rest of header + 8 bytes of "records"
    b.put_i32(epoch);
    b.put_u8(2);
    b.put_u32(0); // crc (the log checks it on append)
    b.put_i16(0);
    b.put_i32((last - base) as i32);
    b.put_bytes(0, 61 - b.len());
    b.put_u64(0xfeed);
    b.to_vec()
}

fn slice_of(batches: &[(i64, i64, i32)], epoch: i32) -> (WalSliceMetadata, Bytes) {
    let data: Vec<u8> = batches
        .iter()
        .flat_map(|&(b, l, e)| batch(b, l, e))
        .collect();
    let mut m = rec(
        batches[0].0,
        batches[batches.len() - 1].1,
        epoch,
        "k",
        0,
        data.len() as u32,
    );
    m.slice_crc = crc32c::crc32c(&data);
    (m, Bytes::from(data))
}

#[test]
fn verify_slice_table_rule_6() {
    let (m, data) = slice_of(&[(0, 4, 3), (5, 9, 3)], 3);
    let data = SliceBytes::from(data);
    let ok = verify_slice(&m, &data, 0).unwrap().unwrap();
    assert_eq!(
        (ok.base_offset, ok.last_offset, ok.records.len()),
        (0, 9, data.len())
    );

    let trimmed = verify_slice(&m, &data, 5).unwrap().unwrap();
    assert_eq!(
        trimmed.base_offset, 5,
        "batches below the log end are dropped"
    );
    assert_eq!(trimmed.records.len(), data.len() / 2);
    assert_eq!(verify_slice(&m, &data, 10).unwrap(), None, "nothing new");

    type Mutate = fn(&mut WalSliceMetadata, &mut Vec<u8>);
    let cases: Vec<(&str, i64, Mutate)> = vec![
        ("CRC mismatch: damaged download", 0, |_, d| d[70] ^= 1),
        ("short download", 0, |m, d| {
            d.pop();
            m.slice_crc = crc32c::crc32c(d);
        }),
        (
            "not continuous with the local log (log end inside a batch)",
            3,
            |_, _| {},
        ),
        (
            "record claims more offsets than the batches hold",
            0,
            |m, _| m.last_offset = 12,
        ),
        ("batch epoch above the record's epoch", 0, |m, _| {
            m.leader_epoch = 2
        }),
        ("not a v2 batch", 0, |m, d| {
            d[16] = 1;
            m.slice_crc = crc32c::crc32c(d);
        }),
        ("batch length runs past the slice", 0, |m, d| {
            d[11] = 0xff;
            m.slice_crc = crc32c::crc32c(d);
        }),
        ("offsets not dense between batches", 0, |m, d| {
            d[69 + 7] = 6; // second batch base offset 6 instead of 5
            m.slice_crc = crc32c::crc32c(d);
        }),
    ];
    for (rule, leo, mutate) in cases {
        let mut m2 = m.clone();
        let mut d2 = data.to_bytes().to_vec();
        mutate(&mut m2, &mut d2);
        let err = verify_slice(&m2, &SliceBytes::from(d2), leo);
        assert!(err.is_err(), "{rule} was accepted");
    }
}

#[test]
fn rule_0_nothing_is_fetched_before_the_new_leader_confirmed_the_log() {
    let records = vec![r(0, 9, 5), r(10, 19, 6), r(20, 29, 6), r(30, 39, 7)];
    let state = FollowerPartition {
        log_end_offset: 10,
        leader_epoch: 6,
        log_validated: false,
    };
    let plan = plan_partition(state, &records, |_| false);
    assert!(plan.fetch.is_empty());
    assert_eq!(
        plan.classic, None,
        "the replica fetcher is validating; no classic range"
    );
    // The stale record is still dropped, the rest waits.
    let skipped: Vec<_> = plan
        .skipped
        .iter()
        .map(|(m, s)| (m.base_offset, *s))
        .collect();
    assert_eq!(
        skipped,
        vec![
            (
                0,
                SkipReason::StaleLeaderEpoch {
                    record: 5,
                    current: 6
                }
            ),
            (
                30,
                SkipReason::FutureLeaderEpoch {
                    record: 7,
                    current: 6
                }
            ),
        ]
    );
    let deferred: Vec<_> = plan.deferred.iter().map(|m| m.base_offset).collect();
    assert_eq!(deferred, vec![10, 20]);
    // Once confirmed, the same records are fetched.
    let plan = plan_partition(
        FollowerPartition {
            log_validated: true,
            ..state
        },
        &records,
        |_| false,
    );
    let fetch: Vec<_> = plan.fetch.iter().map(|m| m.base_offset).collect();
    assert_eq!(fetch, vec![10, 20]);
}

/// A slice in the pieces its GET body arrived in verifies as the joined slice does, wherever
/// the pieces end (inside a batch header too), and keeps its records as views of them.
#[test]
fn verify_slice_over_pieces_equals_verify_of_the_joined_slice() {
    let (m, data) = slice_of(&[(0, 4, 3), (5, 9, 3)], 3);
    let joined = SliceBytes::from(data.clone());
    for step in [1, 5, 30, 61, 62, 69, 100] {
        let pieces = SliceBytes::from_pieces(
            (0..data.len())
                .step_by(step)
                .map(|at| data.slice(at..(at + step).min(data.len()))),
        );
        for leo in [0, 5, 10] {
            assert_eq!(
                verify_slice(&m, &pieces, leo).unwrap(),
                verify_slice(&m, &joined, leo).unwrap(),
                "pieces of {step}, log end {leo}"
            );
        }
        let mut damaged = data.to_vec();
        damaged[70] ^= 1;
        let damaged = Bytes::from(damaged);
        let pieces = SliceBytes::from_pieces(
            (0..damaged.len())
                .step_by(step)
                .map(|at| damaged.slice(at..(at + step).min(damaged.len()))),
        );
        assert!(verify_slice(&m, &pieces, 0).is_err());
    }
}
