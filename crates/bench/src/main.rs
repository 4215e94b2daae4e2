//! `ferry-bench`: a load generator for ferry (or any Kafka broker) built on librdkafka.
//!
//! Subcommands:
//! - `produce`: throughput and enqueue→delivery-report latency of a `BaseProducer`;
//! - `consume`: throughput of a `BaseConsumer` reading all partitions from the beginning;
//! - `e2e`: end-to-end latency (send → consumer receive) at a fixed rate, in one process;
//! - `wire-produce` and `wire-consume`: bare Produce and Fetch requests with almost no client
//!   work, to measure the broker alone.
//!
//! See docs/benchmarks.md for how the published numbers were taken.

mod stats;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::{Args, Parser, Subcommand};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::{ClientConfig, FromClientConfigAndContext, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};

use stats::{fmt_ms, mb, LatencyHistogram};

#[derive(Parser, Debug)]
#[command(
    name = "ferry-bench",
    version,
    about = "Kafka load generator (librdkafka) for ferry"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Produce records as fast as possible (or at --rate) and report throughput and latency.
    Produce(ProduceArgs),
    /// Read records from the beginning of every partition and report throughput.
    Consume(ConsumeArgs),
    /// Produce at a fixed rate and measure send→receive latency with an in-process consumer.
    E2e(E2eArgs),
    /// Send pre-encoded batches over a bare pipelined connection: the broker's own capacity.
    WireProduce(WireProduceArgs),
    /// Fetch every partition over a bare connection, reading only batch headers: the broker's
    /// own capacity to serve.
    WireConsume(WireConsumeArgs),
}

#[derive(Args, Debug, Clone)]
struct WireConsumeArgs {
    #[command(flatten)]
    common: Common,
    /// Records to read before stopping.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// The response limit of each Fetch (librdkafka's `fetch.max.bytes` default).
    #[arg(long, default_value_t = 52_428_800)]
    fetch_max_bytes: i32,
    /// The per-partition limit of each Fetch (`max.partition.fetch.bytes`).
    #[arg(long, default_value_t = 1_048_576)]
    max_partition_fetch_bytes: i32,
    /// How long the broker may hold a Fetch that finds no data (`fetch.wait.max.ms`).
    #[arg(long, default_value_t = 500)]
    fetch_wait_max_ms: i32,
}

#[derive(Args, Debug, Clone)]
struct WireProduceArgs {
    #[command(flatten)]
    common: Common,
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    #[arg(long, default_value_t = 1600)]
    record_size: usize,
    #[arg(long, default_value_t = 32768)]
    batch_size: usize,
    /// Total bytes of record batches to send.
    #[arg(long, default_value_t = 4_000_000_000)]
    bytes: u64,
    /// Produce requests in flight on the connection.
    #[arg(long, default_value_t = 16)]
    in_flight: usize,
    /// 1 or all.
    #[arg(long, default_value = "1")]
    acks: String,
}

#[derive(Args, Debug, Clone)]
struct Common {
    /// Bootstrap broker, host:port.
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// Topic to use.
    #[arg(long, default_value = "ferry-bench")]
    topic: String,
    /// Extra librdkafka property KEY=VALUE (repeatable), applied last.
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    extra: Vec<String>,
    /// librdkafka `debug` contexts (e.g. `protocol,broker,fetch`); logs go to stderr.
    #[arg(long)]
    debug: Option<String>,
    /// Replication factor of the topic when it has to be created.
    #[arg(long, default_value_t = 1)]
    replication_factor: i32,
    /// Broker ids holding every partition of the topic when it has to be created, e.g. `1,2,3`
    /// (the first is the preferred leader); replaces --replication-factor. Pins the leader, so
    /// that a consumer with another `client.rack` reads from a follower.
    #[arg(long, value_name = "ID,ID,...", value_delimiter = ',')]
    replica_assignment: Vec<i32>,
    /// Topic config KEY=VALUE for the topic when it has to be created (repeatable), e.g.
    /// `remote.wal.enable=true`.
    #[arg(long = "topic-config", value_name = "KEY=VALUE")]
    topic_configs: Vec<String>,
}

