//! Start-up and shutdown of a broker: open the logs, bind the listeners, start the controller,
//! accept connections, run periodic maintenance and the liveness tasks, and on shutdown first
//! hand leaderships to other replicas (controlled shutdown, still serving meanwhile), then drain
//! connections and close every log cleanly (so the next start skips recovery).

mod authentication;
mod bind;
mod connection;
mod frame_writer;
mod limits;
mod log_budget;
mod sasl;
mod throttle;

/// The writers' counts of file bytes sent and streamed, for the Fetch handler's tests.
#[cfg(test)]
pub(crate) use frame_writer::file_bytes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ferry_cluster::Endpoint;
use ferry_common::SharedClock;
use ferry_config::listeners::SecurityProtocol;
use ferry_log::LogManager;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::broker::Broker;
use crate::replica_fetcher::{ClassicFetcher, FetcherContext, FetcherSettings};
use crate::replica_manager::{IsrChange, IsrOutcome, ReplicaManager};
use crate::security::ConnectionSecurity;
use crate::tls::{ClientTls, ServerTls};
use authentication::{ImageScramCredentials, ListenerAuthentication};
use bind::UnlistenedSocket;
use ferry_cluster::metadata_store::{MetadataOptions, MetadataStore};
use ferry_config::broker_config::BrokerConfig;
use ferry_metrics::{self as metrics, Metrics, TrafficKind};
use ferry_replication::fetch_session::FetchSessionCache;

/// A running broker.
pub struct Server {
    pub broker: Arc<Broker>,
    /// The bound address of the first listener.
    pub local_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    listeners: Vec<BoundListener>,
    connection_limits: Arc<limits::ConnectionLimits>,
    metrics_listener: Option<TcpListener>,
    isr_rx: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<IsrChange>>>,
}

/// One bound Kafka listener: its socket `S` is an [`UnlistenedSocket`] until the logs are
/// loaded, then a listening `TcpListener`.
struct BoundListener<S = TcpListener> {
    name: Arc<str>,
    protocol: SecurityProtocol,
    tcp: S,
    local_addr: SocketAddr,
    /// The TLS config of an `SSL` / `SASL_SSL` listener.
    tls: Option<Arc<ServerTls>>,
    authentication: ListenerAuthentication,
    /// Its connection count and own `max.connections`, if any.
    slots: Arc<limits::ListenerSlots>,
}

impl BoundListener<UnlistenedSocket> {
    /// Starts listening (see [`bind`]).
    fn listen(self) -> anyhow::Result<BoundListener> {
        let tcp = self.tcp.listen(bind::LISTEN_BACKLOG).with_context(|| {
            format!(
                "listening on listener `{}` at {}",
                self.name, self.local_addr
            )
        })?;
        Ok(BoundListener {
            name: self.name,
            protocol: self.protocol,
            tcp,
            local_addr: self.local_addr,
            tls: self.tls,
            authentication: self.authentication,
            slots: self.slots,
        })
    }
}

/// A broker between [`Server::bind`] and [`Starting::open`]: its listeners are bound (their
/// ports known, so its advertised endpoints are) but not listening, and its logs not loaded.
pub struct Starting {
    config: BrokerConfig,
    clock: SharedClock,
    listeners: Vec<BoundListener<UnlistenedSocket>>,
    connection_limits: Arc<limits::ConnectionLimits>,
    scram: Arc<ImageScramCredentials>,
    advertised: Advertised,
    metrics_address: Option<SocketAddr>,
}

/// This broker's advertised endpoints, registered in the cluster metadata, and which of them
/// other brokers use.
#[derive(Debug, Clone)]
pub struct Advertised {
    pub endpoints: Vec<Endpoint>,
    /// `inter.broker.listener.name`; one of `endpoints`.
    pub inter_broker: String,
}

impl Advertised {
    /// One `PLAINTEXT` listener at `host:port` (tests, and the default config).
    pub fn plaintext(host: &str, port: u16) -> Self {
        Self {
            endpoints: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: host.into(),
                port,
                security_protocol: "PLAINTEXT".into(),
            }],
            inter_broker: "PLAINTEXT".into(),
        }
    }

    /// The inter-broker listener's endpoint.
    fn inter_broker_endpoint(&self) -> anyhow::Result<&Endpoint> {
        self.endpoints
            .iter()
            .find(|e| e.name == self.inter_broker)
            .with_context(|| {
                format!(
                    "inter-broker listener `{}` has no endpoint",
                    self.inter_broker
                )
            })
    }

    /// The inter-broker listener's endpoint and its security protocol.
    fn inter_broker_protocol(&self) -> anyhow::Result<(&Endpoint, SecurityProtocol)> {
        let endpoint = self.inter_broker_endpoint()?;
        let protocol = SecurityProtocol::parse(&endpoint.security_protocol)
            .with_context(|| format!("security protocol `{}`", endpoint.security_protocol))?;
        Ok((endpoint, protocol))
    }
}

