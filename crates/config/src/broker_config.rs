//! Broker configuration: one TOML file whose keys are the names Kafka operators know.
//!
//! Keys may be written quoted (`"log.dirs" = "..."`) or as TOML dotted keys (`log.dirs = "..."`,
//! which TOML reads as nested tables); both flatten to the same dotted name. Every key ferry
//! knows is declared once in [`BROKER_CONFIGS`] with its type, default and documentation, which
//! `docs/configuration.md` mirrors (a test keeps the two in step). An unknown key or a value of
//! the wrong type stops start-up with an error naming the key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ferry_replication::replica_selector::ReplicaSelector;

pub use crate::dynamic::{ConfigSource, DynamicConfigs};

/// The type of a config value, as Kafka's `ConfigDef.Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean,
    Int,
    Long,
    String,
    List,
    Double,
    /// A secret (Kafka's `PASSWORD`): described as sensitive with no value, never logged.
    Password,
}

impl ConfigType {
    pub fn name(self) -> &'static str {
        match self {
            ConfigType::Boolean => "boolean",
            ConfigType::Int => "int",
            ConfigType::Long => "long",
            ConfigType::String => "string",
            ConfigType::List => "list",
            ConfigType::Double => "double",
            ConfigType::Password => "password",
        }
    }

    /// Whether values of this type are secrets (never returned by DescribeConfigs nor logged).
    pub fn is_sensitive(self) -> bool {
        self == ConfigType::Password
    }
}

/// One broker config key.
#[derive(Debug)]
pub struct ConfigDef {
    pub name: &'static str,
    pub ty: ConfigType,
    pub default: &'static str,
    pub doc: &'static str,
}

const fn def(
    name: &'static str,
    ty: ConfigType,
    default: &'static str,
    doc: &'static str,
) -> ConfigDef {
    ConfigDef {
        name,
        ty,
        default,
        doc,
    }
}

use ConfigType::{Boolean, Double, Int, List, Long};

