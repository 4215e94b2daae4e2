//! TLS for `SSL` and `SASL_SSL` listeners and for inter-broker connections over an SSL
//! inter-broker listener: rustls with the aws-lc-rs provider (the one aws-sdk already brings),
//! PEM key stores and trust stores as Kafka's `ssl.*` keys describe them.
//!
//! Owns the current rustls config of each TLS listener and of the inter-broker client, and
//! swaps in a new one when a key store or trust store file changes ([`Reloading`]): a reload
//! task checks the files' modification time and size every [`RELOAD_CHECK`], builds the new
//! config off the accept path, and only a config that builds replaces the old one, so a
//! half-written rotation keeps the previous certificate until the files are whole. Accepting
//! never waits on a file: it takes the current config (one read lock, one `Arc` clone).
//!
//! Encrypted private keys (`ssl.key.password`) are not supported: start-up stops with an error
//! that says so.

pub mod subject;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use ferry_config::listeners::{ClientAuth, Keystore, PemSource, SslSettings};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// How often key store and trust store files are checked for changes.
pub const RELOAD_CHECK: Duration = Duration::from_secs(3);

/// The crypto provider of every TLS config ferry builds (aws-lc-rs, as aws-sdk's rustls uses).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A rustls config built from a listener's `ssl.*` settings, rebuilt when its files change.
pub struct Reloading<T> {
    /// Which listener, for errors and logs.
    listener: String,
    settings: SslSettings,
    build: fn(&SslSettings, &str) -> anyhow::Result<T>,
    current: RwLock<Arc<T>>,
    /// The files' stamps the current config was built from, and those of the last failed
    /// rebuild (so a broken file is reported once, not at every check).
    stamps: Mutex<(Vec<FileStamp>, Vec<FileStamp>)>,
}

type FileStamp = (PathBuf, Option<(SystemTime, u64)>);

impl<T> Reloading<T> {
    /// Builds the first config; an error here stops start-up.
    fn new(
        listener: &str,
        settings: SslSettings,
        build: fn(&SslSettings, &str) -> anyhow::Result<T>,
    ) -> anyhow::Result<Self> {
        let stamps = file_stamps(&settings);
        let first = build(&settings, listener)?;
        Ok(Self {
            listener: listener.to_string(),
            settings,
            build,
            current: RwLock::new(Arc::new(first)),
            stamps: Mutex::new((stamps, Vec::new())),
        })
    }

    /// The config new connections use.
    pub fn current(&self) -> Arc<T> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Rebuilds the config when a file changed since it was built; blocking file I/O, run it
    /// off the async workers. Returns whether a new config is in use.
    pub fn reload_if_changed(&self) -> bool {
        let now = file_stamps(&self.settings);
        let mut stamps = self.stamps.lock().unwrap_or_else(|p| p.into_inner());
        if now == stamps.0 || now == stamps.1 {
            return false;
        }
        match (self.build)(&self.settings, &self.listener) {
            Ok(config) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
                tracing::info!(listener = %self.listener, "TLS key store or trust store changed: new connections use the new files");
                *stamps = (now, Vec::new());
                true
            }
            Err(e) => {
                tracing::warn!(listener = %self.listener, error = %format!("{e:#}"),
                    "TLS files changed but cannot be used; keeping the previous ones");
                stamps.1 = now;
                false
            }
        }
    }
}

/// The TLS server config of a listener.
pub type ServerTls = Reloading<ServerConfig>;
/// The TLS client config brokers use towards the inter-broker listener.
pub type ClientTls = Reloading<ClientConfig>;

/// TLS on the controller quorum over an `SSL` controller listener: each voter's key store is
/// its server and its client certificate, peers are verified against the trust store, and a
/// client certificate is always required (mutual TLS, whatever `ssl.client.auth` says: an
/// unauthenticated peer could otherwise vote and append to the metadata log).
pub struct ControllerTls {
    pub server: Arc<ServerTls>,
    pub client: Arc<ClientTls>,
}

