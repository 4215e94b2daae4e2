//! The `ferry` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ferry_broker::Server;
use ferry_config::BrokerConfig;
use tokio::sync::watch;

/// Huge allocations are reserved lazily so that a hostile element count cannot abort the
/// process (see `ferry::alloc`).
#[global_allocator]
static ALLOC: ferry::alloc::FerryAlloc = ferry::alloc::FerryAlloc;

#[derive(Parser)]
#[command(
    name = "ferry",
    version,
    about = "A Kafka-compatible broker with a remote WAL tier (KIP-1176)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker. Without --config: one node on 127.0.0.1:9092, data under ./data.
    Serve {
        /// TOML file with Kafka-named keys (see docs/configuration.md).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Print the configuration reference (the tables of docs/configuration.md) as Markdown.
    ConfigReference,
    /// Scrape brokers' metrics twice and report traffic and its estimated cost (remote WAL
    /// object store vs cross-AZ transfer).
    CostReport {
        /// Comma-separated metrics endpoints, `http://host:port[,...]`.
        #[arg(long)]
        metrics: String,
        /// Seconds between the two scrapes.
        #[arg(long, default_value_t = 10.0)]
        window_secs: f64,
        /// USD per 1,000 PUT-class requests.
        #[arg(long, default_value_t = 0.00113)]
        put_per_1000: f64,
        /// USD per 1,000 GET-class requests.
        #[arg(long, default_value_t = 0.00003)]
        get_per_1000: f64,
        /// USD per GB uploaded to the object store.
        #[arg(long, default_value_t = 0.0032)]
        upload_per_gb: f64,
        /// USD per GB retrieved from the object store.
        #[arg(long, default_value_t = 0.0006)]
        retrieval_per_gb: f64,
        /// USD per GB crossing AZs, each way.
        #[arg(long, default_value_t = 0.01)]
        cross_az_per_gb: f64,
    },
}

fn main() -> ExitCode {
    let huge_pages_off = ferry::alloc::disable_transparent_huge_pages();
    init_logging();
    if !huge_pages_off {
        tracing::debug!("transparent huge pages stay as the system has them (prctl refused)");
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config } => serve(config),
        Command::CostReport {
            metrics,
            window_secs,
            put_per_1000,
            get_per_1000,
            upload_per_gb,
            retrieval_per_gb,
            cross_az_per_gb,
        } => {
            let prices = ferry::cost_report::Prices {
                put_per_1000,
                get_per_1000,
                upload_per_gb,
                retrieval_per_gb,
                cross_az_per_gb_each_way: cross_az_per_gb,
            };
            cost_report(&metrics, window_secs, &prices)
        }
        Command::ConfigReference => {
            print!("{}", ferry_config::reference::reference_markdown());
            ExitCode::SUCCESS
        }
    }
}

/// The log filter of `RUST_LOG` (else `info,openraft=warn`), behind a reload layer so that
/// BROKER_LOGGER config resources can change levels at run time (ferry_broker::log_levels).
fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{reload, EnvFilter};

    let from_env = std::env::var(EnvFilter::DEFAULT_ENV)
        .ok()
        .filter(|d| EnvFilter::try_new(d).is_ok());
    let directives = from_env.unwrap_or_else(|| "info,openraft=warn".to_string());
    let (filter, handle) = reload::Layer::new(EnvFilter::new(&directives));
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .init();
    struct Reload(reload::Handle<EnvFilter, tracing_subscriber::Registry>);
    impl ferry_broker::log_levels::LogFilterReload for Reload {
        fn reload(&self, directives: &str) -> Result<(), String> {
            let filter = EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
            self.0.reload(filter).map_err(|e| e.to_string())
        }
    }
    ferry_broker::log_levels::install(&directives, std::sync::Arc::new(Reload(handle)));
}

fn serve(config_path: Option<PathBuf>) -> ExitCode {
    let config = match &config_path {
        Some(path) => BrokerConfig::load(path),
        None => Ok(BrokerConfig::default()),
    };
    // Listeners are checked together (names, protocols, ports, the inter-broker listener).
    let config = match config.and_then(|c| c.listeners().map(|_| c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ferry: invalid configuration: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(ferry::alloc::collect_when_idle)
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ferry: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let server = Server::start(config, ferry_common::system_clock()).await?;
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = tx.send(true);
        });
        server.run(rx).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("ferry stopped: {e:#}");
            eprintln!("ferry: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = int.recv() => tracing::info!("SIGINT received"),
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn cost_report(metrics: &str, window_secs: f64, prices: &ferry::cost_report::Prices) -> ExitCode {
    use ferry::cost_report::{render, sample};
    let urls: Vec<String> = metrics
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .collect();
    let run = || -> anyhow::Result<String> {
        let started = tokio::time::Instant::now();
        let a = sample(&urls)?;
        std::thread::sleep(std::time::Duration::from_secs_f64(window_secs.max(0.0)));
        let b = sample(&urls)?;
        Ok(render(&a, &b, started.elapsed().as_secs_f64(), prices))
    };
    match run() {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ferry cost-report: {e:#}");
            ExitCode::FAILURE
        }
    }
}