/// Where a broker keeps the cluster metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataQuorum {
    /// The controller quorum (`controller.quorum.voters`; alone by default), durable in
    /// `metadata.log.dir`: what `ferry serve` runs.
    Controller,
    /// A local quorum of one without Raft, kept in memory (`MetadataStore::local`): for tests
    /// that build a broker without a controller.
    Local,
}

/// Opens the logs, the remote WAL's stores and the metadata, and wires the broker's state
/// together (the handles, the WAL, the replica fetcher and the `Broker`, in that order). Binds
/// nothing and starts no task: [`Server::start`] adds the listeners, [`Server::run`] the tasks,
/// and a handler test can use the `Broker` as it is. `advertised` is this broker's endpoints as
/// registered in the metadata. Returns the broker and the receiving end of its ISR changes.
pub async fn open_broker(
    config: BrokerConfig,
    clock: SharedClock,
    advertised: Advertised,
    quorum: MetadataQuorum,
) -> anyhow::Result<(Arc<Broker>, tokio::sync::mpsc::UnboundedReceiver<IsrChange>)> {
    let peer_tls = inter_broker_tls(&config, &advertised)?;
    let peer_login = inter_broker_sasl(&config, &advertised)?;
    let controller_tls = controller_tls(&config)?;
    let dirs = config.log_dirs();
    // An older ferry's metadata file lives in the first log dir.
    let legacy_dir = dirs.first().context("log.dirs is empty")?.clone();
    let space_reserve = open_space_reserve(&config)?;
    let logs = LogManager::open_with_reserve(dirs, clock.clone(), space_reserve.clone())
        .context("opening log dirs")?;
    let on_disk = logs.partitions_on_disk();
    let dir_spaces = logs.dir_spaces();
    let replicas = Arc::new(ReplicaManager::new(logs, config.node_id()));

    // The remote WAL's keys and buckets are checked before the controller starts; the WAL
    // itself is built once the handles it uses exist (crate::host).
    let wal_config = ferry_config::remote_wal_config::RemoteWalConfig::from_broker(&config)
        .context("setting up the remote WAL (remote.wal.*)")?;
    let wal_metrics = ferry_wal::metrics::RemoteWalMetrics::new();
    let wal_stores = crate::remote_wal::store::Stores::open(&wal_config, &wal_metrics.objstore)
        .await
        .context("setting up the remote WAL (remote.wal.*)")?;
    let tier_config = ferry_config::tier_config::TierConfig::from_broker(&config)
        .context("setting up the long-term tier (remote.log.*)")?;
    let tier_metrics = crate::tier::TierMetrics::default();
    let integrity = Arc::new(crate::corruption::Integrity::new());
    let metrics = Arc::new(Metrics::with_extra(|r| {
        wal_metrics.register(r);
        integrity.metrics.register(r);
        if tier_config.enabled {
            tier_metrics.register(r);
        }
    }));
    let scrape_clock = clock.clone();
    metrics.on_scrape(move |m| {
        for space in &dir_spaces {
            // A full dir looks at its free space when asked: an idle one clears here too.
            let _ = space.check_room(scrape_clock.now_ms());
            let dir = ferry_metrics::LogDirLabels {
                dir: space.path().display().to_string(),
            };
            m.log_dir_full
                .get_or_create(&dir)
                .set(i64::from(space.is_full()));
        }
    });
    let metadata = Arc::new(
        open_metadata(
            &config,
            &metrics,
            legacy_dir,
            advertised.clone(),
            quorum,
            controller_tls.as_deref(),
            space_reserve,
        )
        .await?,
    );

    let offsets_store = Arc::new(crate::group_store::LogOffsetsStore::new(
        clock.clone(),
        Duration::from_millis(config.offsets_commit_timeout_ms()),
    ));
    let groups = ferry_group::GroupCoordinator::new(
        config.group_config(),
        clock.clone(),
        offsets_store.clone(),
        Arc::new(crate::group_store::MetadataCatalog(metadata.clone())),
    );
    let txn_store = Arc::new(crate::txn_store::LogTxnStateStore::new(
        clock.clone(),
        // Kafka's `transaction.state.log` appends wait as long as offset commits do.
        Duration::from_millis(config.offsets_commit_timeout_ms()),
    ));
    let txn_markers = Arc::new(crate::txn_markers::BrokerMarkerWriter::default());
    let txns = ferry_txn::TransactionCoordinator::new(
        config.txn_config(),
        clock.clone(),
        ferry_txn::TxnSeams {
            store: txn_store.clone(),
            markers: txn_markers.clone(),
            producer_ids: Arc::new(crate::txn_store::ControllerProducerIds(metadata.clone())),
            catalog: Arc::new(crate::txn_store::ImagePartitions(metadata.clone())),
        },
    );
    let (isr_tx, isr_rx) = tokio::sync::mpsc::unbounded_channel();
    let peers = crate::inter_broker::PeerClient::new(
        metadata.clone(),
        metrics.clone(),
        &advertised.inter_broker,
        peer_tls,
        peer_login,
    );
    let host = crate::host::HostHandles {
        node_id: config.node_id(),
        config: Arc::new(config.clone()),
        clock: clock.clone(),
        metadata: metadata.clone(),
        replicas: Arc::downgrade(&replicas),
        peers: peers.clone(),
        metrics: metrics.clone(),
    };
    let tier = crate::tier::Tier::open(
        tier_config,
        host.clone(),
        &wal_metrics.objstore,
        tier_metrics,
    )
    .await?;
    let remote_wal = Arc::new(crate::remote_wal::RemoteWal::with_stores(
        wal_config,
        wal_stores,
        wal_metrics,
        clock.clone(),
        Some(host),
        tier.clone(),
    ));
    let replication_throttles = Arc::new(crate::replication_throttle::ReplicationThrottles::new(
        &config,
        config.node_id(),
    ));
    let fetcher = ClassicFetcher::new(FetcherContext {
        node_id: config.node_id(),
        throttles: replication_throttles.clone(),
        metrics: metrics.clone(),
        peers: peers.clone(),
        settings: FetcherSettings {
            wait_max_ms: config.replica_fetch_wait_max_ms(),
            partition_max_bytes: config.replica_fetch_max_bytes(),
            max_bytes: config.fetch_max_bytes(),
        },
        observer: remote_wal.clone(),
        tier: tier
            .clone()
            .map(|t| t as Arc<dyn crate::replica_fetcher::TierAuxSource>),
    });
    let acls = crate::acl::AclAuthority::new(config.authorizer_config());
    let (windows, window_seconds) = config.quota_windows();
    let quota_rate = ferry_quota::RateConfig::from_broker_config(windows, window_seconds)
        .context("quota.window.num / quota.window.size.seconds")?;
    let quotas = crate::client_quotas::ClientQuotas::new(ferry_quota::QuotaManagerConfig {
        rate: quota_rate,
        ..Default::default()
    });
    let broker = Arc::new(Broker {
        fetcher: Box::new(fetcher),
        peers,
        replication: remote_wal.clone(),
        remote_wal: remote_wal.clone(),
        tier,
        isr_changes: isr_tx,
        groups,
        offsets_store,
        group_init: std::sync::Mutex::new(()),
        txns,
        txn_store,
        txn_init: std::sync::Mutex::new(()),
        txn_leadership: std::sync::Mutex::new(()),
        offsets_leadership: std::sync::Mutex::new(()),
        node_id: config.node_id(),
        config,
        clock,
        metadata,
        replicas,
        fetch_sessions: FetchSessionCache::default(),
        metrics,
        endpoints: advertised.endpoints,
        acls,
        quotas,
        replication_throttles,
        controller_tls,
        integrity,
    });
    txn_markers.attach(&broker);
    open_known_topics(&broker, on_disk);
    Ok((broker, isr_rx))
}