/// Every broker-level key ferry accepts.
pub const BROKER_CONFIGS: &[ConfigDef] = &[
    def("node.id", Int, "1", "Id of this broker (and controller) in the cluster."),
    def("broker.rack", ConfigType::String, "", "Rack (availability zone) of this broker, e.g. `az1`. Empty: none."),
    def("process.roles", List, "broker,controller", "Roles of this node: `broker`, `controller` or both. Only `broker,controller` is supported yet."),
    def("controller.quorum.voters", List, "", "Voters of the controller quorum, `id@host:port,...` (KRaft format). Each voter's controller listens on its own `host:port` here, which must differ from its Kafka `listeners`. Empty: this node is its own single-voter quorum."),
    def("metadata.log.dir", ConfigType::String, "", "Directory of the controller's Raft log and snapshots. Empty: `__cluster_metadata` in the first of `log.dirs`."),
    def("metadata.log.reserve.bytes", Long, "16777216", "Disk space (ferry-specific) held back in the metadata log dir as a file of zeros. When partition data fills the disk the metadata log shares, a metadata write (deleting a topic or records, creating one) releases it and goes through; log dirs take appends again once the reserve fits back (it is restored first). 0: no reserve."),
    def("listeners", List, "PLAINTEXT://127.0.0.1:9092", "Kafka listeners this broker binds, `NAME://host:port,...`. Each name must be unique and appear in `listener.security.protocol.map`, each port too (port 0 picks a free port). An empty host binds every interface, `localhost` the loopback. A listener named in `controller.listener.names` is not bound here: the controller listens on its `controller.quorum.voters` address."),
    def("advertised.listeners", List, "", "Addresses given to clients, `NAME://host:port,...`, each name one of `listeners`. A listener not listed advertises its bound address (an empty or wildcard host: the bound IP; port 0: the bound port). Metadata, FindCoordinator and DescribeCluster answer each client with the addresses of the listener it connected on, leaving out brokers without that listener."),
    def("listener.security.protocol.map", List, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", "Security protocol of each listener name, `NAME:PROTOCOL,...`; the protocols are `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` and `SASL_SSL`."),
    def("inter.broker.listener.name", ConfigType::String, "", "Listener other brokers connect to (replica fetch, remote WAL metadata, transaction markers); it must be one of `listeners`. Empty: the listener named after `security.inter.broker.protocol`. Do not set both."),
    def("security.inter.broker.protocol", ConfigType::String, "PLAINTEXT", "Security protocol between brokers when `inter.broker.listener.name` is not set: the listener of that name is used."),
    def("controller.listener.names", List, "", "Listener names of the controller (KRaft). ferry's controller quorum listens on the `controller.quorum.voters` addresses with the protocol of the first name here: `PLAINTEXT` (also when empty) or `SSL`, which needs that listener's key store and trust store (`listener.name.<lowercase>.ssl.*` or `ssl.*`) and always requires client certificates between voters, whatever `ssl.client.auth` says; `SASL_PLAINTEXT` and `SASL_SSL` are refused. A listener named here may also appear in `listeners` (as Kafka configs have it), must then, when this node is a voter, have its voter port, and is not served as a Kafka listener. It may not be the inter-broker listener."),
    def("ssl.keystore.type", ConfigType::String, "PEM", "Format of the key store; only `PEM` is supported. Every `ssl.*` key may be set for one listener as `listener.name.<lowercase name>.ssl.*`, which wins over the plain key for that listener."),
    def("ssl.keystore.location", ConfigType::String, "", "PEM file holding this broker's private key and its certificate chain (leaf first), for `SSL` and `SASL_SSL` listeners and, on an SSL inter-broker listener, as client certificate towards other brokers. Re-read when it changes (checked every few seconds)."),
    def("ssl.keystore.certificate.chain", ConfigType::String, "", "The certificate chain as PEM text, instead of `ssl.keystore.location` (together with `ssl.keystore.key`)."),
    def("ssl.keystore.key", ConfigType::Password, "", "The private key as PEM text (PKCS#8, PKCS#1 or SEC1), instead of `ssl.keystore.location`."),
    def("ssl.key.password", ConfigType::Password, "", "Password of an encrypted private key. Encrypted keys are not supported: start-up stops with an error naming the key; decrypt it (`openssl pkcs8 -nocrypt`) instead."),
    def("ssl.truststore.type", ConfigType::String, "PEM", "Format of the trust store; only `PEM` is supported."),
    def("ssl.truststore.location", ConfigType::String, "", "PEM file of the CA certificates that client certificates (`ssl.client.auth`) and, on an SSL inter-broker listener, other brokers' certificates are verified against. Re-read when it changes."),
    def("ssl.truststore.certificates", ConfigType::String, "", "The trusted CA certificates as PEM text, instead of `ssl.truststore.location`."),
    def("ssl.client.auth", ConfigType::String, "none", "Client certificates on SSL listeners: `none`, `requested` (verified when given) or `required` (a client without one is refused). The subject of a verified certificate is passed to authentication as the connection's peer."),
    def("ssl.endpoint.identification.algorithm", ConfigType::String, "https", "How a broker checks another broker's certificate on an SSL inter-broker listener: `https` checks that it names the host connected to; empty checks only the chain."),
    def("ssl.principal.mapping.rules", ConfigType::String, "DEFAULT", "Rules turning a client certificate's subject into a principal, as Kafka's (applied by authentication)."),
    def("sasl.enabled.mechanisms", List, "GSSAPI", "SASL mechanisms served on `SASL_PLAINTEXT` and `SASL_SSL` listeners: `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`. Kafka's default `GSSAPI` (Kerberos) is not served, so a broker with a SASL listener must set this (or `listener.name.<listener>.sasl.enabled.mechanisms`); start-up stops with an error naming the mechanism otherwise."),
    def("sasl.mechanism.inter.broker.protocol", ConfigType::String, "GSSAPI", "SASL mechanism a broker logs in with towards other brokers when the inter-broker listener is `SASL_PLAINTEXT` or `SASL_SSL`; its login is the `username`/`password` of that listener's `listener.name.<listener>.<mechanism>.sasl.jaas.config`."),
    def("sasl.jaas.config", ConfigType::Password, "", "JAAS text of one listener's mechanism, set only as `listener.name.<lowercase listener>.<lowercase mechanism>.sasl.jaas.config`, as Kafka brokers have it. PLAIN: `org.apache.kafka.common.security.plain.PlainLoginModule required username=\"...\" password=\"...\" user_<name>=\"<password>\" ...;` (the users who may log in, and this broker's own login towards other brokers). SCRAM: `org.apache.kafka.common.security.scram.ScramLoginModule required username=\"...\" password=\"...\";` (only this broker's login: SCRAM users are stored in the controller quorum, managed with AlterUserScramCredentials)."),
    def("sasl.server.callback.handler.class", ConfigType::String, "", "Set only as `listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class`: Kafka's `org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler` (or its 3.x name under `.secured.`), which is what ferry does for OAUTHBEARER whether it is set or not. Other classes are refused at start-up."),
    def("sasl.oauthbearer.jwks.endpoint.url", ConfigType::String, "", "Where OAUTHBEARER's token signing keys are (a JWKS): a `file://` URL, re-read when the file changes. Required when OAUTHBEARER is enabled; HTTPS endpoints are not fetched by ferry (put the provider's JWKS in a file)."),
    def("sasl.oauthbearer.expected.audience", List, "", "Audiences a token's `aud` must include one of (KIP-768). Empty: not checked."),
    def("sasl.oauthbearer.expected.issuer", ConfigType::String, "", "The issuer a token's `iss` must be. Empty: not checked."),
    def("sasl.oauthbearer.sub.claim.name", ConfigType::String, "sub", "The token claim whose value is the principal's name (`User:<value>`)."),
    def("sasl.oauthbearer.clock.skew.seconds", Int, "30", "Allowed difference between the token issuer's clock and the broker's when checking `exp`, `nbf` and `iat`."),
    def("sasl.server.max.receive.size", Int, "524288", "Largest request frame accepted on a SASL listener before the client has authenticated; a larger one closes the connection."),
    def("max.connections", Int, "2147483647", "Most connections the broker serves at once over its listeners, the inter-broker listener excepted (other brokers always get in). At the limit a new connection waits, unread, until another closes. May be set per listener as `listener.name.<listener>.max.connections`, a limit of that listener's own."),
    def("max.connections.per.ip", Int, "2147483647", "Most connections from one IP address; one more is closed at once (logged, within a budget)."),
    def("max.connections.per.ip.overrides", List, "", "Per-address exceptions to `max.connections.per.ip`, `ip:count,...` (for example `10.0.0.7:1000`)."),
    def("connections.max.idle.ms", Long, "600000", "A connection that sends no request for this long is closed."),
    def("quota.window.num", Int, "11", "Number of samples client quotas are measured over (KIP-13): a client's rate is its usage over the last `quota.window.num` windows."),
    def("quota.window.size.seconds", Int, "1", "Length of one quota sample window, in seconds."),
    def("leader.replication.throttled.rate", Long, "9223372036854775807", "Bytes per second this broker sends, as leader, to followers of the replicas its topics list in `leader.replication.throttled.replicas` while they are outside the ISR (KIP-73; a reassignment's throttle). Dynamic. The default means no limit."),
    def("follower.replication.throttled.rate", Long, "9223372036854775807", "Bytes per second this broker fetches, as a follower outside the ISR, for the replicas its topics list in `follower.replication.throttled.replicas` (KIP-73). Dynamic. The default means no limit."),
    def("replication.quota.window.num", Int, "11", "Number of samples replication throttles are measured over."),
    def("replication.quota.window.size.seconds", Int, "1", "Length of one replication-throttle sample window, in seconds."),
    def("connections.max.reauth.ms", Long, "0", "How long a SASL session lasts (KIP-368): the broker tells the client in SaslAuthenticate, the client re-authenticates in place before then, and a connection whose session expired is closed at its next request. 0: sessions never expire. May be set per listener as `listener.name.<listener>.connections.max.reauth.ms`."),
    def("log.dirs", List, "./data", "Comma-separated directories holding partition logs; the first also holds the controller's metadata log unless `metadata.log.dir` is set."),
    def("num.recovery.threads.per.data.dir", Int, "2", "Threads per log dir that load the partition logs at start-up, recovering them after an unclean shutdown (Kafka 4's default). ferry runs one pool of this many threads times the number of log dirs, shared by all dirs; at least 1. Closing the logs at shutdown does not use it."),
    def("num.partitions", Int, "1", "Partitions of an auto-created topic, and of CreateTopics requests that give -1."),
    def("default.replication.factor", Int, "1", "Replication factor of auto-created topics and of CreateTopics requests that give -1."),
    def("auto.create.topics.enable", Boolean, "true", "Create a topic when a client asks for its metadata or produces to it."),
    def("delete.topic.enable", Boolean, "true", "Whether DeleteTopics deletes: when false every topic of the request is refused with TOPIC_DELETION_DISABLED (INVALID_REQUEST before DeleteTopics v3), as in Kafka."),
    def("socket.request.max.bytes", Int, "104857600", "Largest request frame accepted; a larger one closes the connection."),
    def("message.max.bytes", Int, "1048588", "Default of the topic config `max.message.bytes`: the largest record batch accepted."),
    def("fetch.max.bytes", Int, "32505856", "Upper bound on the record bytes of one consumer Fetch response (the request's own `max_bytes` applies when smaller; a first batch larger than both is still sent whole, as in Kafka); followers ask for at most this much per Fetch. Unlike Kafka, whose default is 57671680 (55 MiB), ferry defaults to 31 MiB: librdkafka reads each response into one buffer, and glibc's malloc maps a buffer of 32 MiB or more afresh from the kernel every time, so a consumer of many partitions whose responses reach 55 MiB spent a third of its CPU faulting in and zeroing pages. On the 1,000-partition benchmark of docs/benchmarks.md (\"fetch.max.bytes\") 31 MiB consumed 1.2-1.4x as fast as 55 MiB."),
    def("fetch.sendfile.enable", Boolean, "false", "Plaintext listeners send every record set of a consumer Fetch from the segment files with `sendfile` (no copy through the broker's memory). Without it (the default) a response's first 1 MiB of records is read into memory by the request's task, which can run while the connection is still sending the previous response, and the record sets after them are sent with `sendfile`. TLS listeners, replica fetches and record sets under 16 KB always read. Off by default: on the 2-core machine of docs/benchmarks.md, with the client on loopback, sending small responses with `sendfile` consumed slower (see \"sendfile\" there). With consumers on other machines, turn it on: it lowers the broker's CPU per GB consumed (on the benchmark machine to 0.37-0.58x of the first build's, against 0.51-0.66x with the default)."),
    def("min.insync.replicas", Int, "1", "Default of the topic config `min.insync.replicas`."),
    def("replica.lag.time.max.ms", Long, "30000", "A follower that has not caught up with the leader's log end offset for this long leaves the ISR (AlterPartition through the controller)."),
    def("replica.fetch.wait.max.ms", Int, "500", "Longest time a follower's Fetch waits at the leader for new data."),
    def("replica.fetch.max.bytes", Int, "1048576", "Bytes a follower asks for per partition in one Fetch."),
    def("replica.selector.class", ConfigType::String, "org.apache.kafka.common.replica.RackAwareReplicaSelector", "Which replica a consumer that sends its rack (`client.rack`, Fetch v11+) is told to read from (KIP-392): `org.apache.kafka.common.replica.RackAwareReplicaSelector` (an in-sync replica in the consumer's rack, else the leader) or `org.apache.kafka.common.replica.LeaderSelector` (always the leader). Unlike Kafka, whose default is none (the leader), ferry defaults to the rack-aware selector to save cross-AZ bytes."),
    def("replica.high.watermark.checkpoint.interval.ms", Long, "5000", "How often each log dir's `replication-offset-checkpoint` (the high watermarks of its partitions) is written; it is also written on clean shutdown and read at start-up."),
    def("compression.type", ConfigType::String, "producer", "Default of the topic config `compression.type`: `producer` keeps what the producer sent; `uncompressed`/`none`, `gzip`, `snappy`, `lz4` or `zstd` re-encode batches with that codec."),
    def("log.cleanup.policy", List, "delete", "Default of the topic config `cleanup.policy`."),
    def("log.segment.bytes", Int, "1073741824", "Default of `segment.bytes`: size at which a segment is rolled."),
    def("log.roll.ms", Long, "604800000", "Default of `segment.ms`: age at which a segment is rolled."),
    def("log.roll.hours", Int, "168", "Same as `log.roll.ms` in hours; `log.roll.ms` wins when both are set."),
    def("log.retention.ms", Long, "604800000", "Default of `retention.ms`; -1 keeps data forever."),
    def("log.retention.minutes", Int, "10080", "Same as `log.retention.ms` in minutes; the ms key wins."),
    def("log.retention.hours", Int, "168", "Same as `log.retention.ms` in hours; the ms and minutes keys win."),
    def("log.retention.bytes", Long, "-1", "Default of `retention.bytes` per partition; -1 means no limit."),
    def("log.retention.check.interval.ms", Long, "300000", "How often retention and segment.ms rolls are checked (compaction runs on `log.cleaner.backoff.ms`)."),
    def("log.index.interval.bytes", Int, "4096", "Default of `index.interval.bytes`: bytes between offset-index entries."),
    def("log.index.size.max.bytes", Int, "10485760", "Default of `segment.index.bytes`: largest offset index before a roll."),
    def("log.message.timestamp.type", ConfigType::String, "CreateTime", "Default of `message.timestamp.type`: `CreateTime` or `LogAppendTime`."),
    def("log.flush.interval.messages", Long, "9223372036854775807", "Default of `flush.messages`: fsync after this many messages (the page cache otherwise, as Kafka)."),
    def("log.roll.jitter.ms", Long, "0", "Default of `segment.jitter.ms` (accepted; ferry rolls at `segment.ms` exactly)."),
    def("log.roll.jitter.hours", Int, "0", "Same as `log.roll.jitter.ms` in hours; the ms key wins."),
    def("log.flush.interval.ms", Long, "9223372036854775807", "Default of `flush.ms` (accepted; ferry leaves timed flushes to the page cache)."),
    def("log.flush.scheduler.interval.ms", Long, "9223372036854775807", "Default of `flush.ms` when `log.flush.interval.ms` is not set (accepted, no effect)."),
    def("log.preallocate", Boolean, "false", "Default of `preallocate` (accepted, no effect)."),
    def("log.message.timestamp.before.max.ms", Long, "9223372036854775807", "Default of the topic config `message.timestamp.before.max.ms`."),
    def("log.message.timestamp.after.max.ms", Long, "3600000", "Default of the topic config `message.timestamp.after.max.ms` (an hour, Kafka 4's default)."),
    def("compression.gzip.level", Int, "-1", "Default of the topic config `compression.gzip.level`."),
    def("compression.lz4.level", Int, "9", "Default of the topic config `compression.lz4.level`."),
    def("compression.zstd.level", Int, "3", "Default of the topic config `compression.zstd.level`."),
    def("log.local.retention.bytes", Long, "-2", "Default of the topic config `local.retention.bytes`; -2: the topic's `retention.bytes`."),
    def("log.segment.delete.delay.ms", Long, "60000", "Default of `file.delete.delay.ms`."),
    def("log.scrubber.enable", Boolean, "true", "ferry's scrubber: a background task that reads every closed segment of the partitions this broker hosts, checks each batch's structure and CRC-32C, and repairs a corrupt batch in place with another replica's bytes (see docs/reliability.md, Corruption). Kafka has none. With `false`, corrupt batches met by follower fetches are still kept back and repaired."),
    def("log.scrubber.bytes.per.second", Long, "16777216", "Most bytes per second the scrubber reads (default 16 MiB/s: a few percent of a disk's sequential bandwidth, a pass over 1 TiB a day). At least 4096."),
    def("log.scrubber.interval.ms", Long, "3600000", "Pause between the end of one scrubber pass over every closed segment and the start of the next (at least 100)."),
    def("log.cleaner.backoff.ms", Long, "15000", "How long the log cleaner sleeps between passes over the compacted logs: a log whose dirty ratio reaches `min.cleanable.dirty.ratio` (or whose dirty data passes `max.compaction.lag.ms`) is compacted within this time."),
    def("log.cleaner.delete.retention.ms", Long, "86400000", "Default of `delete.retention.ms`: how long tombstones survive compaction."),
    def("log.cleaner.min.compaction.lag.ms", Long, "0", "Default of `min.compaction.lag.ms`."),
    def("log.cleaner.max.compaction.lag.ms", Long, "9223372036854775807", "Default of `max.compaction.lag.ms`."),
    def("log.cleaner.min.cleanable.ratio", Double, "0.5", "Default of `min.cleanable.dirty.ratio`."),
    def("unclean.leader.election.enable", Boolean, "false", "Default of the topic config of the same name."),
    def("broker.heartbeat.interval.ms", Int, "2000", "How often a broker heartbeats to the active controller."),
    def("broker.session.timeout.ms", Int, "9000", "A broker whose heartbeats stop for this long is fenced by the active controller: its leaderships move to other in-sync replicas and it leaves every ISR."),
    def("controlled.shutdown.enable", Boolean, "true", "On SIGTERM, ask the controller to move this broker's leaderships to other in-sync replicas before stopping (waits at most `broker.session.timeout.ms`)."),
    def("auto.leader.rebalance.enable", Boolean, "true", "The active controller gives leadership back to preferred (first) replicas that are live and in sync."),
    def("leader.imbalance.check.interval.seconds", Long, "300", "How often the active controller checks for leader imbalance."),
    def("leader.imbalance.per.broker.percentage", Int, "10", "Preferred leaders of a broker are restored when more than this percentage of the partitions it prefers are led elsewhere."),
    def("offsets.topic.num.partitions", Int, "50", "Partitions of `__consumer_offsets` (fixed once the topic exists)."),
    def("offsets.topic.replication.factor", Int, "3", "Replication factor of `__consumer_offsets`, capped at the number of live brokers."),
    def("offsets.topic.segment.bytes", Int, "104857600", "Segment size of `__consumer_offsets`."),
    def("offsets.commit.timeout.ms", Int, "5000", "How long an offset commit waits for the in-sync replicas of `__consumer_offsets` (REQUEST_TIMED_OUT after)."),
    def("offsets.retention.minutes", Int, "10080", "Committed offsets of a group that has been empty this long are deleted."),
    def("offset.metadata.max.bytes", Int, "4096", "Largest metadata string of a committed offset (OFFSET_METADATA_TOO_LARGE above)."),
    def("transaction.partition.verification.enable", Boolean, "true", "Before the first transactional batch of a producer's transaction is appended to a partition, the leader asks the transaction coordinator whether the partition is in the transaction (KIP-890), so a late produce cannot open a transaction that never ends."),
    def("transaction.state.log.num.partitions", Int, "50", "Partitions of `__transaction_state` (fixed once the topic exists)."),
    def("transaction.state.log.replication.factor", Int, "3", "Replication factor of `__transaction_state`, capped at the number of live brokers."),
    def("transaction.state.log.min.isr", Int, "2", "`min.insync.replicas` of `__transaction_state`, capped at its replication factor."),
    def("transaction.state.log.segment.bytes", Int, "104857600", "Segment size of `__transaction_state`."),
    def("transaction.max.timeout.ms", Int, "900000", "Largest `transaction.timeout.ms` a producer may ask for (INVALID_TRANSACTION_TIMEOUT above)."),
    def("transactional.id.expiration.ms", Int, "604800000", "A transactional id with no transaction open for this long is forgotten."),
    def("transaction.abort.timed.out.transaction.cleanup.interval.ms", Int, "10000", "How often the transaction coordinator aborts transactions open longer than their timeout."),
    def("transaction.remove.expired.transaction.cleanup.interval.ms", Int, "3600000", "How often the transaction coordinator forgets expired transactional ids."),
    def("group.initial.rebalance.delay.ms", Int, "3000", "How long the first rebalance of an empty group waits for more members."),
    def("group.min.session.timeout.ms", Int, "6000", "Smallest session timeout a member may ask for."),
    def("group.max.session.timeout.ms", Int, "1800000", "Largest session timeout a member may ask for."),
    def("group.max.size", Int, "2147483647", "Most members a group may have (GROUP_MAX_SIZE_REACHED above)."),
    def("group.consumer.heartbeat.interval.ms", Int, "5000", "Heartbeat interval given to members of consumer-protocol (KIP-848) groups."),
    def("group.consumer.session.timeout.ms", Int, "45000", "Session timeout of members of consumer-protocol groups."),
    def("group.consumer.min.session.timeout.ms", Int, "45000", "Smallest `consumer.session.timeout.ms` a group config may set."),
    def("group.consumer.max.session.timeout.ms", Int, "60000", "Largest `consumer.session.timeout.ms` a group config may set."),
    def("group.consumer.min.heartbeat.interval.ms", Int, "5000", "Smallest `consumer.heartbeat.interval.ms` a group config may set."),
    def("group.consumer.max.heartbeat.interval.ms", Int, "15000", "Largest `consumer.heartbeat.interval.ms` a group config may set."),
    def("group.consumer.assignors", List, "uniform,range", "Server-side assignors of consumer-protocol groups; the first is the default."),
    def("group.consumer.max.size", Int, "2147483647", "Most members of a consumer-protocol group."),
    def("group.consumer.migration.policy", ConfigType::String, "bidirectional", "Online conversion of a group between the classic and the consumer protocol: `bidirectional`, `upgrade` (a classic group with members becomes a consumer group when a consumer-protocol member joins), `downgrade` (a consumer group whose last consumer-protocol member leaves becomes classic again, if classic members remain) or `disabled`."),
    def("remote.wal.enable", Boolean, "false", "Default of the topic config `remote.wal.enable`: followers of such topics get their data through the object store of the leader's rack (KIP-1176) instead of by Fetch across racks. Internal (`__`) topics never use the WAL."),
    def("remote.wal.store", ConfigType::String, "local", "Object store of the remote WAL: `local` (a directory per rack, for tests and single hosts) or `s3` (S3, S3 Express One Zone or an S3-compatible server)."),
    def("remote.wal.buckets", ConfigType::String, "", "Bucket of each rack, `rack=bucket,...` (`az1=/data/wal-a,az2=/data/wal-b` for `local`: directories; bucket names for `s3`). The uploader writes to its own `broker.rack`'s bucket; readers reach every bucket listed. Empty: one bucket named after this broker's rack under `remote.wal.local.dir` (`local` only)."),
    def("remote.wal.local.dir", ConfigType::String, "", "Parent directory of the per-rack bucket directories when `remote.wal.store = local` and a rack is not listed in `remote.wal.buckets`: this broker uploads to `<dir>/<its rack>`, and its followers read another rack's objects from `<dir>/<that rack>` (brokers sharing one host, or one shared file system). Empty: `remote-wal` next to the first of `log.dirs`."),
    def("remote.wal.s3.endpoint", ConfigType::String, "", "Endpoint URL of an S3-compatible server, e.g. `http://127.0.0.1:9000`, for every rack not listed in `remote.wal.s3.endpoints`. Empty: AWS."),
    def("remote.wal.s3.endpoints", ConfigType::String, "", "Endpoint URL of each rack's bucket, `rack=url,...` (e.g. `az1=http://10.0.1.5:9000,az2=http://10.0.2.5:9000`: one S3-compatible server per AZ). A rack not listed uses `remote.wal.s3.endpoint`; every rack listed must have a bucket in `remote.wal.buckets`, and two racks sharing a bucket name must share the endpoint (WAL metadata names a bucket, not a server). Leave it empty for S3 Express One Zone on AWS: the SDK derives each directory bucket's zonal endpoint from its name, and a custom endpoint turns off its session auth."),
    def("remote.wal.s3.region", ConfigType::String, "us-east-1", "Region of the S3 buckets."),
    def("remote.wal.s3.path.style", Boolean, "false", "Path-style addressing (`endpoint/bucket/key`), needed by most S3-compatible servers."),
    def("remote.wal.s3.access.key.id", ConfigType::String, "", "Static S3 access key id. Empty (with the secret empty too): the AWS default credential chain."),
    def("remote.wal.s3.secret.access.key", ConfigType::Password, "", "Static S3 secret access key (set together with the key id)."),
    def("remote.log.storage.system.enable", Boolean, "false", "Turn on the long-term tier (KIP-405): leaders of topics with `remote.storage.enable=true` copy their closed segments, with their indexes, to the tier's store and record them in `__remote_log_metadata`; the local disk then keeps `local.retention.*` of copied data and the tier `retention.*`, and consumers read below the local log start from the tier (docs/rfcs/0004-long-term-tier.md)."),
    def("remote.log.storage.type", ConfigType::String, "local", "Store of the long-term tier: `local` (a directory, `remote.log.storage.local.dir`) or `s3` (S3 or an S3-compatible server)."),
    def("remote.log.storage.local.dir", ConfigType::String, "", "Directory of the tier when `remote.log.storage.type = local`. Empty: `remote-log-storage` next to the first of `log.dirs`."),
    def("remote.log.storage.s3.bucket", ConfigType::String, "", "Bucket of the tier when `remote.log.storage.type = s3` (a regional bucket: the tier holds data for all zones)."),
    def("remote.log.storage.s3.endpoint", ConfigType::String, "", "Endpoint URL of an S3-compatible server for the tier, e.g. `http://127.0.0.1:9000`. Empty: AWS."),
    def("remote.log.storage.s3.region", ConfigType::String, "us-east-1", "Region of the tier's bucket."),
    def("remote.log.storage.s3.path.style", Boolean, "false", "Path-style addressing for the tier's bucket, needed by most S3-compatible servers."),
    def("remote.log.storage.s3.access.key.id", ConfigType::String, "", "Static S3 access key id of the tier. Empty (with the secret empty too): the AWS default credential chain."),
    def("remote.log.storage.s3.secret.access.key", ConfigType::Password, "", "Static S3 secret access key of the tier (set together with the key id)."),
    def("remote.log.manager.task.interval.ms", Long, "30000", "How often a leader looks for closed segments to copy to the tier and for segments retention deletes from it (Kafka's name and default)."),
    def("remote.log.metadata.topic.num.partitions", Int, "16", "Partitions of `__remote_log_metadata`, created on first use (all records of one data partition go to one of them)."),
    def("remote.log.index.file.cache.total.size.bytes", Long, "67108864", "Bytes of tier offset indexes kept in memory for reads from the tier."),
    def("remote.wal.upload.interval.ms", Long, "10", "Longest time an appended byte waits before its WAL object is cut and uploaded."),
    def("remote.wal.upload.max.bytes", Int, "4194304", "Cut and upload a WAL object as soon as this many bytes wait (the interval cuts it earlier at lower rates). Larger objects mean fewer PUTs, GETs and metadata records per GB: at full load on the S3 API benchmark of docs/benchmarks.md, 4 MiB instead of 1 MiB cut the brokers' CPU per GB by 10-20 % and raised throughput by 4-32 %. Followers read an object of up to 8 MiB with one GET."),
    def("remote.wal.buffer.max.bytes", Long, "268435456", "Bytes waiting or uploading at most; beyond this (slow or failing store) appends reach followers by the classic fetch. It must hold produce rate times PUT latency under load: at 150 MB/s and PUTs slowed to 0.5 s by a saturated host, 64 MiB overflowed and sent a tenth of the data across zones."),
    def("remote.wal.fetcher.queue.max.slices", Int, "4096", "Most WAL slices of one partition a follower's WAL fetcher holds queued (their metadata records, a few hundred bytes each). A follower back from an outage with a longer backlog takes it in turns: the slices that do not fit are read again from `__remote_wal_log_metadata` once the queue is half empty, so the whole backlog still comes through the object store, and other partitions' slices are taken meanwhile."),
    def("remote.wal.fallback.ms", Long, "1500", "A follower of a remote-WAL partition gets its data by the classic fetch (until it has caught up) when it still lacks data whose WAL metadata was published this long ago, or when it holds everything published but has not moved for this long while the leader's log is longer (uploads stuck). Longer keeps a busy but working WAL path in use (at full load a follower can wait over 500 ms behind one slow GET); shorter ends the acks=all stall of a really broken path sooner."),
    def("remote.wal.metadata.topic.num.partitions", Int, "16", "Partitions of `__remote_wal_log_metadata` (fixed once the topic exists)."),
    def("remote.wal.metadata.topic.segment.bytes", Int, "16777216", "`segment.bytes` of `__remote_wal_log_metadata` when it is created: the log cleaner compacts closed segments only, so small segments let the tombstones of collected objects reach compaction."),
    def("remote.wal.metadata.topic.segment.ms", Long, "300000", "`segment.ms` of `__remote_wal_log_metadata` when it is created (rolls a quiet topic's segment so that it can be compacted)."),
    def("remote.wal.metadata.topic.delete.retention.ms", Long, "300000", "`delete.retention.ms` of `__remote_wal_log_metadata` when it is created: how long the tombstones of collected objects stay after compaction. Every key is written once, so the compacted topic holds the live objects' records plus this window of tombstones."),
    def("remote.wal.metadata.topic.retention.ms", Long, "7200000", "`retention.ms` of `__remote_wal_log_metadata` when it is created (with `cleanup.policy=compact,delete`): a time-based backstop beside compaction, so records whose objects nobody collected still leave the topic. Also how long a broker must be gone (fenced or unregistered) before a live broker of its rack collects the WAL objects it left in their bucket."),
    def("remote.wal.metadata.acks", ConfigType::String, "1", "How WAL metadata is acknowledged to the uploader: `1` once the metadata partition's leader appended it, `all` once its in-sync replicas hold it (at most 5 s, else the ranges take the classic fetch). `all` survives a metadata-leader failover but waits one metadata replication round trip per publish, and publishes of one uploader are ordered: on a loaded cluster it sends more follower traffic to the classic fetch. A record lost under `1` only costs its range a classic fetch."),
    def("remote.wal.gc.interval.ms", Long, "1000", "How often the remote WAL garbage collector deletes the objects nobody needs any more: held by every assigned replica, by the long-term tier, or past their lifetime (`remote.wal.retention.max.ms`)."),
    def("remote.wal.orphan.grace.ms", Long, "60000", "WAL objects without metadata older than this are deleted by the orphan sweep."),
    def("log.local.retention.ms", Long, "-2", "Default of the topic config `local.retention.ms`; -2: the topic's `retention.ms`."),
    def("remote.wal.failover.republish", ConfigType::String, "optimized", "What a broker that becomes leader of a remote-WAL partition (e.g. after its former leader's AZ and bucket failed) re-uploads to its own rack's bucket, stamped with its new leader epoch, so that followers keep the WAL path: `comprehensive` every local segment newer than the topic's `local.retention.ms` (from the log start offset at most); `optimized` only what the long-term tier does not hold yet (KIP-1176, for topics with `remote.storage.enable=true`) and what is above the high watermark the new leader knew, since every replica in the ISR holds what is below it: a clean move (controlled shutdown, preferred-leader election, rolling restart) republishes only the uncommitted tail, not the whole local log. A follower needing older data (one that was out of the ISR already) fetches it from the leader, or from the tier below the leader's local log start."),
    def("remote.wal.retention.ms", Long, "3600000", "Age bound for WAL objects whose topic this broker does not know (deleted, or not in its metadata yet). Objects of known topics are deleted once every assigned replica holds them (or, for `remote.storage.enable=true` topics, the long-term tier holds what a replica lacks), or once they are older than the longest effective `local.retention.ms` of their slices' topics capped by `remote.wal.retention.max.ms` (a replica then needing them uses the classic fetch)."),
    def("remote.wal.retention.max.ms", Long, "3600000", "Longest time a WAL object is kept for a replica that lacks its data (offline, or far behind): its topic's effective `local.retention.ms` (-2: `retention.ms`, 7 days by default) capped by this and by `remote.wal.metadata.topic.retention.ms` (without its metadata nobody finds an object). A follower back within this catches up through its leader's bucket instead of across zones; one away longer takes the rest by the classic fetch. -1: no cap of its own. Storage cost: produce rate times this, at the fast store's price per GB-month (see docs/operations.md)."),
    def("remote.wal.cost.put.per.1000", Double, "0.00113", "Price in USD of 1,000 PUT requests, for the estimated cost gauge (S3 Express One Zone)."),
    def("remote.wal.cost.get.per.1000", Double, "0.00003", "Price in USD of 1,000 GET requests (S3 Express One Zone)."),
    def("remote.wal.cost.upload.per.gb", Double, "0.0032", "Price in USD per GB uploaded (S3 Express One Zone)."),
    def("remote.wal.cost.retrieval.per.gb", Double, "0.0006", "Price in USD per GB retrieved (S3 Express One Zone)."),
    def("remote.wal.cost.cross.az.per.gb", Double, "0.01", "Price in USD per GB crossing availability zones, each way."),
    def("authorizer.class.name", ConfigType::String, "", "The authorizer every request is checked with. Empty: none, every client may do everything. `org.apache.kafka.metadata.authorizer.StandardAuthorizer` (or its older name `kafka.security.authorizer.AclAuthorizer`): Kafka's ACL rules over the ACLs stored in the cluster metadata. Any other class is a start-up error."),
    def("super.users", ConfigType::String, "", "Principals the authorizer allows everything, `User:admin;User:ops` (semicolon-separated `Type:name`)."),
    def("allow.everyone.if.no.acl.found", Boolean, "false", "With an authorizer: whether an operation on a resource no ACL applies to is allowed (true) or denied (false, Kafka's default)."),
    def("metrics.address", ConfigType::String, "127.0.0.1:9308", "host:port of the Prometheus endpoint (`/metrics`). Empty disables it."),
];

/// A parsed, validated broker configuration, with the dynamic layer over it.
#[derive(Clone, Default)]
pub struct BrokerConfig {
    /// Values set in the file, by flattened key name (defaults are not stored here).
    pub(crate) explicit: BTreeMap<String, String>,
    /// Values altered at run time ([`crate::dynamic`]), shared by every clone of this config so
    /// that all holders see a change at once.
    pub(crate) dynamic: Arc<RwLock<DynamicConfigs>>,
}

/// Shows every value set in the file except secrets (`password`-typed keys), so a config can
/// be logged or printed in an error without leaking them.
impl std::fmt::Debug for BrokerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for (key, value) in &self.explicit {
            if is_sensitive(key) {
                map.entry(key, &"[hidden]");
            } else {
                map.entry(key, value);
            }
        }
        map.finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file is not valid TOML: {0}")]
    Toml(String),
    #[error("unknown config key `{0}`")]
    UnknownKey(String),
    #[error("config key `{key}` must be of type {expected}: {detail}")]
    BadValue {
        key: String,
        expected: &'static str,
        detail: String,
    },
}

