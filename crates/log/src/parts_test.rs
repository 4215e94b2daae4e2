use super::*;
use crate::test_util::*;
use crate::TxnResult::Abort;
use crate::{LogConfig, PartitionLog};

/// A leader log of plain, idempotent and transactional batches and an ABORT marker, and all
/// its bytes.
fn leader_bytes(dir: &std::path::Path) -> Vec<u8> {
    let (_c, clock) = clock(0);
    let leader = open(dir, LogConfig::default(), true, &clock);
    leader.append_as_leader(&simple(2, 1_000), 1).unwrap();
    leader.append_as_leader(&txn(1, 0, 0, 2), 1).unwrap();
    leader.append_as_leader(&idem(3, 0, 0, 1), 2).unwrap();
    leader
        .append_control_marker(&marker(1, 0, Abort), 2)
        .unwrap();
    leader
        .append_as_leader(
            &batch(B {
                records: 5,
                value_len: 300,
                ..B::default()
            }),
            2,
        )
        .unwrap();
    let end = leader.log_end_offset();
    leader.read(0, 1 << 20, end, true).unwrap().records.to_vec()
}

/// What a follower log holds: its bytes and what it derived from them.
type View = (
    Vec<u8>,
    i64,
    Vec<(i32, i64)>,
    Vec<crate::AbortedTxn>,
    Option<i16>,
);

fn view(log: &PartitionLog) -> View {
    let end = log.log_end_offset();
    (
        log.read(0, 1 << 20, end, true).unwrap().records.to_vec(),
        end,
        log.epoch_entries(),
        log.collect_aborted_transactions(0, i64::MAX),
        log.producer_epoch(3),
    )
}

/// `bytes` cut at `cuts` (ascending positions inside it).
fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut parts = Vec::new();
    let mut at = 0;
    for &c in cuts {
        parts.push(&bytes[at..c]);
        at = c;
    }
    parts.push(&bytes[at..]);
    parts
}

#[test]
fn batches_over_parts_land_as_from_one_buffer() {
    let leader_dir = tempfile::tempdir().unwrap();
    let bytes = leader_bytes(leader_dir.path());
    let (_c, clock) = clock(0);
    let one_dir = tempfile::tempdir().unwrap();
    let one = open(one_dir.path(), LogConfig::default(), true, &clock);
    one.append_as_follower(&bytes).unwrap();
    let want = view(&one);
    assert_eq!(want.0, bytes);
    assert_eq!(want.3.len(), 1, "the ABORT marker was applied");

    // Pieces of every size, cuts inside headers and at batch edges, empty pieces.
    let mut patterns: Vec<Vec<usize>> = [1usize, 7, 60, 61, 62, 200, 1000]
        .iter()
        .map(|step| (1..bytes.len()).step_by(*step).collect())
        .collect();
    let edges: Vec<usize> = batch_ranges(&bytes)
        .iter()
        .scan(0usize, |at, _| {
            let h = crate::batch::BatchHeader::parse(&bytes[*at..]).unwrap();
            *at += h.total_size();
            Some(*at)
        })
        .filter(|e| *e < bytes.len())
        .collect();
    for e in &edges {
        patterns.push(vec![*e]);
        patterns.push(vec![*e, *e]);
        patterns.push(vec![e - 1, e + 1]);
        patterns.push(vec![e + 30]);
    }
    for crcs in [BatchCrcs::Check, BatchCrcs::AlreadyVerified] {
        for cuts in &patterns {
            let dir = tempfile::tempdir().unwrap();
            let log = open(dir.path(), LogConfig::default(), true, &clock);
            let info = log
                .append_as_follower_parts(&split(&bytes, cuts), crcs)
                .unwrap();
            assert_eq!(info.bytes, bytes.len());
            assert_eq!(view(&log), want, "cut at {cuts:?}, {crcs:?}");
        }
    }
}

#[test]
fn a_damaged_batch_over_two_parts_is_refused() {
    let leader_dir = tempfile::tempdir().unwrap();
    let mut bytes = leader_bytes(leader_dir.path());
    let last = bytes.len() - 1;
    bytes[last] ^= 0x5a;
    let (_c, clock) = clock(0);
    for cuts in [
        vec![last - 500],
        vec![last - 1],
        (1..bytes.len()).step_by(9).collect(),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), LogConfig::default(), true, &clock);
        let parts = split(&bytes, &cuts);
        assert!(matches!(
            log.append_as_follower_parts(&parts, BatchCrcs::Check),
            Err(LogError::CorruptMessage(_))
        ));
        assert_eq!(
            log.log_end_offset(),
            0,
            "nothing of a refused set is written"
        );
        // Torn: the set ends inside its last batch.
        let short = &bytes[..last];
        assert!(matches!(
            log.append_as_follower_parts(&split(short, &[10, 100]), BatchCrcs::AlreadyVerified),
            Err(LogError::CorruptMessage(_))
        ));
        assert_eq!(log.log_end_offset(), 0);
    }
}

#[test]
fn more_parts_than_one_pwritev_takes_are_all_written() {
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::create(dir.path().join("f")).unwrap();
    let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let cuts: Vec<usize> = (1..data.len()).step_by(2).collect();
    let parts = split(&data, &cuts);
    assert!(parts.len() > IOV_MAX * 2);
    write_all_parts_at(&file, &parts, 7).unwrap();
    let written = std::fs::read(dir.path().join("f")).unwrap();
    assert_eq!(&written[..7], &[0u8; 7]);
    assert_eq!(&written[7..], &data[..]);
}

/// The first header is read across the parts it straddles; fewer bytes than a header are none.
#[test]
fn the_first_batch_header_is_read_across_parts() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = leader_bytes(dir.path());
    let whole = BatchHeader::parse(&bytes).unwrap();
    for cuts in [&[][..], &[5][..], &[12, 14][..], &[60][..]] {
        let parts = split(&bytes, cuts);
        assert_eq!(first_batch_header(&parts), Some(whole), "cut at {cuts:?}");
    }
    assert_eq!(
        first_batch_header(&split(&bytes[..HEADER_SIZE - 1], &[7])),
        None
    );
}