/// The TLS client towards the inter-broker listener when its protocol uses TLS.
fn inter_broker_tls(
    config: &BrokerConfig,
    advertised: &Advertised,
) -> anyhow::Result<Option<Arc<ClientTls>>> {
    let (endpoint, protocol) = advertised.inter_broker_protocol()?;
    if !protocol.uses_tls() {
        return Ok(None);
    }
    let settings = config.ssl_settings(&endpoint.name)?;
    let tls = crate::tls::client(&endpoint.name, settings)
        .context("setting up TLS towards other brokers (inter.broker.listener.name)")?;
    Ok(Some(Arc::new(tls)))
}

/// The controller quorum's TLS when the controller listener (the first of
/// `controller.listener.names`) is `SSL`; `PLAINTEXT` or none: plain TCP.
fn controller_tls(config: &BrokerConfig) -> anyhow::Result<Option<Arc<crate::tls::ControllerTls>>> {
    let Some((name, protocol)) = config.controller_listener()? else {
        return Ok(None);
    };
    match protocol {
        SecurityProtocol::Plaintext => return Ok(None),
        SecurityProtocol::Ssl => {}
        SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => anyhow::bail!(
            "controller listener `{name}` is {protocol}: the controller quorum does not serve SASL; map it to SSL or PLAINTEXT (controller.listener.names, listener.security.protocol.map)"
        ),
    }
    let settings = config.ssl_settings(&name)?;
    let tls = crate::tls::ControllerTls::new(&name, settings)
        .context("setting up TLS on the controller quorum (controller.listener.names)")?;
    Ok(Some(Arc::new(tls)))
}

