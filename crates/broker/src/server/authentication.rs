//! Who a connection is, by its listener's security protocol, as Kafka's default principal
//! builder decides it:
//! - `PLAINTEXT`: `User:ANONYMOUS`;
//! - `SSL`: the client certificate's subject mapped by `ssl.principal.mapping.rules`
//!   (`User:ANONYMOUS` without a certificate);
//! - `SASL_PLAINTEXT` / `SASL_SSL`: the principal the SASL exchange proved (a client
//!   certificate, if any, does not count).
//!
//! Built once per listener at start-up from the config, so a bad mechanism, JAAS text or mapping
//! rule stops start-up with an error that names it.

use std::sync::Arc;

use anyhow::Context;
use ferry_auth::{
    JwksSource, KafkaPrincipal, Mechanism, OAuthBearerValidator, PlainJaasConfig, PlainUsers,
    ScramCredential, ScramCredentialSource, ScramJaasConfig, ScramMechanism, SslPrincipalMapper,
};
use ferry_cluster::metadata_store::MetadataStore;
use ferry_cluster::security::ScramMechanism as StoredMechanism;
use ferry_common::SharedClock;
use ferry_config::broker_config::BrokerConfig;
use ferry_config::listeners::SecurityProtocol;

use super::sasl::SaslSettings;
use crate::inter_broker::PeerLogin;

/// How the connections of one listener authenticate.
#[derive(Clone)]
pub enum ListenerAuthentication {
    /// `PLAINTEXT`: every client is `User:ANONYMOUS`.
    Anonymous,
    /// `SSL`: the verified client certificate's subject, mapped.
    Certificate(Arc<SslPrincipalMapper>),
    /// `SASL_PLAINTEXT` / `SASL_SSL`: a SASL exchange before any other request.
    Sasl(Arc<SaslSettings>),
}

impl ListenerAuthentication {
    /// The authentication of listener `name` with `protocol`; SCRAM credentials are looked up
    /// in `scram`, OAUTHBEARER tokens checked against `clock`.
    pub fn from_config(
        config: &BrokerConfig,
        name: &str,
        protocol: SecurityProtocol,
        scram: Arc<dyn ScramCredentialSource>,
        clock: SharedClock,
    ) -> anyhow::Result<Self> {
        Ok(match protocol {
            SecurityProtocol::Plaintext => Self::Anonymous,
            SecurityProtocol::Ssl => Self::Certificate(Arc::new(principal_mapper(config)?)),
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => {
                Self::Sasl(Arc::new(sasl_settings(config, name, scram, clock)?))
            }
        })
    }

    /// The principal of a connection that needs no SASL exchange: `peer_cert_subject` is the
    /// subject of its verified client certificate. `Err` names why it is refused (a subject no
    /// mapping rule matches, as Kafka refuses it).
    pub fn principal_without_sasl(
        &self,
        peer_cert_subject: Option<&str>,
    ) -> Result<KafkaPrincipal, String> {
        match (self, peer_cert_subject) {
            (Self::Certificate(mapper), Some(subject)) => mapper
                .principal(subject)
                .map_err(|e| format!("client certificate `{subject}`: {e}")),
            _ => Ok(KafkaPrincipal::ANONYMOUS),
        }
    }
}

/// `ssl.principal.mapping.rules`, parsed.
fn principal_mapper(config: &BrokerConfig) -> anyhow::Result<SslPrincipalMapper> {
    let rules = config.raw("ssl.principal.mapping.rules");
    SslPrincipalMapper::from_rules(rules)
        .map_err(|e| anyhow::anyhow!("ssl.principal.mapping.rules: {e}"))
}

