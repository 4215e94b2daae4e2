//! Named listeners, as Kafka configures them: `listeners`, `listener.security.protocol.map`,
//! `advertised.listeners`, `inter.broker.listener.name` (or `security.inter.broker.protocol`)
//! and `controller.listener.names`, checked together into one [`Listeners`], and the `ssl.*`
//! settings of each listener ([`SslSettings`], per-listener overrides
//! `listener.name.<lowercase name>.ssl.*` first).
//!
//! What always holds for a [`Listeners`] that [`BrokerConfig::listeners`] returned: every
//! listener's name is unique and in the protocol map, every bound port other than 0 is unique,
//! every advertised name is a listener, and the inter-broker listener is one of the Kafka
//! listeners (never a controller listener). Anything else stops start-up with an error naming
//! the listener or protocol at fault.
//!
//! The controller quorum uses the first of `controller.listener.names`
//! ([`BrokerConfig::controller_listener`]): `PLAINTEXT`, or `SSL` with a key store and a trust
//! store (client certificates are then required both ways, whatever `ssl.client.auth` says).
//! `SASL_PLAINTEXT` and `SASL_SSL` are refused there: the quorum does not serve SASL.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

use crate::broker_config::{bad, split_list, BrokerConfig, ConfigError};

/// Per-listener config keys start with this, then the lowercase listener name and the key.
pub const LISTENER_PREFIX: &str = "listener.name.";

/// Kafka's security protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Self::Plaintext,
            "SSL" => Self::Ssl,
            "SASL_PLAINTEXT" => Self::SaslPlaintext,
            "SASL_SSL" => Self::SaslSsl,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections on such a listener speak TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// Whether clients on such a listener authenticate with SASL first.
    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One Kafka listener: where it binds and what it advertises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// The name as configured, upper case by convention (`CLIENT`, `PLAINTEXT`).
    pub name: String,
    pub protocol: SecurityProtocol,
    /// Where to bind; port 0 picks a free port.
    pub bind: SocketAddr,
    /// `advertised.listeners`' host for this listener; empty: the bound address.
    pub advertised_host: String,
    /// `advertised.listeners`' port; 0: the bound port.
    pub advertised_port: u16,
}

impl Listener {
    /// The advertised (host, port) once `bound` is known: an empty or wildcard host becomes
    /// the bound IP, port 0 the bound port.
    pub fn advertised(&self, bound: SocketAddr) -> (String, u16) {
        let host = match self.advertised_host.as_str() {
            "" | "0.0.0.0" | "::" => bound.ip().to_string(),
            h => h.to_string(),
        };
        let port = match self.advertised_port {
            0 => bound.port(),
            p => p,
        };
        (host, port)
    }
}

/// Every listener of this broker, checked together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listeners {
    /// The Kafka listeners, in configured order (controller listeners left out).
    pub listeners: Vec<Listener>,
    /// The listener other brokers connect to.
    pub inter_broker: String,
    /// `controller.listener.names`, accepted and checked; the controller itself listens on the
    /// `controller.quorum.voters` addresses.
    pub controller: Vec<String>,
}

impl Listeners {
    pub fn get(&self, name: &str) -> Option<&Listener> {
        self.listeners.iter().find(|l| l.name == name)
    }

    /// The inter-broker listener (always present, see the module doc).
    pub fn inter_broker(&self) -> &Listener {
        self.get(&self.inter_broker)
            .unwrap_or_else(|| &self.listeners[0])
    }
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// Where PEM material comes from: a file (re-read when it changes) or text in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    File(std::path::PathBuf),
    Inline(String),
}

/// The `ssl.*` settings of one listener.
#[derive(Clone, PartialEq, Eq)]
pub struct SslSettings {
    /// The key and certificate chain: one file holding both, or (chain, key) as PEM text.
    pub keystore: Option<Keystore>,
    pub key_password: Option<String>,
    pub truststore: Option<PemSource>,
    pub client_auth: ClientAuth,
    /// `ssl.endpoint.identification.algorithm` = https (the default).
    pub verify_hostname: bool,
}

impl fmt::Debug for SslSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Key material and passwords are never logged.
        f.debug_struct("SslSettings")
            .field("keystore", &self.keystore.as_ref().map(Keystore::describe))
            .field("truststore", &self.truststore.as_ref().map(describe_source))
            .field("client_auth", &self.client_auth)
            .field("verify_hostname", &self.verify_hostname)
            .finish_non_exhaustive()
    }
}