/// This broker's SASL login towards the inter-broker listener when its protocol uses SASL.
fn inter_broker_sasl(
    config: &BrokerConfig,
    advertised: &Advertised,
) -> anyhow::Result<Option<Arc<crate::inter_broker::PeerLogin>>> {
    let (endpoint, protocol) = advertised.inter_broker_protocol()?;
    if !protocol.uses_sasl() {
        return Ok(None);
    }
    let login = authentication::inter_broker_login(config, &endpoint.name)
        .context("setting up SASL towards other brokers (inter.broker.listener.name)")?;
    Ok(Some(Arc::new(login)))
}

/// The disk space held back for the metadata log (`metadata.log.reserve.bytes`), in its dir.
fn open_space_reserve(config: &BrokerConfig) -> anyhow::Result<Arc<ferry_common::SpaceReserve>> {
    let dir = config
        .metadata_log_dir()
        .context("log.dirs is empty and metadata.log.dir is not set")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("space-reserve.dat");
    let reserve =
        ferry_common::SpaceReserve::open(path.clone(), config.metadata_log_reserve_bytes())
            .with_context(|| format!("writing the metadata space reserve {}", path.display()))?;
    if !reserve.is_held() && reserve.bytes() > 0 {
        tracing::warn!(path = %path.display(), "the disk is full: starting without the metadata space reserve");
    }
    Ok(Arc::new(reserve))
}

/// Opens the cluster metadata on `quorum`, registering this broker at `advertised`; the
/// controller's traffic is counted in `metrics`.
async fn open_metadata(
    config: &BrokerConfig,
    metrics: &Arc<Metrics>,
    legacy_dir: PathBuf,
    advertised: Advertised,
    quorum: MetadataQuorum,
    controller_tls: Option<&crate::tls::ControllerTls>,
    space_reserve: Arc<ferry_common::SpaceReserve>,
) -> anyhow::Result<MetadataStore> {
    let voters = config.controller_quorum_voters()?;
    let metadata_dir = config
        .metadata_log_dir()
        .context("log.dirs is empty and metadata.log.dir is not set")?;
    let controller_metrics = metrics.clone();
    let traffic = ferry_cluster::TrafficObserver::new(move |peer, t| {
        let peer = peer.and_then(|p| i32::try_from(p).ok());
        controller_metrics.inter_broker(TrafficKind::Controller, peer, t.sent, t.received);
    });
    let inter_broker = advertised.inter_broker_endpoint()?;
    let (host, port) = (inter_broker.host.clone(), inter_broker.port);
    let options = MetadataOptions {
        traffic: Some(traffic),
        quorum_tls: controller_tls.map(|t| t.quorum()),
        node_id: config.node_id(),
        dir: metadata_dir.clone(),
        legacy_dir,
        voters,
        rack: config.rack(),
        host,
        port,
        endpoints: advertised.endpoints,
        unclean_leader_election: config.unclean_leader_election(),
        space_reserve,
    };
    Ok(match quorum {
        // Start-up blocks on the controller (election, registration, a one-time import).
        MetadataQuorum::Controller => {
            tokio::task::spawn_blocking(move || MetadataStore::open(options))
                .await
                .context("metadata start-up task")?
                .with_context(|| format!("starting the controller in {}", metadata_dir.display()))?
        }
        MetadataQuorum::Local => {
            MetadataStore::local(&options).context("starting a local metadata quorum")?
        }
    })
}

/// Opens the logs of the topics the metadata knows and the consumer groups, and names the
/// log directories of topics it does not know (left untouched).
fn open_known_topics(broker: &Arc<Broker>, on_disk: Vec<ferry_common::TopicPartition>) {
    broker
        .metrics
        .set_peer_racks(crate::broker::peer_racks(&broker.metadata.image()));
    {
        // The image-apply lock, as `Broker::open_topic`: the image task is not running yet,
        // but the logs opened must be those of the image read under it.
        let _applying = broker.replicas.image_apply_guard();
        let image = broker.metadata.image();
        let topics: Vec<_> = image
            .topics
            .values()
            .map(|t| {
                let config = ferry_config::topic_config::log_config(&broker.config, &t.configs);
                (t, config)
            })
            .collect();
        let threads = broker.config.log_recovery_threads();
        // One damaged partition must not keep the others offline: each is logged, the others
        // are open.
        for (topic, e) in broker.replicas.open_topics(&topics, threads) {
            tracing::error!(topic = %topic, error = %e, "cannot open every log of a topic");
        }
    }
    broker.replicas.resume_log_dir_moves();
    let offline_dirs = broker.replicas.logs().offline_dirs().len();
    broker
        .metrics
        .offline_log_dirs
        .set(i64::try_from(offline_dirs).unwrap_or(i64::MAX));
    if broker
        .metadata
        .topic(crate::group_store::OFFSETS_TOPIC)
        .is_some()
    {
        if let Err(e) = broker.ensure_group_coordinator() {
            tracing::error!(error = %e.message, "cannot load consumer groups");
        }
    }
    for tp in on_disk {
        if broker.metadata.topic(&tp.topic).is_none() {
            tracing::warn!(partition = %tp, "log directory of an unknown topic left untouched");
        }
    }
}