/// The SASL settings of listener `name`: its mechanisms (only those ferry serves), PLAIN's users
/// from the listener's PLAIN JAAS text, SCRAM's from `scram`.
fn sasl_settings(
    config: &BrokerConfig,
    name: &str,
    scram: Arc<dyn ScramCredentialSource>,
    clock: SharedClock,
) -> anyhow::Result<SaslSettings> {
    let listener = config
        .sasl_settings(name)
        .with_context(|| format!("SASL listener `{name}`"))?;
    let mechanisms = enabled_mechanisms(name, &listener.mechanisms)?;
    let mut plain_users = PlainUsers::new();
    for (mechanism, text) in &listener.jaas {
        let key = jaas_key(name, mechanism);
        match Mechanism::from_name(mechanism) {
            Some(Mechanism::Plain) => {
                plain_users = PlainJaasConfig::parse(text)
                    .map_err(|e| anyhow::anyhow!("{key}: {e}"))?
                    .users;
            }
            Some(Mechanism::ScramSha256 | Mechanism::ScramSha512) => {
                ScramJaasConfig::parse(text).map_err(|e| anyhow::anyhow!("{key}: {e}"))?;
            }
            // OAuthBearerLoginModule's options configure a client's unsecured tokens: a broker
            // validating signed tokens reads nothing from it.
            Some(Mechanism::OAuthBearer) | None => {}
        }
    }
    if mechanisms.contains(&Mechanism::Plain) && plain_users.is_empty() {
        anyhow::bail!(
            "listener `{name}` enables PLAIN but {} names no user (user_<name>=\"<password>\")",
            jaas_key(name, "PLAIN")
        );
    }
    let oauth = if mechanisms.contains(&Mechanism::OAuthBearer) {
        Some(Arc::new(oauth_validator(config, name)?))
    } else {
        None
    };
    Ok(SaslSettings {
        mechanisms,
        plain_users: Arc::new(plain_users),
        scram,
        oauth,
        clock,
        max_reauth: listener.max_reauth,
        max_receive_size: listener.max_receive_size,
    })
}

/// Kafka's names of the validator ferry's OAUTHBEARER is (4.x, then 3.x).
const OAUTH_VALIDATOR_CLASSES: [&str; 2] = [
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
];

/// OAUTHBEARER's token checks on listener `name` (KIP-768's `sasl.oauthbearer.*` keys).
fn oauth_validator(config: &BrokerConfig, name: &str) -> anyhow::Result<OAuthBearerValidator> {
    let get = |key: &str| config.listener_raw(name, key).trim().to_string();
    let handler = get("oauthbearer.sasl.server.callback.handler.class");
    if !handler.is_empty() && !OAUTH_VALIDATOR_CLASSES.contains(&handler.as_str()) {
        anyhow::bail!(
            "listener.name.{}.oauthbearer.sasl.server.callback.handler.class = {handler}: ferry validates signed JWTs itself (as {}); other callback handlers are not loaded",
            name.to_ascii_lowercase(),
            OAUTH_VALIDATOR_CLASSES[0]
        );
    }
    let url = get("sasl.oauthbearer.jwks.endpoint.url");
    let Some(path) = url.strip_prefix("file://") else {
        let not_fetched = if url.is_empty() {
            String::new()
        } else {
            format!(" (`{url}` is not fetched by ferry)")
        };
        anyhow::bail!(
            "listener `{name}` enables OAUTHBEARER: set sasl.oauthbearer.jwks.endpoint.url to a file:// URL of the token issuer's JWKS{not_fetched}"
        );
    };
    let jwks = JwksSource::file(path)
        .map_err(|e| anyhow::anyhow!("sasl.oauthbearer.jwks.endpoint.url: {e}"))?;
    let issuer = get("sasl.oauthbearer.expected.issuer");
    let skew = get("sasl.oauthbearer.clock.skew.seconds");
    Ok(OAuthBearerValidator {
        jwks,
        expected_audience: get("sasl.oauthbearer.expected.audience")
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect(),
        expected_issuer: (!issuer.is_empty()).then_some(issuer),
        sub_claim: get("sasl.oauthbearer.sub.claim.name"),
        clock_skew_seconds: skew.parse().with_context(|| {
            format!("sasl.oauthbearer.clock.skew.seconds: `{skew}` is not a number")
        })?,
    })
}

/// `sasl.enabled.mechanisms` of listener `name` as mechanisms ferry serves.
fn enabled_mechanisms(name: &str, names: &[String]) -> anyhow::Result<Vec<Mechanism>> {
    if names.is_empty() {
        anyhow::bail!("sasl.enabled.mechanisms of SASL listener `{name}` is empty");
    }
    names
        .iter()
        .map(|m| {
            Mechanism::from_name(m).with_context(|| {
                let served: Vec<&str> = Mechanism::ALL.iter().map(|m| m.name()).collect();
                format!(
                    "sasl.enabled.mechanisms of listener `{name}`: `{m}` is not served by ferry (it serves {}); set sasl.enabled.mechanisms or listener.name.{}.sasl.enabled.mechanisms",
                    served.join(", "),
                    name.to_ascii_lowercase()
                )
            })
        })
        .collect()
}