fn describe_source(s: &PemSource) -> String {
    match s {
        PemSource::File(p) => p.display().to_string(),
        PemSource::Inline(_) => "<inline PEM>".into(),
    }
}

/// The SASL settings of one `SASL_PLAINTEXT` / `SASL_SSL` listener, as written: the broker
/// checks the mechanism names and parses the JAAS texts (it knows which it serves).
#[derive(Clone, PartialEq, Eq)]
pub struct SaslListenerConfig {
    /// `sasl.enabled.mechanisms`, in order.
    pub mechanisms: Vec<String>,
    /// (mechanism as written in `mechanisms`, its `<mechanism>.sasl.jaas.config` text), for
    /// each enabled mechanism that has one.
    pub jaas: Vec<(String, String)>,
    /// `sasl.server.max.receive.size`: the largest frame before authentication.
    pub max_receive_size: usize,
    /// `connections.max.reauth.ms` (`None`: 0, sessions never expire).
    pub max_reauth: Option<std::time::Duration>,
}

impl fmt::Debug for SaslListenerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // JAAS texts hold passwords: only which mechanisms have one is shown.
        let jaas: Vec<&str> = self.jaas.iter().map(|(m, _)| m.as_str()).collect();
        f.debug_struct("SaslListenerConfig")
            .field("mechanisms", &self.mechanisms)
            .field("jaas", &jaas)
            .field("max_receive_size", &self.max_receive_size)
            .field("max_reauth", &self.max_reauth)
            .finish()
    }
}

/// `ssl.keystore.*` of type PEM.
#[derive(Clone, PartialEq, Eq)]
pub enum Keystore {
    /// `ssl.keystore.location`: one PEM file with the key and the chain.
    File(std::path::PathBuf),
    /// `ssl.keystore.certificate.chain` + `ssl.keystore.key`.
    Inline { chain: String, key: String },
}

impl fmt::Debug for Keystore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Keystore {
    fn describe(&self) -> String {
        match self {
            Keystore::File(p) => p.display().to_string(),
            Keystore::Inline { .. } => "<inline PEM>".into(),
        }
    }
}