impl Starting {
    /// The bound address of each listener, by name (not listening yet).
    pub fn listener_addrs(&self) -> Vec<(String, SocketAddr)> {
        self.listeners
            .iter()
            .map(|l| (l.name.to_string(), l.local_addr))
            .collect()
    }

    /// Opens the broker's state on the controller quorum ([`open_broker`]: every log loaded,
    /// recovered after an unclean shutdown), then listens on the listeners and binds the
    /// metrics listener.
    pub async fn open(self) -> anyhow::Result<Server> {
        let Starting {
            config,
            clock,
            listeners,
            connection_limits,
            scram,
            advertised,
            metrics_address,
        } = self;
        let (broker, isr_rx) =
            open_broker(config, clock, advertised, MetadataQuorum::Controller).await?;
        scram.attach(broker.metadata.clone());
        let listeners = listeners
            .into_iter()
            .map(BoundListener::listen)
            .collect::<anyhow::Result<Vec<_>>>()?;
        let local_addr = listeners
            .first()
            .map(|l| l.local_addr)
            .context("no listener")?;
        let metrics_listener = match metrics_address {
            Some(addr) => Some(
                metrics::bind(addr)
                    .await
                    .with_context(|| format!("binding metrics.address {addr}"))?,
            ),
            None => None,
        };
        let metrics_addr = match &metrics_listener {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        Ok(Server {
            isr_rx: std::sync::Mutex::new(Some(isr_rx)),
            broker,
            local_addr,
            metrics_addr,
            listeners,
            connection_limits,
            metrics_listener,
        })
    }
}

impl Server {
    /// Binds the listeners (their TLS files read and checked), opens the broker's state on the
    /// controller quorum ([`open_broker`]: every log loaded), then listens and binds the
    /// metrics listener: [`Server::bind`] then [`Starting::open`]. Connections wait in the
    /// backlog until [`Server::run`] accepts them.
    pub async fn start(config: BrokerConfig, clock: SharedClock) -> anyhow::Result<Self> {
        Self::bind(config, clock)?.open().await
    }

    /// Checks the config and binds the listeners without listening: a client connecting now
    /// is refused (not left waiting on a broker that cannot serve it yet), as with Kafka,
    /// which opens its sockets only once its logs are loaded.
    pub fn bind(config: BrokerConfig, clock: SharedClock) -> anyhow::Result<Starting> {
        let roles = config.process_roles();
        if !roles.iter().any(|r| r == "broker") || !roles.iter().any(|r| r == "controller") {
            anyhow::bail!(
                "process.roles = {:?}: only `broker,controller` (a combined node) is supported yet",
                roles.join(",")
            );
        }
        let configured = config.listeners()?;
        config.check_group_consumer_timeouts()?;
        let (per_ip, per_ip_overrides) = config.max_connections_per_ip()?;
        let connection_limits =
            limits::ConnectionLimits::new(config.max_connections(), per_ip, per_ip_overrides);
        let scram = Arc::new(ImageScramCredentials::default());
        let mut listeners = Vec::new();
        let mut endpoints = Vec::new();
        for l in &configured.listeners {
            let tls = if l.protocol.uses_tls() {
                let settings = config.ssl_settings(&l.name)?;
                let tls = crate::tls::server(&l.name, settings)
                    .with_context(|| format!("setting up TLS for listener `{}`", l.name))?;
                Some(Arc::new(tls))
            } else {
                None
            };
            let authentication = ListenerAuthentication::from_config(
                &config,
                &l.name,
                l.protocol,
                scram.clone(),
                clock.clone(),
            )?;
            let slots = limits::ListenerSlots::new(
                config.listener_max_connections(&l.name),
                l.name == configured.inter_broker,
            );
            let tcp = UnlistenedSocket::bind(l.bind)
                .with_context(|| format!("binding listener `{}` on {}", l.name, l.bind))?;
            let local_addr = tcp.local_addr();
            let (host, port) = l.advertised(local_addr);
            endpoints.push(Endpoint {
                name: l.name.clone(),
                host,
                port,
                security_protocol: l.protocol.name().into(),
            });
            listeners.push(BoundListener {
                name: l.name.as_str().into(),
                protocol: l.protocol,
                tcp,
                local_addr,
                tls,
                authentication,
                slots,
            });
        }
        if listeners.is_empty() {
            anyhow::bail!("no listener");
        }
        let advertised = Advertised {
            endpoints,
            inter_broker: configured.inter_broker.clone(),
        };
        let metrics_address = config.metrics_address()?;
        Ok(Starting {
            config,
            clock,
            listeners,
            connection_limits,
            scram,
            advertised,
            metrics_address,
        })
    }
    /// The bound address of each listener, by name.
    pub fn listener_addrs(&self) -> Vec<(String, SocketAddr)> {
        self.listeners
            .iter()
            .map(|l| (l.name.to_string(), l.local_addr))
            .collect()
    }