#[derive(Args, Debug, Clone)]
struct ProducerOpts {
    /// Partitions of the topic when it has to be created.
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// Value size in bytes (no key).
    #[arg(long, default_value_t = 1600)]
    record_size: usize,
    /// `acks`: 0, 1 or all.
    #[arg(long, default_value = "1")]
    acks: String,
    /// `batch.size` in bytes.
    #[arg(long, default_value_t = 32768)]
    batch_size: u32,
    /// `linger.ms`.
    #[arg(long, default_value_t = 5)]
    linger_ms: u32,
    /// `compression.type`: none, gzip, snappy, lz4, zstd (as compiled into librdkafka).
    #[arg(long, default_value = "none")]
    compression: String,
}

#[derive(Args, Debug)]
struct ProduceArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    producer: ProducerOpts,
    /// Number of records to send.
    #[arg(long, default_value_t = 2_000_000)]
    records: u64,
    /// Fixed send rate in records per second (default: as fast as possible).
    #[arg(long)]
    rate: Option<f64>,
    /// Produce in transactions of this `transactional.id` (committed every
    /// --commit-interval-ms); implies idempotence.
    #[arg(long)]
    transactional_id: Option<String>,
    /// How often a transactional run commits its transaction.
    #[arg(long, default_value_t = 100)]
    commit_interval_ms: u64,
}

#[derive(Args, Debug)]
struct ConsumeArgs {
    #[command(flatten)]
    common: Common,
    /// Number of records to read before stopping.
    #[arg(long, default_value_t = 2_000_000)]
    records: u64,
    /// Give up when no record arrives for this many seconds.
    #[arg(long, default_value_t = 10)]
    idle_timeout_secs: u64,
}

#[derive(Args, Debug)]
struct E2eArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    producer: ProducerOpts,
    /// Send rate in records per second.
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    /// Duration of the measured part of the run.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Records sent in this first part of the run are not counted (connection set-up, warm-up).
    #[arg(long, default_value_t = 1)]
    warmup_secs: u64,
}

mod wire;
mod wire_consume;

fn wire_consume(a: WireConsumeArgs) -> Result<()> {
    let mut cfg = base_config(&a.common)?;
    apply_extra(&mut cfg, &a.common)?;
    let admin: AdminClient<DefaultClientContext> = cfg.create().context("creating admin client")?;
    let partitions = partition_count(admin.inner(), &a.common.topic)?;
    wire_consume::run(wire_consume::WireConsumeArgs {
        bootstrap: a.common.bootstrap.clone(),
        topic: a.common.topic.clone(),
        partitions,
        records: a.records,
        max_bytes: a.fetch_max_bytes,
        partition_max_bytes: a.max_partition_fetch_bytes,
        max_wait_ms: a.fetch_wait_max_ms,
    })
}

fn wire_produce(a: WireProduceArgs) -> Result<()> {
    ensure_topic(&a.common, a.partitions)?;
    let acks = match a.acks.as_str() {
        "all" | "-1" => -1,
        "1" => 1,
        other => anyhow::bail!("--acks must be 1 or all, got {other}"),
    };
    wire::run(wire::WireArgs {
        bootstrap: a.common.bootstrap.clone(),
        topic: a.common.topic.clone(),
        partitions: a.partitions,
        record_size: a.record_size,
        batch_size: a.batch_size,
        total_bytes: a.bytes,
        in_flight: a.in_flight,
        acks,
    })
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Produce(a) => produce(a),
        Command::Consume(a) => consume(a),
        Command::E2e(a) => e2e(a),
        Command::WireProduce(a) => wire_produce(a),
        Command::WireConsume(a) => wire_consume(a),
    };
    if let Err(e) = result {
        eprintln!("ferry-bench: error: {e:#}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------------------------
// librdkafka plumbing

/// Prints librdkafka's log lines and client errors to stderr, counting the errors.
#[derive(Default)]
struct LogCtx {
    errors: AtomicU64,
}

impl LogCtx {
    fn client_log(&self, level: RDKafkaLogLevel, fac: &str, msg: &str) {
        eprintln!("rdkafka {level:?} {fac}: {msg}");
    }
    fn client_error(&self, error: KafkaError, reason: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        eprintln!("rdkafka error: {error}: {reason}");
    }
}

fn base_config(common: &Common) -> Result<ClientConfig> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &common.bootstrap);
    cfg.set("client.id", "ferry-bench");
    match &common.debug {
        Some(d) => {
            cfg.set("debug", d);
            cfg.set_log_level(RDKafkaLogLevel::Debug);
        }
        None => {
            cfg.set_log_level(RDKafkaLogLevel::Warning);
        }
    }
    Ok(cfg)
}