impl BrokerConfig {
    /// The listeners, checked as the module doc says. `controller.quorum.voters` is consulted
    /// for a controller listener that is also in `listeners`.
    pub fn listeners(&self) -> Result<Listeners, ConfigError> {
        let map = self.security_protocol_map()?;
        let controller = split_list(self.raw("controller.listener.names"));
        for name in &controller {
            let Some(protocol) = map.get(name) else {
                return Err(bad(
                    "controller.listener.names",
                    "list",
                    format!("listener `{name}` is not in listener.security.protocol.map"),
                ));
            };
            if protocol.uses_sasl() {
                return Err(bad(
                    "controller.listener.names",
                    "list",
                    format!("controller listener `{name}` is {protocol}; the controller quorum does not serve SASL: map it to SSL (TLS with client certificates) or PLAINTEXT"),
                ));
            }
        }
        if let Some(name) = controller.first() {
            if map.get(name) == Some(&SecurityProtocol::Ssl) {
                self.check_controller_tls(name)?;
            }
        }
        let mut listeners: Vec<Listener> = Vec::new();
        for entry in split_list(self.raw("listeners")) {
            let (name, host, port) = split_endpoint("listeners", &entry)?;
            let protocol = *map.get(&name).ok_or_else(|| {
                bad(
                    "listeners",
                    "list",
                    format!("listener `{name}` (in `{entry}`) is not in listener.security.protocol.map; add `{name}:PROTOCOL` there"),
                )
            })?;
            if listeners.iter().any(|l| l.name == name) {
                return Err(bad(
                    "listeners",
                    "list",
                    format!("listener `{name}` is listed twice"),
                ));
            }
            if port != 0 {
                if let Some(other) = listeners.iter().find(|l| l.bind.port() == port) {
                    return Err(bad(
                        "listeners",
                        "list",
                        format!(
                            "listeners `{}` and `{name}` both use port {port}",
                            other.name
                        ),
                    ));
                }
            }
            let bind = bind_address(&entry, &host, port)?;
            if controller.contains(&name) {
                self.check_controller_listener(&name, port)?;
                continue;
            }
            listeners.push(Listener {
                name,
                protocol,
                bind,
                advertised_host: host,
                advertised_port: port,
            });
        }
        if listeners.is_empty() {
            return Err(bad(
                "listeners",
                "list",
                "no Kafka listener is configured".into(),
            ));
        }
        let mut advertised_seen = Vec::new();
        for entry in split_list(self.raw("advertised.listeners")) {
            let (name, host, port) = split_endpoint("advertised.listeners", &entry)?;
            if advertised_seen.contains(&name) {
                return Err(bad(
                    "advertised.listeners",
                    "list",
                    format!("listener `{name}` is listed twice"),
                ));
            }
            let Some(l) = listeners.iter_mut().find(|l| l.name == name) else {
                return Err(bad(
                    "advertised.listeners",
                    "list",
                    format!("listener `{name}` is not one of `listeners`"),
                ));
            };
            l.advertised_host = host;
            l.advertised_port = port;
            advertised_seen.push(name);
        }
        let inter_broker = self.inter_broker_listener_name()?;
        if controller.contains(&inter_broker) {
            return Err(bad(
                "inter.broker.listener.name",
                "string",
                format!("`{inter_broker}` is a controller listener (controller.listener.names)"),
            ));
        }
        if !listeners.iter().any(|l| l.name == inter_broker) {
            let key = if self.is_set("inter.broker.listener.name") {
                "inter.broker.listener.name"
            } else {
                "security.inter.broker.protocol"
            };
            return Err(bad(
                key,
                "string",
                format!(
                    "inter-broker listener `{inter_broker}` is not among the listeners ({})",
                    listeners
                        .iter()
                        .map(|l| l.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let checked = Listeners {
            listeners,
            inter_broker,
            controller,
        };
        if let Some(key) = self.unknown_listener_overrides(&checked).into_iter().next() {
            return Err(ConfigError::UnknownKey(format!(
                "{key} (no listener of that name)"
            )));
        }
        Ok(checked)
    }

    /// `listener.security.protocol.map` as name to protocol.
    pub fn security_protocol_map(&self) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
        let key = "listener.security.protocol.map";
        let mut map = BTreeMap::new();
        for entry in split_list(self.raw(key)) {
            let (name, protocol) = entry
                .split_once(':')
                .ok_or_else(|| bad(key, "list", format!("`{entry}` is not NAME:PROTOCOL")))?;
            let name = name.trim().to_string();
            check_name(key, &name)?;
            let protocol = SecurityProtocol::parse(protocol.trim()).ok_or_else(|| {
                bad(
                    key,
                    "list",
                    format!("unknown security protocol `{}` for listener `{name}` (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)", protocol.trim()),
                )
            })?;
            if map.insert(name.clone(), protocol).is_some() {
                return Err(bad(
                    key,
                    "list",
                    format!("listener `{name}` is mapped twice"),
                ));
            }
        }
        Ok(map)
    }

    fn inter_broker_listener_name(&self) -> Result<String, ConfigError> {
        let explicit = self.raw("inter.broker.listener.name").trim();
        if !explicit.is_empty() {
            if self.is_set("security.inter.broker.protocol") {
                return Err(bad(
                    "inter.broker.listener.name",
                    "string",
                    "set either it or security.inter.broker.protocol, not both".into(),
                ));
            }
            return Ok(explicit.to_string());
        }
        let protocol = self.raw("security.inter.broker.protocol").trim();
        let parsed = SecurityProtocol::parse(protocol).ok_or_else(|| {
            bad(
                "security.inter.broker.protocol",
                "string",
                format!("unknown security protocol `{protocol}`"),
            )
        })?;
        Ok(parsed.name().to_string())
    }

    /// The listener the controller quorum speaks (the first of `controller.listener.names`)
    /// and its protocol, `PLAINTEXT` or `SSL` once [`BrokerConfig::listeners`] accepted the
    /// config; `None` without controller listeners (plain TCP).
    pub fn controller_listener(&self) -> Result<Option<(String, SecurityProtocol)>, ConfigError> {
        let Some(name) = split_list(self.raw("controller.listener.names"))
            .into_iter()
            .next()
        else {
            return Ok(None);
        };
        let protocol = *self.security_protocol_map()?.get(&name).ok_or_else(|| {
            bad(
                "controller.listener.names",
                "list",
                format!("listener `{name}` is not in listener.security.protocol.map"),
            )
        })?;
        Ok(Some((name, protocol)))
    }

    /// An `SSL` controller listener needs both stores: every voter proves itself with its key
    /// store and checks the others' certificates against its trust store.
    fn check_controller_tls(&self, name: &str) -> Result<(), ConfigError> {
        let settings = self.ssl_settings(name)?;
        let scoped = |key: &str| format!("{LISTENER_PREFIX}{}.{key}", name.to_ascii_lowercase());
        if settings.keystore.is_none() {
            let key = scoped("ssl.keystore.location");
            return Err(bad(
                &key,
                "string",
                format!("controller listener `{name}` is SSL but has no key store: set {key} (or ssl.keystore.location)"),
            ));
        }
        if settings.truststore.is_none() {
            let key = scoped("ssl.truststore.location");
            return Err(bad(
                &key,
                "string",
                format!("controller listener `{name}` is SSL but has no trust store to verify the other voters: set {key} (or ssl.truststore.location)"),
            ));
        }
        Ok(())
    }

    /// A controller listener also in `listeners`: ferry's controller listens on its voter
    /// address, so the listener must have that port (its protocol is checked with the others).
    fn check_controller_listener(&self, name: &str, port: u16) -> Result<(), ConfigError> {
        let voters = self.controller_quorum_voters()?;
        let me = u64::try_from(self.node_id()).ok();
        if let Some(addr) = me.and_then(|id| voters.get(&id)) {
            let voter_port = addr
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok());
            if voter_port != Some(port) {
                return Err(bad(
                    "controller.listener.names",
                    "list",
                    format!("controller listener `{name}` has port {port}, but this node's controller.quorum.voters address is {addr}"),
                ));
            }
        }
        Ok(())
    }

    /// The value of `key` for `listener`: `listener.name.<lowercase>.<key>`, else `key`.
    pub fn listener_raw(&self, listener: &str, key: &str) -> &str {
        let scoped = format!("{LISTENER_PREFIX}{}.{key}", listener.to_ascii_lowercase());
        if self.is_set(&scoped) {
            return self.raw(&scoped);
        }
        self.raw(key)
    }

    /// The SASL settings of `listener`: its own `listener.name.<name>.*` keys, else the
    /// broker's. A broker-wide `sasl.jaas.config` is refused, as Kafka brokers only read it
    /// scoped to a listener and a mechanism.
    pub fn sasl_settings(&self, listener: &str) -> Result<SaslListenerConfig, ConfigError> {
        if self.is_set("sasl.jaas.config") {
            return Err(bad(
                "sasl.jaas.config",
                "password",
                format!(
                    "a broker reads JAAS text per listener and mechanism: set `{LISTENER_PREFIX}{}.<mechanism>.sasl.jaas.config` (for example `{LISTENER_PREFIX}{}.plain.sasl.jaas.config`)",
                    listener.to_ascii_lowercase(),
                    listener.to_ascii_lowercase()
                ),
            ));
        }
        let mechanisms = split_list(self.listener_raw(listener, "sasl.enabled.mechanisms"));
        let jaas = mechanisms
            .iter()
            .filter_map(|m| {
                let key = format!("{}.sasl.jaas.config", m.to_ascii_lowercase());
                let text = self.listener_raw(listener, &key).trim();
                (!text.is_empty()).then(|| (m.clone(), text.to_string()))
            })
            .collect();
        let number = |key: &str| self.listener_raw(listener, key).trim().parse::<i64>();
        let max_receive_size = number("sasl.server.max.receive.size")
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                bad(
                    "sasl.server.max.receive.size",
                    "int",
                    "must be a positive number of bytes".into(),
                )
            })?;
        let reauth_ms = number("connections.max.reauth.ms")
            .ok()
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| {
                bad(
                    "connections.max.reauth.ms",
                    "long",
                    "must be 0 (no expiry) or a positive number of milliseconds".into(),
                )
            })?;
        Ok(SaslListenerConfig {
            mechanisms,
            jaas,
            max_receive_size,
            max_reauth: (reauth_ms > 0).then(|| std::time::Duration::from_millis(reauth_ms)),
        })
    }