    /// Serves until `shutdown` turns true, then drains connections and closes the logs.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
        let broker = self.broker;
        for l in &self.listeners {
            let advertised = broker
                .advertised(&l.name)
                .map(|(h, p)| format!("{h}:{p}"))
                .unwrap_or_default();
            tracing::info!(listener = %l.name, protocol = %l.protocol, bound = %l.local_addr,
                %advertised, "listener bound");
        }
        tracing::info!(
            listener = %self.local_addr,
            metrics = ?self.metrics_addr,
            cluster_id = %broker.metadata.cluster_id(),
            "ferry listening on {}",
            self.local_addr
        );
        let mut background = JoinSet::new();
        if let Some(l) = self.metrics_listener {
            background.spawn(metrics::serve(l, broker.metrics.clone()));
        }
        background.spawn(maintenance(broker.clone()));
        background.spawn(log_cleaner(broker.clone()));
        background.spawn(group_timers(broker.clone()));
        background.spawn(txn_timers(broker.clone()));
        background.spawn(follow_image(broker.clone()));
        broker.remote_wal.clone().spawn(&mut background);
        if let Some(tier) = &broker.tier {
            tier.spawn(&mut background);
        }
        background.spawn(isr_shrink(broker.clone()));
        crate::liveness::spawn(&broker, &mut background);
        background.spawn(checkpoint_high_watermarks(broker.clone()));
        let every_dir_failed = Arc::new(tokio::sync::Notify::new());
        background.spawn(log_dir_failures(broker.clone(), every_dir_failed.clone()));
        let (scrub, bytes_per_second, interval) = broker.config.log_scrubber();
        // Without scans it still repairs what the fetch path finds.
        let scrubber = crate::corruption::scrubber::Scrubber {
            node_id: broker.node_id,
            replicas: Arc::downgrade(&broker.replicas),
            peers: broker.peers.clone(),
            integrity: broker.integrity.clone(),
            settings: crate::corruption::scrubber::ScrubberSettings {
                scan: scrub,
                bytes_per_second,
                interval,
            },
        };
        background.spawn(scrubber.run());
        let isr_rx = self.isr_rx.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(rx) = isr_rx {
            background.spawn(propose_isr_changes(broker.clone(), rx));
        }

        let mut tls_configs: Vec<Arc<ServerTls>> = self
            .listeners
            .iter()
            .filter_map(|l| l.tls.clone())
            .collect();
        let mut tls_clients: Vec<Arc<ClientTls>> = broker.peers.tls().into_iter().collect();
        if let Some(controller) = &broker.controller_tls {
            tls_configs.push(controller.server.clone());
            tls_clients.push(controller.client.clone());
        }
        if !tls_configs.is_empty() || !tls_clients.is_empty() {
            background.spawn(reload_tls(tls_configs, tls_clients));
        }
        let (accepted_tx, mut accepted_rx) = mpsc::channel(64);
        let mut accepting = JoinSet::new();
        let mut on_listener = Vec::new();
        for (i, l) in self.listeners.into_iter().enumerate() {
            accepting.spawn(accept(
                l.tcp,
                i,
                accepted_tx.clone(),
                self.connection_limits.clone(),
                l.slots.clone(),
                broker.metrics.clone(),
            ));
            on_listener.push((l.name, l.protocol, l.tls, l.authentication));
        }
        drop(accepted_tx);

