//! The controller quorum over TLS with client certificates, in-process, with voters on
//! 127.0.0.1 ports and certificates made by the test (rcgen).

// It waits on real time-outs (clippy.toml's clock seam binds the code under test).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry_cluster::image::MetadataRecord;
use ferry_cluster::{Controller, ControllerConfig, QuorumTls};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

const WAIT: Duration = Duration::from_secs(30);

/// A certificate authority made for one test.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self { cert, key }
    }

    /// A node's certificate for 127.0.0.1, usable as server and as client certificate.
    fn node(&self, name: &str) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap();
        (vec![cert.der().clone()], key)
    }

    fn roots(&self) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        roots.add(self.cert.der().clone()).unwrap();
        Arc::new(roots)
    }
}

/// What a broker would build from an `SSL` controller listener: its certificate both ways,
/// peers verified against `trust`, client certificates required.
fn quorum_tls(ca: &Ca, trust: &Ca, name: &str) -> QuorumTls {
    let (server, client) = configs(ca, trust, name);
    QuorumTls::new(move || server.clone(), move || client.clone())
}

fn configs(ca: &Ca, trust: &Ca, name: &str) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let (chain, key) = ca.node(name);
    let verifier = WebPkiClientVerifier::builder_with_provider(trust.roots(), provider.clone())
        .build()
        .unwrap();
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .unwrap();
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(trust.roots())
        .with_client_auth_cert(chain, key)
        .unwrap();
    (Arc::new(server), Arc::new(client))
}

/// Whether the voter at `addr` keeps a TLS connection made with `client` open: one that
/// accepted it waits for a request, one that refused the client certificate sends an alert.
async fn accepts(addr: &str, client: Arc<ClientConfig>) -> bool {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let Ok(mut tls) = TlsConnector::from(client).connect(name, tcp).await else {
        return false;
    };
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_millis(500), tls.read(&mut byte)).await;
    read.is_err()
}

async fn voter_addresses() -> (BTreeMap<u64, String>, Vec<TcpListener>) {
    let mut listeners = Vec::new();
    let mut voters = BTreeMap::new();
    for id in 1..=3u64 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        voters.insert(id, l.local_addr().unwrap().to_string());
        listeners.push(l);
    }
    (voters, listeners)
}

/// Starts the three voters, voter `id` with `tls[id - 1]`; returns their addresses too.
async fn start(dir: &Path, tls: Vec<QuorumTls>) -> (BTreeMap<u64, String>, Vec<Controller>) {
    let (voters, listeners) = voter_addresses().await;
    let mut controllers = Vec::new();
    for ((id, listener), tls) in (1..=3u64).zip(listeners).zip(tls) {
        let mut config = ControllerConfig::new(id, voters.clone(), dir.join(format!("n{id}")));
        config.tls = Some(tls);
        controllers.push(
            Controller::start_with(config, Some(listener))
                .await
                .unwrap(),
        );
    }
    (voters, controllers)
}

fn register(id: i32) -> MetadataRecord {
    MetadataRecord::RegisterBroker {
        id,
        rack: None,
        host: "127.0.0.1".into(),
        port: 9000 + id as u16,
        endpoints: Vec::new(),
    }
}

/// Waits until `nodes` all know the same leader, and returns it.
async fn agreed_leader(nodes: &[&Controller]) -> u64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let leaders: Vec<Option<u64>> = nodes.iter().map(|c| c.leader()).collect();
        if let Some(first) = leaders[0] {
            if leaders.iter().all(|l| *l == Some(first)) {
                return first;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no agreed leader: {leaders:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn three_voters_over_tls_elect_a_leader_and_commit() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("quorum CA");
    let tls = (1..=3).map(|i| quorum_tls(&ca, &ca, &format!("node{i}")));
    let (voters, nodes) = start(dir.path(), tls.collect()).await;
    let leader = agreed_leader(&nodes.iter().collect::<Vec<_>>()).await;

    // Proposed on a follower, the record is forwarded to the leader over TLS too.
    let follower = nodes.iter().find(|c| c.node_id() != leader).unwrap();
    let committed = follower.propose(register(1)).await.unwrap();
    for c in &nodes {
        let image = c.wait_applied(committed.index, WAIT).await.unwrap();
        assert!(image.brokers.contains_key(&1), "node {}", c.node_id());
    }

    // The voters speak TLS and require a client certificate from the quorum's CA.
    let (_, with_cert) = configs(&ca, &ca, "a client");
    assert!(accepts(&voters[&1], with_cert).await);
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let without_cert = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(ca.roots())
        .with_no_client_auth();
    assert!(!accepts(&voters[&1], Arc::new(without_cert)).await);
    for c in nodes {
        c.shutdown().await;
    }
}

#[tokio::test]
async fn a_voter_with_a_certificate_of_another_ca_cannot_take_part() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("quorum CA");
    let rogue_ca = Ca::new("another CA");
    // Voter 3 trusts the quorum's CA but its own certificate comes from another one: the
    // others refuse its connections (client certificate) and it refuses theirs (server one).
    let tls = vec![
        quorum_tls(&ca, &ca, "node1"),
        quorum_tls(&ca, &ca, "node2"),
        quorum_tls(&rogue_ca, &ca, "node3"),
    ];
    let (voters, nodes) = start(dir.path(), tls).await;
    let leader = agreed_leader(&[&nodes[0], &nodes[1]]).await;
    assert_ne!(leader, 3);
    let committed = nodes[0].propose(register(1)).await.unwrap();
    nodes[1].wait_applied(committed.index, WAIT).await.unwrap();

    // Voter 3 hears nothing from the leader, and cannot hand it a record either.
    let outsider = &nodes[2];
    let not_applied = outsider
        .wait_applied(committed.index, Duration::from_secs(3))
        .await;
    assert!(not_applied.is_err(), "voter 3 applied the record");
    assert_ne!(outsider.leader(), Some(leader));
    assert!(outsider.propose(register(3)).await.is_err());
    assert!(!nodes[0].image().brokers.contains_key(&3));
    let (_, rogue_client) = configs(&rogue_ca, &ca, "node3");
    assert!(!accepts(&voters[&1], rogue_client).await);
    for c in nodes {
        c.shutdown().await;
    }
}