    /// The SSL settings of `listener`, checked: a keystore given one way only, PEM types.
    pub fn ssl_settings(&self, listener: &str) -> Result<SslSettings, ConfigError> {
        let get = |key: &str| self.listener_raw(listener, key).trim().to_string();
        let location = get("ssl.keystore.location");
        let chain = get("ssl.keystore.certificate.chain");
        let key = get("ssl.keystore.key");
        let keystore = match (location.is_empty(), chain.is_empty(), key.is_empty()) {
            (true, true, true) => None,
            (false, true, true) => Some(Keystore::File(location.into())),
            (true, false, false) => Some(Keystore::Inline { chain, key }),
            (false, _, _) => {
                return Err(bad(
                    "ssl.keystore.location",
                    "string",
                    format!("listener `{listener}`: set ssl.keystore.location or ssl.keystore.certificate.chain with ssl.keystore.key, not both"),
                ))
            }
            (true, _, _) => {
                return Err(bad(
                    "ssl.keystore.key",
                    "string",
                    format!("listener `{listener}`: ssl.keystore.certificate.chain and ssl.keystore.key go together"),
                ))
            }
        };
        let trust_location = get("ssl.truststore.location");
        let trust_inline = get("ssl.truststore.certificates");
        let truststore = match (trust_location.is_empty(), trust_inline.is_empty()) {
            (true, true) => None,
            (false, true) => Some(PemSource::File(trust_location.into())),
            (true, false) => Some(PemSource::Inline(trust_inline)),
            (false, false) => {
                return Err(bad(
                    "ssl.truststore.location",
                    "string",
                    format!("listener `{listener}`: set ssl.truststore.location or ssl.truststore.certificates, not both"),
                ))
            }
        };
        let client_auth = match get("ssl.client.auth").as_str() {
            "requested" => ClientAuth::Requested,
            "required" => ClientAuth::Required,
            _ => ClientAuth::None,
        };
        let password = get("ssl.key.password");
        Ok(SslSettings {
            keystore,
            key_password: (!password.is_empty()).then_some(password),
            truststore,
            client_auth,
            verify_hostname: !get("ssl.endpoint.identification.algorithm").is_empty(),
        })
    }