fn apply_extra(cfg: &mut ClientConfig, common: &Common) -> Result<()> {
    for kv in &common.extra {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| anyhow!("-X expects KEY=VALUE, got {kv:?}"))?;
        cfg.set(k.trim(), v.trim());
    }
    Ok(())
}

fn producer_config(common: &Common, p: &ProducerOpts) -> Result<ClientConfig> {
    let acks = match p.acks.as_str() {
        "0" | "1" | "all" | "-1" => p.acks.as_str(),
        other => bail!("--acks must be 0, 1 or all, got {other:?}"),
    };
    let mut cfg = base_config(common)?;
    cfg.set("acks", acks)
        .set("batch.size", p.batch_size.to_string())
        .set("linger.ms", p.linger_ms.to_string())
        .set("compression.type", &p.compression)
        .set("enable.idempotence", "false")
        // queue.buffering.max.{messages,kbytes} stay at librdkafka's defaults (100000, 1 GiB):
        // a run at full speed keeps that queue full, so the enqueue→delivery latency it reports
        // is mostly time spent waiting in it.
        .set("message.timeout.ms", "60000");
    apply_extra(&mut cfg, common)?;
    Ok(cfg)
}

fn consumer_config(common: &Common) -> Result<ClientConfig> {
    let mut cfg = base_config(common)?;
    cfg.set("group.id", "ferry-bench")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest");
    apply_extra(&mut cfg, common)?;
    Ok(cfg)
}

/// Creates `topic` with `partitions` partitions unless it exists; returns its partition count.
fn ensure_topic(common: &Common, partitions: i32) -> Result<i32> {
    let mut cfg = base_config(common)?;
    apply_extra(&mut cfg, common)?;
    let admin: AdminClient<DefaultClientContext> = cfg.create().context("creating admin client")?;
    let assignment: Vec<&[i32]> = (0..partitions)
        .map(|_| common.replica_assignment.as_slice())
        .collect();
    let replication = if common.replica_assignment.is_empty() {
        TopicReplication::Fixed(common.replication_factor)
    } else {
        TopicReplication::Variable(&assignment)
    };
    let mut new = NewTopic::new(&common.topic, partitions, replication);
    for kv in &common.topic_configs {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| anyhow!("--topic-config {kv}: expected KEY=VALUE"))?;
        new = new.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = futures_executor::block_on(admin.create_topics([&new], &opts))
        .context("CreateTopics request")?;
    for r in results {
        match r {
            Ok(name) => eprintln!("created topic {name} with {partitions} partitions"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => bail!("creating topic {name}: {code}"),
        }
    }
    let n = partition_count(admin.inner(), &common.topic)?;
    if n != partitions {
        eprintln!(
            "note: topic {} exists with {n} partitions (asked for {partitions})",
            common.topic
        );
    }
    Ok(n)
}

fn partition_count<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
) -> Result<i32> {
    let md = client
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .with_context(|| format!("metadata for {topic}"))?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(|| anyhow!("topic {topic} missing from metadata"))?;
    if let Some(err) = t.error() {
        bail!("metadata for {topic}: {:?}", RDKafkaErrorCode::from(err));
    }
    let n = t.partitions().len();
    if n == 0 {
        bail!("topic {topic} has no partitions");
    }
    i32::try_from(n).context("partition count")
}

fn nanos_since_epoch() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A value of `size` bytes: a repeating non-trivial pattern (the first 8 bytes may be replaced
/// by a send timestamp).
fn make_payload(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i * 31 % 251) as u8).collect()
}

/// Sleeps until `deadline`. No busy-waiting: on a small machine a spinning client would take CPU
/// from the broker it measures. The timer's overshoot (tens of µs) only shifts send times, and
/// latencies are measured from the actual send time.
fn pace_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        thread::sleep(deadline - now);
    }
}

// ---------------------------------------------------------------------------------------------
// produce