pub fn lookup_def(name: &str) -> Option<&'static ConfigDef> {
    BROKER_CONFIGS.iter().find(|d| d.name == name)
}

/// Whether a key holds a secret (Kafka's PASSWORD type): never returned by DescribeConfigs nor
/// logged. Per-listener overrides of such keys are secrets too.
pub fn is_sensitive(name: &str) -> bool {
    lookup_key(name).is_some_and(|d| d.ty.is_sensitive())
}

/// Whether `name` is a key this broker declares: one of [`BROKER_CONFIGS`], or a per-listener
/// override of one a listener may set.
pub fn is_declared(name: &str) -> bool {
    lookup_key(name).is_some()
}

/// The declaration of a key in a config file: a declared key, or a per-listener override
/// `listener.name.<name>.<key>` of a key a listener may override ([`listener_scoped_def`]).
fn lookup_key(name: &str) -> Option<&'static ConfigDef> {
    if let Some(rest) = name.strip_prefix(crate::listeners::LISTENER_PREFIX) {
        let (listener, key) = rest.split_once('.')?;
        if listener.is_empty() {
            return None;
        }
        return listener_scoped_def(key);
    }
    lookup_def(name)
}

/// The lowercase SASL mechanism names that may scope a listener's `sasl.jaas.config`.
pub const JAAS_MECHANISM_PREFIXES: &[&str] = &[
    "plain",
    "scram-sha-256",
    "scram-sha-512",
    "gssapi",
    "oauthbearer",
];