impl ControllerTls {
    /// Builds both configs from controller listener `listener`'s settings; an error here stops
    /// start-up.
    pub fn new(listener: &str, mut settings: SslSettings) -> anyhow::Result<Self> {
        settings.client_auth = ClientAuth::Required;
        if settings.keystore.is_none() {
            bail!("controller listener `{listener}` uses TLS but has no key store: set listener.name.{}.ssl.keystore.location (or ssl.keystore.location)", listener.to_ascii_lowercase());
        }
        let server = server(listener, settings.clone())?;
        let client = client(listener, settings)?;
        Ok(Self {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// What the quorum connects and accepts with: the configs current when a connection
    /// starts, so a reload applies to new connections.
    pub fn quorum(&self) -> ferry_cluster::QuorumTls {
        let (server, client) = (self.server.clone(), self.client.clone());
        ferry_cluster::QuorumTls::new(move || server.current(), move || client.current())
    }
}

/// The server side of listener `listener`: its key store, and with `ssl.client.auth` requested
/// or required its trust store for client certificates.
pub fn server(listener: &str, settings: SslSettings) -> anyhow::Result<ServerTls> {
    Reloading::new(listener, settings, build_server)
}

/// The client side towards inter-broker listener `listener`: its trust store to verify other
/// brokers, its key store (when set) as this broker's client certificate.
pub fn client(listener: &str, settings: SslSettings) -> anyhow::Result<ClientTls> {
    Reloading::new(listener, settings, build_client)
}

fn build_server(settings: &SslSettings, listener: &str) -> anyhow::Result<ServerConfig> {
    let Some(keystore) = &settings.keystore else {
        bail!("listener `{listener}` uses TLS but has no key store: set ssl.keystore.location (or ssl.keystore.certificate.chain and ssl.keystore.key), or listener.name.{}.ssl.keystore.location", listener.to_ascii_lowercase());
    };
    let (chain, key) = load_keystore(keystore, settings, listener)?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match settings.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let Some(trust) = &settings.truststore else {
                bail!("listener `{listener}`: ssl.client.auth = {} needs a trust store (ssl.truststore.location) to verify client certificates", if auth == ClientAuth::Required { "required" } else { "requested" });
            };
            let roots = load_roots(trust, listener)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = if auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .with_context(|| format!("listener `{listener}`: client verifier"))?,
            )
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .with_context(|| format!("listener `{listener}`: the key does not fit the certificate"))?;
    Ok(config)
}

fn build_client(settings: &SslSettings, listener: &str) -> anyhow::Result<ClientConfig> {
    let Some(trust) = &settings.truststore else {
        bail!("inter-broker listener `{listener}` uses TLS but has no trust store to verify other brokers: set ssl.truststore.location");
    };
    let roots = load_roots(trust, listener)?;
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = if settings.verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .context("server verifier")?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
    };
    let config = match &settings.keystore {
        Some(keystore) => {
            let (chain, key) = load_keystore(keystore, settings, listener)?;
            builder
                .with_client_auth_cert(chain, key)
                .with_context(|| format!("listener `{listener}`: client certificate"))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(config)
}

/// The certificate chain and key of a key store.
fn load_keystore(
    keystore: &Keystore,
    settings: &SslSettings,
    listener: &str,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let (chain_pem, key_pem, whence) = match keystore {
        Keystore::File(path) => {
            let text = std::fs::read(path).with_context(|| {
                format!(
                    "listener `{listener}`: reading ssl.keystore.location {}",
                    path.display()
                )
            })?;
            (text.clone(), text, path.display().to_string())
        }
        Keystore::Inline { chain, key } => (
            chain.as_bytes().to_vec(),
            key.as_bytes().to_vec(),
            "ssl.keystore.certificate.chain / ssl.keystore.key".to_string(),
        ),
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain_pem)
        .collect::<Result<_, _>>()
        .with_context(|| format!("listener `{listener}`: bad PEM certificate in {whence}"))?;
    if chain.is_empty() {
        bail!("listener `{listener}`: no certificate in {whence}");
    }
    let text = String::from_utf8_lossy(&key_pem);
    if text.contains("ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED") {
        bail!("listener `{listener}`: the private key in {whence} is encrypted{}; encrypted keys are not supported, decrypt it (e.g. `openssl pkcs8 -topk8 -nocrypt`)", if settings.key_password.is_some() { " (ssl.key.password)" } else { "" });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).with_context(|| {
        format!(
            "listener `{listener}`: no usable private key (PKCS#8, PKCS#1 or SEC1 PEM) in {whence}"
        )
    })?;
    Ok((chain, key))
}

fn load_roots(source: &PemSource, listener: &str) -> anyhow::Result<Arc<RootCertStore>> {
    let (pem, whence) = match source {
        PemSource::File(path) => (
            std::fs::read(path).with_context(|| {
                format!(
                    "listener `{listener}`: reading ssl.truststore.location {}",
                    path.display()
                )
            })?,
            path.display().to_string(),
        ),
        PemSource::Inline(text) => (
            text.as_bytes().to_vec(),
            "ssl.truststore.certificates".into(),
        ),
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert
            .with_context(|| format!("listener `{listener}`: bad PEM certificate in {whence}"))?;
        roots.add(cert).with_context(|| {
            format!("listener `{listener}`: unusable CA certificate in {whence}")
        })?;
    }
    if roots.is_empty() {
        bail!("listener `{listener}`: no CA certificate in {whence}");
    }
    Ok(Arc::new(roots))
}

fn file_stamps(settings: &SslSettings) -> Vec<FileStamp> {
    let mut files = Vec::new();
    if let Some(Keystore::File(p)) = &settings.keystore {
        files.push(p.clone());
    }
    if let Some(PemSource::File(p)) = &settings.truststore {
        files.push(p.clone());
    }
    files
        .into_iter()
        .map(|p| {
            let stamp = std::fs::metadata(&p)
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len())));
            (p, stamp)
        })
        .collect()
}

/// `ssl.endpoint.identification.algorithm` empty: the chain is verified, the host name not.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