struct ProduceCtx {
    log: LogCtx,
    start: Instant,
    hist: Mutex<LatencyHistogram>,
    delivered: AtomicU64,
    failed: AtomicU64,
}

impl ClientContext for ProduceCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, msg: &str) {
        self.log.client_log(level, fac, msg);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        self.log.client_error(error, reason);
    }
}

impl ProducerContext for ProduceCtx {
    /// Nanoseconds since `start` at which the record was enqueued.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, enqueued_at: usize) {
        match result {
            Ok(_) => {
                let now = self.start.elapsed().as_nanos() as u64;
                let lat = now.saturating_sub(enqueued_at as u64);
                if let Ok(mut h) = self.hist.lock() {
                    h.record(lat);
                }
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                let n = self.failed.fetch_add(1, Ordering::Relaxed);
                if n < 5 {
                    eprintln!("delivery failed: {e}");
                }
            }
        }
    }
}

/// Starts the thread that serves delivery reports (and client errors) of `producer` until the
/// returned flag is set.
fn spawn_poller(
    producer: &Arc<BaseProducer<ProduceCtx>>,
) -> Result<(Arc<AtomicBool>, thread::JoinHandle<()>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let handle = {
        let producer = Arc::clone(producer);
        let stop = Arc::clone(&stop);
        thread::Builder::new()
            .name("delivery-poll".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    producer.poll(Duration::from_millis(20));
                }
            })
            .context("spawning poll thread")?
    };
    Ok((stop, handle))
}

/// Commits the open transaction with librdkafka's own call, which flushes the queue first.
///
/// rust-rdkafka's `commit_transaction` flushes on its own beforehand by polling in 100 ms
/// steps; since this bench serves delivery reports on its poll thread, each of those polls
/// waits out its whole 100 ms. That left the pipeline idle for 100-200 ms at every commit, a
/// cost of the wrapper that no Kafka client pays (Java's producer and confluent-kafka-python
/// call the commit directly).
fn commit_transaction<C: ProducerContext>(
    producer: &BaseProducer<C>,
    timeout: Duration,
) -> Result<()> {
    use rdkafka::bindings as rd;
    let deadline = Instant::now() + timeout;
    // Flush in 1 ms steps first. librdkafka's commit flushes by polling in 10 ms steps, and
    // when the poll thread serves the last delivery report the flushing call sleeps out its
    // step: up to 10 ms of idle pipeline per commit. A flush call also sends lingering
    // batches at once, as the commit's own flush would.
    loop {
        // SAFETY: the handle is alive for as long as `producer` is borrowed.
        let flushed = unsafe { rd::rd_kafka_flush(producer.client().native_ptr(), 1) };
        if flushed == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            break;
        }
        if Instant::now() >= deadline {
            bail!(
                "commit_transaction: flush timed out with {} messages queued",
                producer.in_flight_count()
            );
        }
    }
    let timeout_ms = i32::try_from(
        deadline
            .saturating_duration_since(Instant::now())
            .as_millis(),
    )
    .unwrap_or(i32::MAX);
    // SAFETY: the handle is alive for as long as `producer` is borrowed.
    let error =
        unsafe { rd::rd_kafka_commit_transaction(producer.client().native_ptr(), timeout_ms) };
    if error.is_null() {
        return Ok(());
    }
    // SAFETY: `error` is a valid error object that we own; its string lives until it is
    // destroyed, and it is copied out before that.
    let message = unsafe {
        let text = std::ffi::CStr::from_ptr(rd::rd_kafka_error_string(error))
            .to_string_lossy()
            .into_owned();
        rd::rd_kafka_error_destroy(error);
        text
    };
    bail!("commit_transaction: {message}")
}

