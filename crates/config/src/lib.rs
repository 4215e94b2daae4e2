//! ferry's configuration, with the names Kafka operators know.
//!
//! - [`broker_config`]: the broker's one TOML file ([`BrokerConfig`]); every key declared once in
//!   [`broker_config::BROKER_CONFIGS`] with its type, default and documentation.
//! - [`listeners`]: named listeners, their security protocols and `ssl.*` settings.
//! - [`topic_config`]: topic-level keys, how a topic's effective value is resolved (override,
//!   else the broker default) and turned into the log's `LogConfig`.
//! - [`dynamic`]: the broker keys that can change at run time and the dynamic layer over the file.
//! - [`group_config`]: the configs of a GROUP resource (KIP-848 groups' session timeout and
//!   heartbeat interval, per group).
//! - [`remote_wal_config`]: the `remote.wal.*` keys as one typed struct, checked at start-up.
//! - [`tier_config`]: the long-term tier's `remote.log.*` keys, likewise.
//! - [`reference`]: the configuration reference generated from both declarations, which
//!   `ferry config-reference` prints and `docs/configuration.md` holds.
//!
//! No I/O beyond reading the config file, no networking: the broker and the tools read configs
//! through this crate.

pub mod broker_config;
pub mod dynamic;
pub mod group_config;
pub mod listeners;
pub mod reference;
pub mod remote_wal_config;
pub mod tier_config;
pub mod topic_config;
mod topic_config_table;

pub use broker_config::{BrokerConfig, ConfigSource, ConfigType};
pub use dynamic::DynamicConfigs;