/// The keys one listener may set for itself: `ssl.*`, the SASL keys, `connections.max.reauth.ms`,
/// and a mechanism's JAAS text as `<lowercase mechanism>.sasl.jaas.config` (the only form
/// `sasl.jaas.config` takes on a broker).
fn listener_scoped_def(key: &str) -> Option<&'static ConfigDef> {
    if let Some((mechanism, rest @ ("sasl.jaas.config" | "sasl.server.callback.handler.class"))) =
        key.split_once('.')
    {
        return JAAS_MECHANISM_PREFIXES
            .contains(&mechanism)
            .then(|| lookup_def(rest))
            .flatten();
    }
    let scoped = key.starts_with("ssl.")
        || (key.starts_with("sasl.")
            && key != "sasl.jaas.config"
            && key != "sasl.server.callback.handler.class")
        || key == "connections.max.reauth.ms"
        || key == "max.connections";
    scoped.then(|| lookup_def(key)).flatten()
}

impl BrokerConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Toml(e.to_string()))?;
        let mut flat = Vec::new();
        flatten("", &toml::Value::Table(table), &mut flat);
        let mut explicit = BTreeMap::new();
        for (key, value) in flat {
            let def = lookup_key(&key).ok_or_else(|| ConfigError::UnknownKey(key.clone()))?;
            let text = value_to_string(def, &value)?;
            explicit.insert(key, text);
        }
        Ok(Self {
            explicit,
            dynamic: Arc::default(),
        })
    }

    /// Sets a key programmatically (tests, command-line overrides), with the same validation.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let def = lookup_key(key).ok_or_else(|| ConfigError::UnknownKey(key.to_string()))?;
        let parsed = match def.ty {
            Int | Long => value
                .parse::<i64>()
                .map(|_| toml::Value::Integer(0))
                .map_err(|e| e.to_string()),
            Double => value
                .parse::<f64>()
                .map(toml::Value::Float)
                .map_err(|e| e.to_string()),
            Boolean => value
                .parse::<bool>()
                .map(toml::Value::Boolean)
                .map_err(|e| e.to_string()),
            ConfigType::String | ConfigType::Password | List => {
                Ok(toml::Value::String(value.to_string()))
            }
        };
        parsed.map_err(|detail| ConfigError::BadValue {
            key: key.to_string(),
            expected: def.ty.name(),
            detail,
        })?;
        check_range(def, value)?;
        self.explicit.insert(key.to_string(), value.to_string());
        Ok(())
    }

    /// The keys set in the file.
    pub fn explicit_keys(&self) -> impl Iterator<Item = &str> {
        self.explicit.keys().map(String::as_str)
    }

    pub fn is_set(&self, key: &str) -> bool {
        self.explicit.contains_key(key)
    }

    /// The value of a key as text, the default when unset.
    pub fn raw(&self, key: &str) -> &str {
        if let Some(v) = self.explicit.get(key) {
            return v;
        }
        lookup_def(key).map(|d| d.default).unwrap_or("")
    }

    /// (`quota.window.num`, `quota.window.size.seconds`), at least 1 each.
    pub fn quota_windows(&self) -> (u32, u32) {
        let positive = |key: &str| u32::try_from(self.long(key)).unwrap_or(1).max(1);
        (
            positive("quota.window.num"),
            positive("quota.window.size.seconds"),
        )
    }

    /// (`replication.quota.window.num`, `replication.quota.window.size.seconds`), at least 1
    /// each.
    pub fn replication_quota_windows(&self) -> (u32, u32) {
        let positive = |key: &str| u32::try_from(self.long(key)).unwrap_or(1).max(1);
        (
            positive("replication.quota.window.num"),
            positive("replication.quota.window.size.seconds"),
        )
    }

    /// (`leader.replication.throttled.rate`, `follower.replication.throttled.rate`) as they
    /// stand, the dynamic layer included; `i64::MAX` (the default) means no limit.
    pub fn replication_throttled_rates(&self) -> (i64, i64) {
        let rate = |key: &str| self.current(key).0.trim().parse().unwrap_or(i64::MAX);
        (
            rate("leader.replication.throttled.rate"),
            rate("follower.replication.throttled.rate"),
        )
    }

    /// `connections.max.idle.ms` (at least 1 ms).
    pub fn connections_max_idle(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            u64::try_from(self.long("connections.max.idle.ms"))
                .unwrap_or(1)
                .max(1),
        )
    }

    /// The broker-wide `max.connections`.
    pub fn max_connections(&self) -> usize {
        usize::try_from(self.long("max.connections")).unwrap_or(0)
    }

    /// `listener.name.<listener>.max.connections`, a limit of that listener's own, when set.
    pub fn listener_max_connections(&self, listener: &str) -> Option<usize> {
        let scoped = format!(
            "{}{}.max.connections",
            crate::listeners::LISTENER_PREFIX,
            listener.to_ascii_lowercase()
        );
        self.is_set(&scoped)
            .then(|| usize::try_from(self.long(&scoped)).unwrap_or(0))
    }

    /// `max.connections.per.ip` and its `max.connections.per.ip.overrides`.
    pub fn max_connections_per_ip(
        &self,
    ) -> Result<(usize, Vec<(std::net::IpAddr, usize)>), ConfigError> {
        let default = usize::try_from(self.long("max.connections.per.ip")).unwrap_or(0);
        let key = "max.connections.per.ip.overrides";
        let overrides = split_list(self.raw(key))
            .into_iter()
            .map(|entry| {
                let parsed = entry.rsplit_once(':').and_then(|(ip, n)| {
                    let ip = ip.trim_matches(|c| c == '[' || c == ']').parse().ok()?;
                    Some((ip, n.parse::<usize>().ok()?))
                });
                parsed.ok_or_else(|| bad(key, "list", format!("`{entry}` is not ip:count")))
            })
            .collect::<Result<_, _>>()?;
        Ok((default, overrides))
    }

    /// `replica.lag.time.max.ms`.
    pub fn replica_lag_time_max_ms(&self) -> i64 {
        self.long("replica.lag.time.max.ms").max(1)
    }

    /// `replica.fetch.wait.max.ms`.
    pub fn replica_fetch_wait_max_ms(&self) -> i32 {
        i32::try_from(self.long("replica.fetch.wait.max.ms").max(0)).unwrap_or(500)
    }

    /// `replica.selector.class` (validated on parse).
    pub fn replica_selector(&self) -> ReplicaSelector {
        ReplicaSelector::from_class_name(self.raw("replica.selector.class"))
            .unwrap_or(ReplicaSelector::RackAware)
    }

    /// The authorizer's settings when `authorizer.class.name` names Kafka's standard
    /// authorizer; `None` when no authorizer is configured (every request allowed).
    pub fn authorizer_config(&self) -> Option<ferry_authz::AuthorizerConfig> {
        if self.raw("authorizer.class.name").is_empty() {
            return None;
        }
        // Both values were validated on parse.
        let super_users =
            ferry_authz::parse_super_users(self.raw("super.users")).unwrap_or_default();
        Some(ferry_authz::AuthorizerConfig {
            super_users,
            allow_everyone_if_no_acl_found: self.boolean("allow.everyone.if.no.acl.found"),
        })
    }

    /// `replica.high.watermark.checkpoint.interval.ms`.
    pub fn high_watermark_checkpoint_interval_ms(&self) -> u64 {
        self.long("replica.high.watermark.checkpoint.interval.ms")
            .max(1) as u64
    }

    /// `replica.fetch.max.bytes`.
    pub fn replica_fetch_max_bytes(&self) -> i32 {
        i32::try_from(self.long("replica.fetch.max.bytes").max(1)).unwrap_or(1 << 20)
    }

    /// `unclean.leader.election.enable`.
    pub fn unclean_leader_election(&self) -> bool {
        self.boolean("unclean.leader.election.enable")
    }

    /// `broker.heartbeat.interval.ms`.
    pub fn broker_heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.long("broker.heartbeat.interval.ms").max(1) as u64)
    }

    /// `broker.session.timeout.ms`.
    pub fn broker_session_timeout(&self) -> Duration {
        Duration::from_millis(self.long("broker.session.timeout.ms").max(1) as u64)
    }

    /// `controlled.shutdown.enable`.
    pub fn controlled_shutdown_enable(&self) -> bool {
        self.boolean("controlled.shutdown.enable")
    }

    /// `auto.leader.rebalance.enable`.
    pub fn auto_leader_rebalance_enable(&self) -> bool {
        self.boolean("auto.leader.rebalance.enable")
    }

    /// `leader.imbalance.check.interval.seconds`.
    pub fn leader_imbalance_check_interval(&self) -> Duration {
        Duration::from_secs(self.long("leader.imbalance.check.interval.seconds").max(1) as u64)
    }

    /// `leader.imbalance.per.broker.percentage`.
    pub fn leader_imbalance_per_broker_percentage(&self) -> i64 {
        self.long("leader.imbalance.per.broker.percentage")
            .clamp(0, 100)
    }

    /// The scrubber's settings: (`log.scrubber.enable`, `log.scrubber.bytes.per.second`,
    /// `log.scrubber.interval.ms`).
    pub fn log_scrubber(&self) -> (bool, u64, Duration) {
        (
            self.boolean("log.scrubber.enable"),
            self.long("log.scrubber.bytes.per.second").max(4096) as u64,
            // A floor, so that a broker with nothing to scrub does not loop.
            Duration::from_millis(self.long("log.scrubber.interval.ms").max(100) as u64),
        )
    }

    pub(crate) fn long(&self, key: &str) -> i64 {
        // Values were validated on parse; defaults are valid by construction (tested).
        self.raw(key).parse().unwrap_or(0)
    }

    fn boolean(&self, key: &str) -> bool {
        self.raw(key) == "true"
    }

    pub fn node_id(&self) -> i32 {
        self.long("node.id") as i32
    }

    pub fn rack(&self) -> Option<String> {
        let r = self.raw("broker.rack");
        (!r.is_empty()).then(|| r.to_string())
    }

    /// Threads that load the partition logs at start-up: `num.recovery.threads.per.data.dir`
    /// for each log dir, at least 1.
    pub fn log_recovery_threads(&self) -> usize {
        let per_dir = usize::try_from(self.long("num.recovery.threads.per.data.dir")).unwrap_or(1);
        per_dir.max(1).saturating_mul(self.log_dirs().len().max(1))
    }

    /// The directory `key` names, or `name` beside the first of `log.dirs` when it is empty
    /// (where the local stores of the remote WAL and of the long-term tier live by default).
    pub fn dir_or_beside_log_dirs(&self, key: &str, name: &str) -> PathBuf {
        match self.raw(key).trim() {
            "" => self
                .log_dirs()
                .first()
                .map(|d| d.join("..").join(name))
                .unwrap_or_else(|| PathBuf::from(name)),
            dir => PathBuf::from(dir),
        }
    }

    pub fn log_dirs(&self) -> Vec<PathBuf> {
        self.raw("log.dirs")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect()
    }

    /// `process.roles`, trimmed.
    pub fn process_roles(&self) -> Vec<String> {
        split_list(self.raw("process.roles"))
    }

    /// `controller.quorum.voters` as node id to `host:port`; empty means this node alone.
    pub fn controller_quorum_voters(&self) -> Result<BTreeMap<u64, String>, ConfigError> {
        let mut voters = BTreeMap::new();
        for entry in split_list(self.raw("controller.quorum.voters")) {
            let (id, addr) = parse_voter(&entry)?;
            if voters.insert(id, addr).is_some() {
                return Err(bad(
                    "controller.quorum.voters",
                    "list",
                    format!("voter {id} is listed twice"),
                ));
            }
        }
        Ok(voters)
    }

    /// Where the controller keeps its Raft log: `metadata.log.dir`, else
    /// `<first of log.dirs>/__cluster_metadata`.
    pub fn metadata_log_dir(&self) -> Option<PathBuf> {
        let explicit = self.raw("metadata.log.dir");
        if !explicit.is_empty() {
            return Some(PathBuf::from(explicit));
        }
        self.log_dirs()
            .first()
            .map(|d| d.join("__cluster_metadata"))
    }

    /// `metadata.log.reserve.bytes`.
    pub fn metadata_log_reserve_bytes(&self) -> u64 {
        self.long("metadata.log.reserve.bytes").max(0) as u64
    }

    /// Dynamic (a BROKER resource may change it at run time).
    pub fn num_partitions(&self) -> i32 {
        self.current("num.partitions")
            .0
            .parse::<i32>()
            .unwrap_or(1)
            .max(1)
    }
    pub fn default_replication_factor(&self) -> i16 {
        self.long("default.replication.factor") as i16
    }
    pub fn auto_create_topics(&self) -> bool {
        self.boolean("auto.create.topics.enable")
    }
    pub fn delete_topic_enable(&self) -> bool {
        self.boolean("delete.topic.enable")
    }
    pub fn socket_request_max_bytes(&self) -> usize {
        self.long("socket.request.max.bytes") as usize
    }
    /// `fetch.sendfile.enable`: consumer fetches on plaintext listeners send all their record
    /// sets with `sendfile`, not only those after a response's first 1 MiB.
    pub fn fetch_sendfile(&self) -> bool {
        self.boolean("fetch.sendfile.enable")
    }
    pub fn fetch_max_bytes(&self) -> usize {
        self.long("fetch.max.bytes") as usize
    }
    pub fn cleaner_backoff_ms(&self) -> u64 {
        self.long("log.cleaner.backoff.ms").max(10) as u64
    }

    pub fn retention_check_interval_ms(&self) -> u64 {
        self.long("log.retention.check.interval.ms").max(100) as u64
    }
    pub fn offsets_commit_timeout_ms(&self) -> u64 {
        self.long("offsets.commit.timeout.ms").max(1) as u64
    }
    /// The transaction coordinator's settings (Kafka's `transaction.*` names).
    pub fn txn_config(&self) -> ferry_txn::TxnConfig {
        ferry_txn::TxnConfig {
            max_timeout_ms: self
                .long("transaction.max.timeout.ms")
                .clamp(1, i32::MAX as i64) as i32,
            transactional_id_expiration_ms: self.long("transactional.id.expiration.ms").max(1),
            state_log_partitions: self
                .long("transaction.state.log.num.partitions")
                .clamp(1, i32::MAX as i64) as i32,
            abort_timed_out_interval_ms: self
                .long("transaction.abort.timed.out.transaction.cleanup.interval.ms")
                .max(1),
            remove_expired_interval_ms: self
                .long("transaction.remove.expired.transaction.cleanup.interval.ms")
                .max(1),
            offsets_topic_partitions: self.long("offsets.topic.num.partitions").max(1) as i32,
            ..ferry_txn::TxnConfig::default()
        }
    }
    pub fn group_config(&self) -> ferry_group::GroupConfig {
        ferry_group::GroupConfig {
            offsets_topic_partitions: self.long("offsets.topic.num.partitions").max(1) as i32,
            offsets_retention_ms: self
                .long("offsets.retention.minutes")
                .saturating_mul(60_000),
            offset_metadata_max_bytes: self.long("offset.metadata.max.bytes").max(0) as usize,
            initial_rebalance_delay_ms: self.long("group.initial.rebalance.delay.ms").max(0),
            min_session_timeout_ms: self.long("group.min.session.timeout.ms") as i32,
            max_session_timeout_ms: self.long("group.max.session.timeout.ms") as i32,
            max_group_size: self.long("group.max.size").max(1) as usize,
            consumer: ferry_group::ConsumerProtocolConfig {
                heartbeat_interval_ms: self.long("group.consumer.heartbeat.interval.ms") as i32,
                session_timeout_ms: self.long("group.consumer.session.timeout.ms") as i32,
                default_assignor: self
                    .raw("group.consumer.assignors")
                    .split(',')
                    .map(str::trim)
                    .find(|a| !a.is_empty())
                    .unwrap_or("uniform")
                    .to_string(),
                max_size: self.long("group.consumer.max.size").max(1) as usize,
            },
            // Checked when the configuration was read.
            migration_policy: ferry_group::MigrationPolicy::parse(
                self.raw("group.consumer.migration.policy"),
            )
            .unwrap_or_default(),
        }
    }

    /// Kafka's start-up checks of the consumer-protocol group timeouts (`GroupCoordinatorConfig`):
    /// each default within its min and max, and the heartbeat shorter than the session.
    pub fn check_group_consumer_timeouts(&self) -> Result<(), ConfigError> {
        let ms = |key: &str| self.long(key);
        let require = |holds: bool, key: &str, why: String| {
            if holds {
                Ok(())
            } else {
                Err(bad(key, "int", why))
            }
        };
        for kind in ["heartbeat.interval", "session.timeout"] {
            let default = format!("group.consumer.{kind}.ms");
            let min = format!("group.consumer.min.{kind}.ms");
            let max = format!("group.consumer.max.{kind}.ms");
            let greater = format!("must be greater than or equal to {min}");
            require(ms(&max) >= ms(&min), &max, greater.clone())?;
            require(ms(&default) >= ms(&min), &default, greater)?;
            let less = format!("must be less than or equal to {max}");
            require(ms(&default) <= ms(&max), &default, less)?;
        }
        let heartbeat = "group.consumer.heartbeat.interval.ms";
        require(
            ms(heartbeat) < ms("group.consumer.session.timeout.ms"),
            heartbeat,
            "must be less than group.consumer.session.timeout.ms".to_string(),
        )
    }

    pub fn metrics_address(&self) -> Result<Option<SocketAddr>, ConfigError> {
        let v = self.raw("metrics.address");
        if v.is_empty() {
            return Ok(None);
        }
        v.parse()
            .map(Some)
            .map_err(|e| bad("metrics.address", "string", format!("`{v}`: {e}")))
    }
}