fn produce(a: ProduceArgs) -> Result<()> {
    if a.producer.record_size < 8 {
        bail!("--record-size must be at least 8");
    }
    if let Some(r) = a.rate {
        if !(r > 0.0 && r.is_finite()) {
            bail!("--rate must be positive");
        }
    }
    let partitions = ensure_topic(&a.common, a.producer.partitions)?;
    let mut cfg = producer_config(&a.common, &a.producer)?;
    if let Some(id) = &a.transactional_id {
        cfg.set("transactional.id", id);
    }
    let start = Instant::now();
    let ctx = ProduceCtx {
        log: LogCtx::default(),
        start,
        hist: Mutex::new(LatencyHistogram::new()?),
        delivered: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    };
    let producer: Arc<BaseProducer<ProduceCtx>> =
        Arc::new(BaseProducer::from_config_and_context(&cfg, ctx).context("creating producer")?);

    // Warm the connection (metadata, broker connection) before the clock starts.
    producer
        .client()
        .fetch_metadata(Some(&a.common.topic), Duration::from_secs(10))
        .context("producer metadata")?;

    let transactional = a.transactional_id.is_some();
    let txn_timeout = Duration::from_secs(60);
    if transactional {
        producer
            .init_transactions(txn_timeout)
            .context("init_transactions")?;
        producer.begin_transaction().context("begin_transaction")?;
    }
    let (stop, poller) = spawn_poller(&producer)?;

    let mut payload = make_payload(a.producer.record_size);
    let topic = a.common.topic.as_str();
    let t0 = Instant::now();
    let mut queue_full_waits = 0u64;
    let commit_interval = Duration::from_millis(a.commit_interval_ms.max(1));
    let mut last_commit = Instant::now();
    let mut commits = 0u64;
    // Wall time spent inside commit_transaction (flush + EndTxn), to tell the client's drain
    // from the broker's answer when a transactional run is slower than an idempotent one.
    let mut commit_times: Vec<Duration> = Vec::new();
    for i in 0..a.records {
        if transactional && last_commit.elapsed() >= commit_interval {
            let committing = Instant::now();
            commit_transaction(&producer, txn_timeout)?;
            commit_times.push(committing.elapsed());
            producer.begin_transaction().context("begin_transaction")?;
            last_commit = Instant::now();
            commits += 1;
        }
        if let Some(rate) = a.rate {
            pace_until(t0 + Duration::from_secs_f64(i as f64 / rate));
        }
        payload[..8].copy_from_slice(&nanos_since_epoch().to_le_bytes());
        let mut record: BaseRecord<'_, (), [u8], usize> =
            BaseRecord::with_opaque_to(topic, start.elapsed().as_nanos() as usize)
                .payload(&payload[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    queue_full_waits += 1;
                    thread::sleep(Duration::from_micros(200));
                    record = r.delivery_opaque(start.elapsed().as_nanos() as usize);
                }
                Err((e, _)) => {
                    stop.store(true, Ordering::Relaxed);
                    return Err(e).context("enqueueing record");
                }
            }
        }
    }
    let enqueue_secs = t0.elapsed().as_secs_f64();
    if transactional {
        commit_transaction(&producer, txn_timeout)?;
        commits += 1;
        commit_times.sort();
        let total: Duration = commit_times.iter().sum();
        let at = |q: f64| {
            commit_times
                .get(((commit_times.len() as f64 - 1.0) * q).round() as usize)
                .map_or(0.0, |d| d.as_secs_f64() * 1e3)
        };
        println!(
            "transactions committed: {commits}; in commit_transaction {:.2} s, \
             p50 {:.1} ms, max {:.1} ms",
            total.as_secs_f64(),
            at(0.5),
            at(1.0)
        );
    }
    let flushed = producer.flush(Duration::from_secs(120));
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    poller
        .join()
        .map_err(|_| anyhow!("delivery poll thread panicked"))?;
    // Serve any report that arrived between the last poll and the stop.
    producer.poll(Duration::from_millis(0));
    flushed.context("flushing producer")?;

    let ctx = producer.context();
    let delivered = ctx.delivered.load(Ordering::Relaxed);
    let failed = ctx.failed.load(Ordering::Relaxed);
    let bytes = delivered as f64 * a.producer.record_size as f64;
    let h = ctx
        .hist
        .lock()
        .map_err(|_| anyhow!("latency histogram lock poisoned"))?;
    println!(
        "produce: {delivered} records, {:.1} MB in {secs:.1} s = {:.1} MB/s, {:.0} msgs/s, \
         latency p50 {} ms p99 {} ms max {} ms \
         (acks={} batch.size={} linger.ms={} compression={} partitions={partitions} record {} B)",
        mb(bytes),
        mb(bytes) / secs,
        delivered as f64 / secs,
        fmt_ms(h.quantile(0.50)),
        fmt_ms(h.quantile(0.99)),
        fmt_ms(h.max()),
        a.producer.acks,
        a.producer.batch_size,
        a.producer.linger_ms,
        a.producer.compression,
        a.producer.record_size,
    );
    eprintln!(
        "produce: enqueue phase {enqueue_secs:.2} s, queue-full waits {queue_full_waits}, \
         failed deliveries {failed}, client errors {}",
        ctx.log.errors.load(Ordering::Relaxed)
    );
    if failed > 0 {
        bail!("{failed} records were not delivered");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// consume

struct ConsumeCtx {
    log: LogCtx,
}

impl ClientContext for ConsumeCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, msg: &str) {
        self.log.client_log(level, fac, msg);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        self.log.client_error(error, reason);
    }
}