fn jaas_key(listener: &str, mechanism: &str) -> String {
    format!(
        "listener.name.{}.{}.sasl.jaas.config",
        listener.to_ascii_lowercase(),
        mechanism.to_ascii_lowercase()
    )
}

/// How this broker logs in to the others on SASL inter-broker listener `listener`:
/// `sasl.mechanism.inter.broker.protocol`, enabled on that listener, with the `username` and
/// `password` of its JAAS text there.
pub fn inter_broker_login(config: &BrokerConfig, listener: &str) -> anyhow::Result<PeerLogin> {
    let wanted = config.raw("sasl.mechanism.inter.broker.protocol").trim();
    let mechanism = Mechanism::from_name(wanted)
        .filter(|m| *m != Mechanism::OAuthBearer)
        .with_context(|| {
            format!("sasl.mechanism.inter.broker.protocol: `{wanted}` is not served between brokers by ferry (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
        })?;
    let settings = config
        .sasl_settings(listener)
        .with_context(|| format!("SASL listener `{listener}`"))?;
    if !settings.mechanisms.iter().any(|m| m == wanted) {
        anyhow::bail!(
            "sasl.mechanism.inter.broker.protocol {wanted} is not in sasl.enabled.mechanisms of the inter-broker listener `{listener}`"
        );
    }
    let key = jaas_key(listener, wanted);
    let text = settings
        .jaas
        .iter()
        .find(|(m, _)| m == wanted)
        .map(|(_, t)| t.as_str())
        .with_context(|| {
            format!("{key} is not set: it gives this broker's login towards the other brokers")
        })?;
    let login = match mechanism.scram() {
        None => PlainJaasConfig::parse(text).map(|c| c.login),
        Some(_) => ScramJaasConfig::parse(text).map(|c| c.login),
    }
    .map_err(|e| anyhow::anyhow!("{key}: {e}"))?
    .with_context(|| {
        format!("{key} has no username and password: they are this broker's login towards the other brokers")
    })?;
    Ok(PeerLogin {
        mechanism,
        username: login.username,
        password: login.password,
    })
}

/// SCRAM credentials as the controller quorum holds them (AlterUserScramCredentials), read
/// from the broker's current metadata image at each login. The listeners are set up before
/// the metadata is open, so it is attached afterwards ([`ImageScramCredentials::attach`]);
/// until then no SCRAM user exists.
#[derive(Default)]
pub struct ImageScramCredentials(std::sync::OnceLock<Arc<MetadataStore>>);

impl ImageScramCredentials {
    /// Reads credentials from `metadata` from now on.
    pub fn attach(&self, metadata: Arc<MetadataStore>) {
        let _ = self.0.set(metadata);
    }
}

impl ScramCredentialSource for ImageScramCredentials {
    fn scram_credential(
        &self,
        username: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        // The quorum's record form (serialisable) and ferry-auth's hold the same fields.
        let stored_as = match mechanism {
            ScramMechanism::Sha256 => StoredMechanism::ScramSha256,
            ScramMechanism::Sha512 => StoredMechanism::ScramSha512,
        };
        let image = self.0.get()?.image();
        let stored = image.scram_credential(username, stored_as)?;
        Some(ScramCredential {
            salt: stored.salt.clone(),
            stored_key: stored.stored_key.clone(),
            server_key: stored.server_key.clone(),
            iterations: u32::try_from(stored.iterations).ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn no_scram() -> Arc<dyn ScramCredentialSource> {
        Arc::new(HashMap::<(String, ScramMechanism), ScramCredential>::new())
    }

    fn config(text: &str) -> BrokerConfig {
        BrokerConfig::parse(text).unwrap()
    }

    /// The authentication `c` gives the listener SASL_PLAINTEXT.
    fn sasl_listener(c: &BrokerConfig) -> anyhow::Result<ListenerAuthentication> {
        let protocol = SecurityProtocol::SaslPlaintext;
        let clock = ferry_common::system_clock();
        ListenerAuthentication::from_config(c, "SASL_PLAINTEXT", protocol, no_scram(), clock)
    }

    /// The authentication `c` gives the listener SSL.
    fn ssl_listener(c: &BrokerConfig) -> anyhow::Result<ListenerAuthentication> {
        let clock = ferry_common::system_clock();
        ListenerAuthentication::from_config(c, "SSL", SecurityProtocol::Ssl, no_scram(), clock)
    }

    const PLAIN_JAAS: &str = r#""listener.name.sasl_plaintext.plain.sasl.jaas.config" = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'"#;

    #[test]
    fn kafkas_default_gssapi_stops_start_up_with_a_clear_error() {
        let c = config(PLAIN_JAAS);
        let e = sasl_listener(&c).err().unwrap();
        let text = format!("{e:#}");
        assert!(text.contains("`GSSAPI` is not served"), "{text}");
        assert!(text.contains("sasl.enabled.mechanisms"), "{text}");
    }

    #[test]
    fn plain_users_come_from_the_listeners_jaas_text() {
        let c = config(&format!(
            "\"sasl.enabled.mechanisms\" = \"PLAIN,SCRAM-SHA-512\"\n{PLAIN_JAAS}\n"
        ));
        let auth = sasl_listener(&c).unwrap();
        let ListenerAuthentication::Sasl(s) = auth else {
            panic!("not SASL");
        };
        assert_eq!(s.mechanisms, [Mechanism::Plain, Mechanism::ScramSha512]);
        assert!(s.plain_users.contains("alice"));
        assert!(s.plain_users.contains("admin"));
        assert_eq!(s.max_receive_size, 524_288);
    }

    #[test]
    fn plain_without_users_or_with_bad_jaas_is_refused() {
        let c = config("\"sasl.enabled.mechanisms\" = \"PLAIN\"\n");
        let e = sasl_listener(&c).err().unwrap();
        assert!(format!("{e:#}").contains("listener.name.sasl_plaintext.plain.sasl.jaas.config"));
        let c = config(
            "\"sasl.enabled.mechanisms\" = \"PLAIN\"\n\"listener.name.sasl_plaintext.plain.sasl.jaas.config\" = 'PlainLoginModule required user_a=\"b\"'\n",
        );
        let e = sasl_listener(&c).err().unwrap();
        assert!(format!("{e:#}").contains("plain.sasl.jaas.config"), "{e:#}");
    }

    #[test]
    fn ssl_principals_follow_the_mapping_rules() {
        let c = config(
            "\"ssl.principal.mapping.rules\" = \"RULE:^CN=([^,]+),O=Example$/$1/L,DEFAULT\"\n",
        );
        let auth = ssl_listener(&c).unwrap();
        assert_eq!(
            auth.principal_without_sasl(Some("CN=App,O=Example")),
            Ok(KafkaPrincipal::user("app"))
        );
        assert_eq!(
            auth.principal_without_sasl(Some("CN=other,O=Elsewhere")),
            Ok(KafkaPrincipal::user("CN=other,O=Elsewhere"))
        );
        assert_eq!(
            auth.principal_without_sasl(None),
            Ok(KafkaPrincipal::ANONYMOUS)
        );
        let bad = config("\"ssl.principal.mapping.rules\" = \"RULE:nonsense\"\n");
        assert!(ssl_listener(&bad).is_err());
    }

    #[test]
    fn the_inter_broker_login_is_the_listeners_jaas_username() {
        let c = config(&format!(
            "\"sasl.enabled.mechanisms\" = \"PLAIN\"\n\"sasl.mechanism.inter.broker.protocol\" = \"PLAIN\"\n{PLAIN_JAAS}\n"
        ));
        let login = inter_broker_login(&c, "SASL_PLAINTEXT").unwrap();
        assert_eq!(login.mechanism, Mechanism::Plain);
        assert_eq!(login.username, "admin");
        assert_eq!(login.password.expose(), "admin-secret");
        assert!(!format!("{login:?}").contains("admin-secret"));
        // Kafka's default GSSAPI, or a mechanism the listener does not enable, is named.
        let c = config(&format!(
            "\"sasl.enabled.mechanisms\" = \"PLAIN\"\n{PLAIN_JAAS}\n"
        ));
        let e = format!(
            "{:#}",
            inter_broker_login(&c, "SASL_PLAINTEXT").unwrap_err()
        );
        assert!(e.contains("`GSSAPI` is not served"), "{e}");
        let c = config(&format!(
            "\"sasl.enabled.mechanisms\" = \"PLAIN\"\n\"sasl.mechanism.inter.broker.protocol\" = \"SCRAM-SHA-512\"\n{PLAIN_JAAS}\n"
        ));
        let e = format!(
            "{:#}",
            inter_broker_login(&c, "SASL_PLAINTEXT").unwrap_err()
        );
        assert!(e.contains("not in sasl.enabled.mechanisms"), "{e}");
    }
}