pub(crate) fn scale(v: &str, factor: i64) -> String {
    if factor == 1 {
        return v.to_string();
    }
    match v.parse::<i64>() {
        Ok(n) if n < 0 => "-1".to_string(),
        Ok(n) => n.saturating_mul(factor).to_string(),
        Err(_) => v.to_string(),
    }
}

pub(crate) fn bad(key: &str, expected: &'static str, detail: String) -> ConfigError {
    ConfigError::BadValue {
        key: key.to_string(),
        expected,
        detail,
    }
}

fn flatten(prefix: &str, value: &toml::Value, out: &mut Vec<(String, toml::Value)>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => out.push((prefix.to_string(), other.clone())),
    }
}

fn value_to_string(def: &ConfigDef, value: &toml::Value) -> Result<String, ConfigError> {
    let wrong = |detail: String| bad(def.name, def.ty.name(), detail);
    let text = match (def.ty, value) {
        (Boolean, toml::Value::Boolean(b)) => b.to_string(),
        (Int, toml::Value::Integer(i)) => {
            i32::try_from(*i).map_err(|_| wrong(format!("{i} does not fit in an int")))?;
            i.to_string()
        }
        (Long, toml::Value::Integer(i)) => i.to_string(),
        (Double, toml::Value::Float(f)) => f.to_string(),
        (Double, toml::Value::Integer(i)) => i.to_string(),
        (ConfigType::String | ConfigType::Password, toml::Value::String(s)) => s.clone(),
        (List, toml::Value::String(s)) => s.clone(),
        (List, toml::Value::Array(items)) => {
            let mut parts = Vec::new();
            for item in items {
                match item {
                    toml::Value::String(s) => parts.push(s.clone()),
                    other => return Err(wrong(format!("list item {other} is not a string"))),
                }
            }
            parts.join(",")
        }
        // A secret of the wrong type is still a secret: name its type, not its value.
        (_, other) if def.ty.is_sensitive() => {
            return Err(wrong(format!("got {}", other.type_str())))
        }
        (_, other) => return Err(wrong(format!("got {} `{other}`", other.type_str()))),
    };
    check_range(def, &text)?;
    Ok(text)
}