impl ConsumerContext for ConsumeCtx {}

fn new_consumer(common: &Common) -> Result<BaseConsumer<ConsumeCtx>> {
    let cfg = consumer_config(common)?;
    let ctx = ConsumeCtx {
        log: LogCtx::default(),
    };
    BaseConsumer::from_config_and_context(&cfg, ctx).context("creating consumer")
}

fn consume(a: ConsumeArgs) -> Result<()> {
    let consumer = new_consumer(&a.common)?;
    let topic = a.common.topic.as_str();
    let partitions = partition_count(consumer.client(), topic)?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .context("building assignment")?;
    }
    consumer.assign(&tpl).context("assign")?;

    let idle = Duration::from_secs(a.idle_timeout_secs);
    let mut count = 0u64;
    let mut bytes = 0u64;
    let mut first: Option<Instant> = None;
    let mut last_progress = Instant::now();
    let assigned_at = Instant::now();
    while count < a.records {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                if first.is_none() {
                    first = Some(Instant::now());
                }
                count += 1;
                bytes += m.payload_len() as u64;
                last_progress = Instant::now();
            }
            Some(Err(e)) => {
                eprintln!("consume error: {e}");
            }
            None => {
                if last_progress.elapsed() > idle {
                    eprintln!("consume: no record for {} s, stopping", idle.as_secs());
                    break;
                }
            }
        }
    }
    let end = Instant::now();
    let Some(first) = first else {
        bail!("no record consumed from {topic}");
    };
    let secs = (end - first).as_secs_f64().max(1e-9);
    println!(
        "consume: {count} records, {:.1} MB in {secs:.1} s = {:.1} MB/s, {:.0} msgs/s \
         (partitions={partitions}; first record {:.0} ms after assign)",
        mb(bytes as f64),
        mb(bytes as f64) / secs,
        count as f64 / secs,
        (first - assigned_at).as_secs_f64() * 1000.0,
    );
    eprintln!(
        "consume: client errors {}",
        consumer.context().log.errors.load(Ordering::Relaxed)
    );
    if count < a.records {
        bail!("only {count} of {} records consumed", a.records);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// e2e

fn e2e(a: E2eArgs) -> Result<()> {
    if a.producer.record_size < 8 {
        bail!("--record-size must be at least 8");
    }
    if !(a.rate > 0.0 && a.rate.is_finite()) {
        bail!("--rate must be positive");
    }
    let partitions = ensure_topic(&a.common, a.producer.partitions)?;
    let topic = a.common.topic.clone();

    // Consumer: start at the current end of every partition so only this run's records count.
    let consumer = new_consumer(&a.common)?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let (_, high) = consumer
            .fetch_watermarks(&topic, p, Duration::from_secs(10))
            .with_context(|| format!("watermarks of {topic}-{p}"))?;
        tpl.add_partition_offset(&topic, p, Offset::Offset(high))
            .context("building assignment")?;
    }
    consumer.assign(&tpl).context("assign")?;
    // Let the consumer connect and issue its first fetches.
    let ready = Instant::now();
    while ready.elapsed() < Duration::from_millis(500) {
        if let Some(Err(e)) = consumer.poll(Duration::from_millis(50)) {
            eprintln!("consume error: {e}");
        }
    }

    let cfg = producer_config(&a.common, &a.producer)?;
    let ctx = ProduceCtx {
        log: LogCtx::default(),
        start: Instant::now(),
        hist: Mutex::new(LatencyHistogram::new()?),
        delivered: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    };
    let producer: Arc<BaseProducer<ProduceCtx>> =
        Arc::new(BaseProducer::from_config_and_context(&cfg, ctx).context("creating producer")?);
    producer
        .client()
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .context("producer metadata")?;
    let (stop, poller) = spawn_poller(&producer)?;

    let warmup = Duration::from_secs(a.warmup_secs);
    let total = warmup + Duration::from_secs(a.seconds);
    let to_send = (total.as_secs_f64() * a.rate).round() as u64;
    let record_size = a.producer.record_size;
    let rate = a.rate;
    let send_start_nanos = nanos_since_epoch();
    let measure_from = send_start_nanos + warmup.as_nanos() as u64;

    let sender = thread::Builder::new()
        .name("e2e-producer".into())
        .spawn(move || -> Result<Arc<BaseProducer<ProduceCtx>>> {
            let mut payload = make_payload(record_size);
            let t0 = Instant::now();
            for i in 0..to_send {
                pace_until(t0 + Duration::from_secs_f64(i as f64 / rate));
                payload[..8].copy_from_slice(&nanos_since_epoch().to_le_bytes());
                let opaque = producer.context().start.elapsed().as_nanos() as usize;
                let record: BaseRecord<'_, (), [u8], usize> =
                    BaseRecord::with_opaque_to(&topic, opaque).payload(&payload[..]);
                if let Err((e, _)) = producer.send(record) {
                    return Err(e).context("enqueueing record");
                }
            }
            producer
                .flush(Duration::from_secs(30))
                .context("flushing producer")?;
            Ok(producer)
        })
        .context("spawning producer thread")?;

    let mut hist = LatencyHistogram::new()?;
    let mut received = 0u64;
    let mut last_progress = Instant::now();
    while received < to_send {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let now = nanos_since_epoch();
                received += 1;
                last_progress = Instant::now();
                let Some(ts) = m.payload().and_then(|p| p.get(..8)) else {
                    continue;
                };
                let mut b = [0u8; 8];
                b.copy_from_slice(ts);
                let sent = u64::from_le_bytes(b);
                if sent >= measure_from {
                    hist.record(now.saturating_sub(sent));
                }
            }
            Some(Err(e)) => eprintln!("consume error: {e}"),
            None => {
                if last_progress.elapsed() > Duration::from_secs(10) && sender.is_finished() {
                    eprintln!("e2e: no record for 10 s after the producer finished, stopping");
                    break;
                }
            }
        }
    }
    let sent = sender
        .join()
        .map_err(|_| anyhow!("producer thread panicked"));
    stop.store(true, Ordering::Relaxed);
    poller
        .join()
        .map_err(|_| anyhow!("delivery poll thread panicked"))?;
    let producer = sent??;
    producer.poll(Duration::ZERO);
    let pctx = producer.context();
    let failed = pctx.failed.load(Ordering::Relaxed);
    let ph = pctx
        .hist
        .lock()
        .map_err(|_| anyhow!("latency histogram lock poisoned"))?;
    println!(
        "e2e: {} records measured at {rate:.0} msgs/s ({} s after {} s warm-up), end-to-end latency \
         p50 {} ms p99 {} ms p99.9 {} ms max {} ms; produce ack latency p50 {} ms p99 {} ms \
         (acks={} linger.ms={} record {} B partitions={partitions})",
        hist.len(),
        a.seconds,
        a.warmup_secs,
        fmt_ms(hist.quantile(0.50)),
        fmt_ms(hist.quantile(0.99)),
        fmt_ms(hist.quantile(0.999)),
        fmt_ms(hist.max()),
        fmt_ms(ph.quantile(0.50)),
        fmt_ms(ph.quantile(0.99)),
        a.producer.acks,
        a.producer.linger_ms,
        record_size,
    );
    eprintln!(
        "e2e: sent {to_send}, received {received}, failed deliveries {failed}, client errors \
         producer {} consumer {}",
        pctx.log.errors.load(Ordering::Relaxed),
        consumer.context().log.errors.load(Ordering::Relaxed)
    );
    if received < to_send || failed > 0 {
        bail!("lost records: sent {to_send}, received {received}, failed {failed}");
    }
    Ok(())
}