    /// Per-listener keys (`listener.name.<name>.*`) whose listener is not configured: a typo
    /// that would otherwise be ignored.
    fn unknown_listener_overrides(&self, listeners: &Listeners) -> Vec<String> {
        let known: Vec<String> = listeners
            .listeners
            .iter()
            .map(|l| l.name.to_ascii_lowercase())
            .chain(listeners.controller.iter().map(|n| n.to_ascii_lowercase()))
            .collect();
        self.explicit_keys()
            .filter_map(|k| {
                let rest = k.strip_prefix(LISTENER_PREFIX)?;
                let (name, _) = rest.split_once('.')?;
                (!known.iter().any(|n| n == name)).then(|| k.to_string())
            })
            .collect()
    }
}

/// A listener name as Kafka allows it: letters, digits and `_`.
fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(bad(
            key,
            "list",
            format!("`{name}` is not a listener name (letters, digits and _)"),
        ));
    }
    Ok(())
}

/// `NAME://host:port` as (name, host, port); the host may be empty and IPv6 in brackets.
fn split_endpoint(key: &str, entry: &str) -> Result<(String, String, u16), ConfigError> {
    let (name, hostport) = entry
        .split_once("://")
        .ok_or_else(|| bad(key, "list", format!("`{entry}` is not NAME://host:port")))?;
    check_name(key, name)?;
    let (host, port) = hostport
        .rsplit_once(':')
        .ok_or_else(|| bad(key, "list", format!("`{entry}` has no port")))?;
    let port = port
        .parse::<u16>()
        .map_err(|e| bad(key, "list", format!("bad port in `{entry}`: {e}")))?;
    let host = host.trim_matches(|c| c == '[' || c == ']').to_string();
    Ok((name.to_string(), host, port))
}

fn bind_address(entry: &str, host: &str, port: u16) -> Result<SocketAddr, ConfigError> {
    let ip = match host {
        "" => "0.0.0.0",
        "localhost" => "127.0.0.1",
        h => h,
    };
    let ip: std::net::IpAddr = ip.parse().map_err(|e| {
        bad(
            "listeners",
            "list",
            format!("`{entry}`: the host must be an IP address, `localhost` or empty: {e}"),
        )
    })?;
    Ok(SocketAddr::new(ip, port))
}

#[cfg(test)]
#[path = "listeners_test.rs"]
mod tests;
