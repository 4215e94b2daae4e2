//! Log levels changed at run time through BROKER_LOGGER config resources (KIP-412), as
//! `kafka-configs.sh --entity-type broker-loggers` does with a Kafka broker's log4j loggers.
//!
//! A logger is a `tracing` target (a crate such as `ferry_broker`, or a module path); `root` is
//! the default level of every target nothing else names. [`LogLevels`] owns the levels set at
//! run time over the filter the process started with, and turns them into `EnvFilter`
//! directives; the process (the `ferry` binary, which owns the subscriber) installs one
//! [`LogFilterReload`] that applies them. Levels set here are not persisted: a restart starts
//! from `RUST_LOG` again, as a Kafka broker starts from its log4j file.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Applies a new set of `EnvFilter` directives to the process's subscriber.
pub trait LogFilterReload: Send + Sync {
    fn reload(&self, directives: &str) -> Result<(), String>;
}

/// The loggers always listed: ferry's crates and the libraries that log the most.
const KNOWN_LOGGERS: &[&str] = &[
    "ferry",
    "ferry_auth",
    "ferry_authz",
    "ferry_broker",
    "ferry_cluster",
    "ferry_config",
    "ferry_group",
    "ferry_log",
    "ferry_objstore",
    "ferry_protocol",
    "ferry_quota",
    "ferry_replication",
    "ferry_txn",
    "ferry_wal",
    "openraft",
];

pub const ROOT_LOGGER: &str = "root";

/// The levels of the process's loggers: the start-up filter plus what was set since.
#[derive(Debug, Clone)]
pub struct LogLevels {
    /// The root level and per-target levels the process started with.
    root: String,
    base: BTreeMap<String, String>,
    /// Levels set at run time, by logger (`root` included).
    set: BTreeMap<String, String>,
}

/// Kafka's (log4j's) level names, and `tracing`'s level for each.
fn tracing_level(level: &str) -> Option<&'static str> {
    Some(match level.to_ascii_uppercase().as_str() {
        "TRACE" | "ALL" => "trace",
        "DEBUG" => "debug",
        "INFO" => "info",
        "WARN" => "warn",
        "ERROR" | "FATAL" => "error",
        "OFF" => "off",
        _ => return None,
    })
}

impl LogLevels {
    /// Reads the start-up filter's directives (`info,openraft=warn`); directives with span
    /// or field filters are kept as they are, under their target.
    pub fn from_directives(directives: &str) -> Self {
        let mut root = "info".to_string();
        let mut base = BTreeMap::new();
        for d in directives
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
        {
            match d.rsplit_once('=') {
                Some((target, level)) => {
                    base.insert(target.to_string(), level.to_string());
                }
                None if tracing_level(d).is_some() => root = d.to_ascii_lowercase(),
                None => {
                    base.insert(d.to_string(), "trace".to_string());
                }
            }
        }
        Self {
            root,
            base,
            set: BTreeMap::new(),
        }
    }

    /// Every known logger and its level in Kafka's names (`INFO`), `root` first.
    pub fn loggers(&self) -> Vec<(String, String)> {
        let root = self.set.get(ROOT_LOGGER).unwrap_or(&self.root).clone();
        let mut names: Vec<&str> = KNOWN_LOGGERS.to_vec();
        names.extend(self.base.keys().map(String::as_str));
        names.extend(self.set.keys().map(String::as_str));
        names.retain(|n| *n != ROOT_LOGGER);
        names.sort_unstable();
        names.dedup();
        let mut out = vec![(ROOT_LOGGER.to_string(), root.to_ascii_uppercase())];
        for name in names {
            let level = self
                .set
                .get(name)
                .or_else(|| self.base.get(name))
                .unwrap_or(&root);
            out.push((name.to_string(), level.to_ascii_uppercase()));
        }
        out
    }

    /// The level of `logger` as [`Self::loggers`] gives it.
    pub fn level_of(&self, logger: &str) -> Option<String> {
        self.loggers()
            .into_iter()
            .find(|(n, _)| n == logger)
            .map(|(_, l)| l)
    }