        let mut connections = JoinSet::new();
        let (stop_tx, stop_rx) = watch::channel(false);
        // Set once shutdown is asked for: the controlled shutdown, during which clients and
        // followers are still served (they learn of the new leaders from the metadata).
        let mut handing_over: Option<
            std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
        > = None;
        loop {
            tokio::select! {
                Some((stream, peer, i, permit)) = accepted_rx.recv() => {
                    let (name, protocol, tls, authentication) = &on_listener[i];
                    let security = ConnectionSecurity {
                        listener: name.clone(),
                        protocol: *protocol,
                        peer_cert_subject: None,
                    };
                    let setup = connection::ListenerSetup {
                        tls: tls.as_ref().map(|t| t.current()),
                        authentication: authentication.clone(),
                    };
                    let serving = connection::serve(broker.clone(), stream, peer, security, setup, stop_rx.clone());
                    // The permit holds the connection's slots until it closes.
                    connections.spawn(async move { serving.await; drop(permit) });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                _ = shutdown.changed(), if handing_over.is_none() => {
                    if *shutdown.borrow() {
                        handing_over = Some(Box::pin(crate::liveness::controlled_shutdown(broker.clone())));
                    }
                }
                // As Kafka does, a broker without a log dir left stops (it could serve nothing).
                _ = every_dir_failed.notified(), if handing_over.is_none() => {
                    tracing::error!("every log dir is offline; shutting down");
                    handing_over = Some(Box::pin(crate::liveness::controlled_shutdown(broker.clone())));
                }
                _ = async {
                    match handing_over.as_mut() {
                        Some(f) => f.await,
                        None => std::future::pending().await,
                    }
                }, if handing_over.is_some() => break,
            }
        }
        tracing::info!("shutting down: draining connections");
        accepting.abort_all();
        let _ = stop_tx.send(true);
        let drained = tokio::time::timeout(Duration::from_secs(10), async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!("some connections did not finish within 10 s; closing logs anyway");
            connections.abort_all();
        }
        background.abort_all();
        broker.fetcher.shutdown();
        let b = broker.clone();
        tokio::task::spawn_blocking(move || b.replicas.shutdown())
            .await
            .context("log shutdown task")?
            .context("closing logs")?;
        tracing::info!("logs closed cleanly");
        let b = broker.clone();
        tokio::task::spawn_blocking(move || b.metadata.shutdown())
            .await
            .context("controller shutdown task")?;
        tracing::info!("controller stopped");
        Ok(())
    }
}

/// A connection accepted on listener number `index`, with the slots it holds.
type Accepted = (TcpStream, SocketAddr, usize, limits::ConnectionPermit);

/// Too many connections from one address are refused with a log line, a few per ten seconds.
static REFUSED_CONNECTIONS: log_budget::LogBudget =
    log_budget::LogBudget::new(10, Duration::from_secs(10));

/// Accepts connections on listener number `index`, within the connection limits, and hands
/// them to the server loop.
async fn accept(
    listener: TcpListener,
    index: usize,
    accepted: mpsc::Sender<Accepted>,
    limits: Arc<limits::ConnectionLimits>,
    slots: Arc<limits::ListenerSlots>,
    metrics: Arc<Metrics>,
) {
    loop {
        // At max.connections new clients wait in the backlog, unread, as in Kafka.
        limits.wait_for_slot(&slots).await;
        match listener.accept().await {
            Ok((stream, peer)) => {
                let Some(permit) = limits.admit(&slots, peer.ip()) else {
                    metrics.connections_refused.inc();
                    if let Some(left_out) = REFUSED_CONNECTIONS.admit(tokio::time::Instant::now()) {
                        tracing::info!(%peer, similar_messages_left_out = left_out,
                            "connection refused: max.connections.per.ip reached for this address");
                    }
                    continue;
                };
                let _ = stream.set_nodelay(true);
                if accepted.send((stream, peer, index, permit)).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                // Typically EMFILE; back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Every [`crate::tls::RELOAD_CHECK`], rebuilds the TLS configs whose key store or trust store
/// files changed, off the async workers; new connections then use them.
async fn reload_tls(servers: Vec<Arc<ServerTls>>, clients: Vec<Arc<ClientTls>>) {
    let mut tick = tokio::time::interval(crate::tls::RELOAD_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let (servers, clients) = (servers.clone(), clients.clone());
        let checked = tokio::task::spawn_blocking(move || {
            for s in &servers {
                s.reload_if_changed();
            }
            for c in &clients {
                c.reload_if_changed();
            }
        })
        .await;
        if let Err(e) = checked {
            tracing::error!(error = %e, "TLS reload task panicked");
        }
    }
}

/// Retention, segment.ms rolls and flushes, every `log.retention.check.interval.ms`.
async fn maintenance(broker: Arc<Broker>) {
    let period = Duration::from_millis(broker.config.retention_check_interval_ms());
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tick.tick().await;
        let b = broker.clone();
        match tokio::task::spawn_blocking(move || b.replicas.logs().run_maintenance()).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::info!(segments = n, "retention deleted segments"),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "log maintenance failed");
                // It may have taken a failed dir offline.
                broker.replicas.failures().wake();
            }
            Err(e) => tracing::error!(error = %e, "log maintenance task panicked"),
        }
    }
}

/// The log cleaner: a pass over the compacted logs every `log.cleaner.backoff.ms` (Kafka's
/// cleaner threads sleep that long when no log needs cleaning), on its own task so that a long
/// retention interval does not hold compaction back.
async fn log_cleaner(broker: Arc<Broker>) {
    let period = Duration::from_millis(broker.config.cleaner_backoff_ms());
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let b = broker.clone();
        match tokio::task::spawn_blocking(move || b.replicas.logs().clean_dirty_logs()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::error!(error = %e, "log cleaning failed");
                // It may have taken a failed dir offline.
                broker.replicas.failures().wake();
            }
            Err(e) => tracing::error!(error = %e, "log cleaner task panicked"),
        }
    }
}