pub(crate) fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// One `id@host:port` entry of `controller.quorum.voters`.
fn parse_voter(entry: &str) -> Result<(u64, String), ConfigError> {
    let err = |detail: String| bad("controller.quorum.voters", "list", detail);
    let (id, addr) = entry
        .split_once('@')
        .ok_or_else(|| err(format!("`{entry}` is not `id@host:port`")))?;
    let id = id
        .trim()
        .parse::<u64>()
        .map_err(|e| err(format!("bad voter id in `{entry}`: {e}")))?;
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| err(format!("`{entry}` has no port")))?;
    if host.is_empty() {
        return Err(err(format!("`{entry}` has no host")));
    }
    port.parse::<u16>()
        .map_err(|e| err(format!("bad port in `{entry}`: {e}")))?;
    Ok((id, addr.to_string()))
}

/// Value checks beyond the type, for keys where a wrong value would only fail later.
/// Kafka's `StandardAuthorizer` and the ZooKeeper-era class name operators still write; both
/// mean ferry-authz's authorizer.
pub const STANDARD_AUTHORIZER_CLASSES: &[&str] = &[
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
];

fn is_standard_authorizer(class: &str) -> bool {
    STANDARD_AUTHORIZER_CLASSES.contains(&class.trim())
}

fn check_range(def: &ConfigDef, text: &str) -> Result<(), ConfigError> {
    let n = text.parse::<i64>().ok();
    let ok = match def.name {
        "num.partitions"
        | "default.replication.factor"
        | "socket.request.max.bytes"
        | "message.max.bytes"
        | "fetch.max.bytes"
        | "min.insync.replicas"
        | "replica.lag.time.max.ms"
        | "replica.fetch.max.bytes"
        | "log.index.interval.bytes"
        | "log.flush.interval.messages"
        | "broker.heartbeat.interval.ms"
        | "broker.session.timeout.ms"
        | "leader.imbalance.check.interval.seconds"
        | "remote.wal.upload.interval.ms"
        | "remote.wal.upload.max.bytes"
        | "remote.wal.buffer.max.bytes"
        | "remote.wal.fallback.ms"
        | "remote.wal.fetcher.queue.max.slices"
        | "remote.wal.metadata.topic.num.partitions"
        | "remote.wal.metadata.topic.segment.ms"
        | "remote.wal.metadata.topic.retention.ms"
        | "remote.wal.gc.interval.ms"
        | "remote.log.manager.task.interval.ms"
        | "remote.log.metadata.topic.num.partitions"
        | "replication.quota.window.num"
        | "replication.quota.window.size.seconds" => n.is_some_and(|n| n >= 1),
        "leader.replication.throttled.rate" | "follower.replication.throttled.rate" => {
            n.is_some_and(|n| n >= 0)
        }
        "leader.imbalance.per.broker.percentage" => n.is_some_and(|n| (0..=100).contains(&n)),
        "remote.wal.store" | "remote.log.storage.type" => matches!(text, "local" | "s3"),
        "remote.wal.metadata.acks" => matches!(text, "1" | "all"),
        "log.segment.bytes" | "remote.wal.metadata.topic.segment.bytes" => {
            n.is_some_and(|n| n >= 14)
        }
        "remote.wal.metadata.topic.delete.retention.ms" => n.is_some_and(|n| n >= 0),
        "remote.wal.retention.max.ms" => n.is_some_and(|n| n >= 0 || n == -1),
        "log.local.retention.ms" | "log.local.retention.bytes" => n.is_some_and(|n| n >= -2),
        "log.roll.jitter.ms"
        | "log.roll.jitter.hours"
        | "log.message.timestamp.before.max.ms"
        | "log.message.timestamp.after.max.ms" => n.is_some_and(|n| n >= 0),
        "compression.gzip.level" => n.is_some_and(|n| (1..=9).contains(&n) || n == -1),
        "compression.lz4.level" => n.is_some_and(|n| (1..=17).contains(&n)),
        "compression.zstd.level" => n.is_some_and(|n| (-131072..=22).contains(&n)),
        "remote.wal.failover.republish" => matches!(text, "comprehensive" | "optimized"),
        "log.index.size.max.bytes" => n.is_some_and(|n| n >= 8),
        "log.message.timestamp.type" => matches!(text, "CreateTime" | "LogAppendTime"),
        "log.cleanup.policy" => text
            .split(',')
            .all(|p| matches!(p.trim(), "delete" | "compact")),
        "compression.type" => matches!(
            text,
            "producer" | "none" | "gzip" | "snappy" | "lz4" | "zstd" | "uncompressed"
        ),
        "group.consumer.migration.policy" => ferry_group::MigrationPolicy::parse(text).is_some(),
        "group.consumer.assignors" => text
            .split(',')
            .all(|a| matches!(a.trim(), "uniform" | "range")),
        "process.roles" => {
            let roles = split_list(text);
            !roles.is_empty()
                && roles
                    .iter()
                    .all(|r| matches!(r.as_str(), "broker" | "controller"))
        }
        "controller.quorum.voters" => split_list(text).iter().all(|v| parse_voter(v).is_ok()),
        "replica.selector.class" => ReplicaSelector::from_class_name(text).is_some(),
        "ssl.keystore.type" | "ssl.truststore.type" => text.eq_ignore_ascii_case("PEM"),
        "ssl.client.auth" => matches!(text, "none" | "requested" | "required"),
        "ssl.endpoint.identification.algorithm" => matches!(text, "" | "https" | "HTTPS"),
        "authorizer.class.name" => text.is_empty() || is_standard_authorizer(text),
        "super.users" => ferry_authz::parse_super_users(text).is_ok(),
        "replica.high.watermark.checkpoint.interval.ms" => n.is_some_and(|n| n >= 1),
        "group.consumer.heartbeat.interval.ms" | "group.consumer.session.timeout.ms" => {
            n.is_some_and(|n| n >= 1)
        }
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(bad(
            def.name,
            def.ty.name(),
            format!("`{text}` is out of range"),
        ))
    }
}

#[cfg(test)]
#[path = "broker_config_test.rs"]
mod tests;