    /// Sets (`Some`) or unsets (`None`: back to the root level, Kafka's DELETE) one logger's
    /// level; the error is the message of INVALID_CONFIG.
    pub fn set(&mut self, logger: &str, level: Option<&str>) -> Result<(), String> {
        if logger.is_empty() || logger.contains([',', '=', '[', '{', ' ']) {
            return Err(format!("Invalid logger name {logger}"));
        }
        match level {
            Some(level) => {
                let l = tracing_level(level).ok_or_else(|| {
                    format!(
                        "Cannot set the log level of {logger} to {level} as it is not a supported log level. Valid log4j levels are ALL, DEBUG, ERROR, FATAL, INFO, OFF, TRACE, WARN"
                    )
                })?;
                self.set.insert(logger.to_string(), l.to_string());
            }
            None if logger == ROOT_LOGGER => {
                return Err("Removing the log level of the root logger is not allowed".into())
            }
            None => {
                self.set.remove(logger);
                self.base.remove(logger);
            }
        }
        Ok(())
    }

    /// The `EnvFilter` directives for the current levels.
    pub fn directives(&self) -> String {
        let root = self.set.get(ROOT_LOGGER).unwrap_or(&self.root);
        let mut targets = self.base.clone();
        for (k, v) in &self.set {
            if k != ROOT_LOGGER {
                targets.insert(k.clone(), v.clone());
            }
        }
        let mut out = vec![root.clone()];
        out.extend(targets.iter().map(|(t, l)| format!("{t}={l}")));
        out.join(",")
    }
}

/// The process's log levels and the way to apply them, once the binary installed them.
struct Installed {
    levels: Mutex<LogLevels>,
    reload: Arc<dyn LogFilterReload>,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Called once by the process that owns the subscriber, with the directives it started with.
/// A second call is ignored (the first subscriber stays the one reloaded).
pub fn install(start_directives: &str, reload: Arc<dyn LogFilterReload>) {
    let _ = INSTALLED.set(Installed {
        levels: Mutex::new(LogLevels::from_directives(start_directives)),
        reload,
    });
}

/// The current loggers and levels; `None` when no subscriber was installed (embedded brokers
/// in tests), which BROKER_LOGGER resources then report as an empty list.
pub fn current() -> Option<LogLevels> {
    let i = INSTALLED.get()?;
    Some(i.levels.lock().unwrap_or_else(|p| p.into_inner()).clone())
}

/// Applies `changes` (logger, level or `None` to unset) together: all or nothing. With
/// `validate_only` nothing is applied.
pub fn alter(changes: &[(String, Option<String>)], validate_only: bool) -> Result<(), String> {
    let i = INSTALLED
        .get()
        .ok_or("this process has no reloadable log filter")?;
    let mut levels = i.levels.lock().unwrap_or_else(|p| p.into_inner());
    let mut next = levels.clone();
    for (logger, level) in changes {
        next.set(logger, level.as_deref())?;
    }
    if validate_only {
        return Ok(());
    }
    i.reload.reload(&next.directives())?;
    tracing::info!(filter = %next.directives(), "log levels changed");
    *levels = next;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_start_from_the_filter_and_change_per_logger() {
        let mut l = LogLevels::from_directives("info,openraft=warn");
        assert_eq!(l.level_of("root").as_deref(), Some("INFO"));
        assert_eq!(l.level_of("openraft").as_deref(), Some("WARN"));
        assert_eq!(l.level_of("ferry_broker").as_deref(), Some("INFO"));
        l.set("ferry_broker", Some("DEBUG")).unwrap();
        l.set("root", Some("WARN")).unwrap();
        assert_eq!(l.level_of("ferry_broker").as_deref(), Some("DEBUG"));
        assert_eq!(l.level_of("ferry_log").as_deref(), Some("WARN"));
        assert_eq!(l.directives(), "warn,ferry_broker=debug,openraft=warn");
        l.set("ferry_broker", None).unwrap();
        assert_eq!(l.level_of("ferry_broker").as_deref(), Some("WARN"));
        assert!(l
            .set("ferry_broker", Some("LOUD"))
            .unwrap_err()
            .contains("LOUD"));
        assert!(l.set("root", None).unwrap_err().contains("root logger"));
        assert!(l.set("a=b", Some("INFO")).is_err());
        assert_eq!(l.loggers()[0].0, "root");
    }
}