/// Every `replica.high.watermark.checkpoint.interval.ms`, each log dir's
/// `replication-offset-checkpoint` (also written at shutdown by the replica manager).
async fn checkpoint_high_watermarks(broker: Arc<Broker>) {
    let period = Duration::from_millis(broker.config.high_watermark_checkpoint_interval_ms());
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let b = broker.clone();
        match tokio::task::spawn_blocking(move || b.replicas.checkpoint_high_watermarks()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "high-watermark checkpoint failed");
                broker.replicas.failures().wake();
            }
            Err(e) => tracing::error!(error = %e, "high-watermark checkpoint task panicked"),
        }
    }
}

/// Takes log dirs offline as their partitions report disk failures (Kafka's
/// `LogDirFailureHandler`): stops the fetchers of their partitions, sets the metric, and tells
/// the controller at once, which moves the leaderships. Notifies `every_dir_failed` when no
/// dir is left.
async fn log_dir_failures(broker: Arc<Broker>, every_dir_failed: Arc<tokio::sync::Notify>) {
    loop {
        broker.replicas.failures().wait().await;
        let b = broker.clone();
        let newly =
            match tokio::task::spawn_blocking(move || b.replicas.handle_log_dir_failures()).await {
                Ok(newly) => newly,
                Err(e) => {
                    tracing::error!(error = %e, "log dir failure task panicked");
                    continue;
                }
            };
        if newly.is_empty() {
            continue;
        }
        broker.fetcher.sync(broker.replicas.all());
        let logs = broker.replicas.logs();
        let offline = logs.offline_dirs().len();
        broker
            .metrics
            .offline_log_dirs
            .set(i64::try_from(offline).unwrap_or(i64::MAX));
        if offline == logs.log_dirs().len() {
            every_dir_failed.notify_one();
            return;
        }
        crate::liveness::report_offline_replicas(&broker).await;
    }
}

/// Session, rebalance and join-delay deadlines of consumer groups.
async fn group_timers(broker: Arc<Broker>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if broker.offsets_store.is_ready() {
            broker.groups.tick();
        }
    }
}

/// Aborts of transactions past their timeout and expiry of idle transactional ids.
async fn txn_timers(broker: Arc<Broker>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if broker.txn_store.is_ready() {
            broker.txns.tick().await;
        }
    }
}

/// Follows the controller's image: partitions this broker hosts, leader or follower, fetchers.
async fn follow_image(broker: Arc<Broker>) {
    let mut rx = broker.metadata.subscribe();
    loop {
        let image = rx.borrow_and_update().clone();
        let b = broker.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || b.apply_image(&image)).await {
            tracing::error!(error = %e, "applying the metadata image panicked");
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Every half `replica.lag.time.max.ms`, partitions led here drop lagging followers from the ISR.
async fn isr_shrink(broker: Arc<Broker>) {
    let lag = broker.config.replica_lag_time_max_ms();
    let period = Duration::from_millis(u64::try_from(lag / 2).unwrap_or(1000).max(10));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for p in broker.replicas.all() {
            if let Some(change) = p.isr_shrink(lag) {
                tracing::info!(
                    partition = %p.tp,
                    isr = ?change.new_isr,
                    log_end_offset = p.log.log_end_offset(),
                    high_watermark = p.high_watermark(),
                    // (replica, its log end offset, ms since it last caught up)
                    out_of_sync = ?p.dropped_followers(&change),
                    "shrinking the ISR"
                );
                let _ = broker.isr_changes.send(change);
            }
        }
    }
}

/// Proposes the ISR changes of partitions led here, one at a time. Each partition has at most
/// one in flight ([`crate::replica_manager::Partition::isr_change_finished`] holds the next
/// back until the image shows a new state of it), so a refusal is logged once, at debug.
async fn propose_isr_changes(
    broker: Arc<Broker>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<IsrChange>,
) {
    while let Some(change) = rx.recv().await {
        let b = broker.clone();
        let c = change.clone();
        let outcome = match tokio::task::spawn_blocking(move || b.propose_isr_change(&c)).await {
            Ok((outcome, isr)) => {
                if outcome == IsrOutcome::Committed {
                    tracing::info!(topic_id = %change.topic_id, partition = change.partition, ?isr, "ISR changed");
                }
                outcome
            }
            Err(e) => {
                tracing::error!(error = %e, "ISR change task panicked");
                IsrOutcome::Unavailable
            }
        };
        if let Some(p) = broker
            .replicas
            .all()
            .into_iter()
            .find(|p| p.topic_id == change.topic_id && p.tp.partition == change.partition)
        {
            p.isr_change_finished(&change, outcome);
        }
    }
}
