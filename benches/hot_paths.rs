//! Micro-benchmarks of the hot paths (`cargo bench -p ferry-benches`; figures in
//! `docs/benchmarks.md`): what a produce request costs the log (batch validation, the leader
//! append with offset assignment), what a fetch costs it (the read path), and what the remote
//! WAL adds (building an object of many slices, parsing and slicing it, metadata records).
//!
//! Figures are throughput per call on this machine; compare runs on the same machine only.

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use ferry_common::{system_clock, TopicPartition};
use ferry_log::batch::validate_produced;
use ferry_log::{LogConfig, PartitionLog};
use ferry_test_support::{Batches, Keys};
use ferry_wal::format::{ObjectBuilder, ObjectReader, SliceInfo};
use ferry_wal::metadata::{WalMetadataRecord, WalSliceMetadata};
use uuid::Uuid;

/// A produce batch as librdkafka sends it in the benchmarks: 20 records of 1.6 KB (32 KB).
fn produce_batch() -> Bytes {
    Batches::of(20, |_| vec![b'x'; 1600])
        .keys(Keys::Indexed)
        .producer(1, 0, 0)
        .encode()
}

fn open_log(dir: &std::path::Path) -> PartitionLog {
    PartitionLog::open(
        dir.to_path_buf(),
        TopicPartition::new("bench", 0),
        LogConfig::default(),
        true,
        system_clock(),
    )
    .expect("open a log in a temporary directory")
}

fn log_paths(c: &mut Criterion) {
    let batch = produce_batch();
    let mut g = c.benchmark_group("log");
    g.throughput(Throughput::Bytes(batch.len() as u64));
    g.bench_function("validate a 32 KB produce batch", |b| {
        b.iter(|| validate_produced(&batch, 1 << 20).expect("valid batch"))
    });

    // Appends go to the page cache; each sample starts from an empty log so that the disk
    // holds at most one sample's appends.
    let dir = tempfile::tempdir().expect("temporary directory");
    let log = open_log(dir.path());
    let plain = Batches::of(20, |_| vec![b'x'; 1600]).encode();
    g.measurement_time(Duration::from_secs(3)).sample_size(20);
    g.bench_function(
        "leader append of a 32 KB batch (offsets, epoch, index)",
        |b| {
            b.iter_custom(|iters| {
                log.truncate_fully_and_start_at(0).expect("empty the log");
                let start = Instant::now();
                for _ in 0..iters {
                    log.append_as_leader(&plain, 0).expect("append");
                }
                start.elapsed()
            })
        },
    );

    // The read path of a fetch: 1 MB from a log of 64 MB, at spread offsets.
    let read_dir = tempfile::tempdir().expect("temporary directory");
    let read_log = open_log(read_dir.path());
    for _ in 0..2_000 {
        read_log.append_as_leader(&plain, 0).expect("append");
    }
    let end = read_log.log_end_offset();
    g.throughput(Throughput::Bytes(1 << 20));
    let mut at = 0i64;
    g.bench_function("fetch read of 1 MB", |b| {
        b.iter(|| {
            at = (at + 997) % (end - 1_000);
            read_log
                .read(at, 1 << 20, end, true)
                .expect("read inside the log")
        })
    });
    // What a leader adds to a replica fetch of 1 MB: a CRC-32C check of every batch
    // (docs/reliability.md, Corruption).
    let fetched = read_log
        .read(0, 1 << 20, end, true)
        .expect("read inside the log")
        .records;
    g.bench_function("CRC check of a 1 MB replica fetch", |b| {
        b.iter(|| assert!(ferry_log::scrub::first_corrupt_batch(&fetched).is_none()))
    });
    g.finish();
}

fn wal_paths(c: &mut Criterion) {
    // One object as the uploader cuts it at full load: 32 slices of 32 KB (12 partitions).
    let slice = produce_batch();
    let infos: Vec<SliceInfo> = (0..32)
        .map(|i| SliceInfo {
            topic_id: Uuid::from_u128(7),
            partition: i % 12,
            base_offset: i64::from(i) * 20,
            last_offset: i64::from(i) * 20 + 19,
            leader_epoch: 0,
        })
        .collect();
    let build = || {
        let mut builder = ObjectBuilder::with_capacity(infos.len());
        for info in &infos {
            builder
                .append_chunks(*info, std::slice::from_ref(&slice))
                .expect("valid slice");
        }
        // The uploader's path: the parts and their CRC, as the store's PUT takes them.
        builder.finish_body().expect("object with slices")
    };
    let object = build().to_bytes();
    let mut g = c.benchmark_group("wal");
    g.throughput(Throughput::Bytes(object.len() as u64));
    g.bench_function("build an object of 32 slices (1 MB)", |b| b.iter(build));
    g.bench_function("parse an object and check every slice", |b| {
        b.iter(|| {
            let reader = ObjectReader::parse(&object).expect("valid object");
            for i in 0..reader.entries().len() {
                reader.slice(i).expect("slice passes its CRC");
            }
        })
    });

    let meta = WalSliceMetadata {
        bucket: "ferry-wal-az1--use1-az4--x-s3".into(),
        object_key: "wal/1/00000001764633600123-00000000000000004711".into(),
        byte_position: 4096,
        byte_length: 32_768,
        topic_id: Uuid::from_u128(7),
        partition: 3,
        base_offset: 1_000_000,
        last_offset: 1_000_019,
        leader_epoch: 4,
        slice_crc: 0x1234_5678,
        object_size: 1 << 20,
        uploader_broker_id: 1,
        upload_time_ms: 1_764_633_600_123,
    };
    g.throughput(Throughput::Elements(1));
    g.bench_function("metadata record: encode and decode", |b| {
        b.iter_batched(
            || meta.clone(),
            |m| {
                let record = WalMetadataRecord::upsert(&m).expect("encodable");
                WalMetadataRecord::decode(&record.key, record.value.as_deref()).expect("decodable")
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, log_paths, wal_paths);
criterion_main!(benches);
