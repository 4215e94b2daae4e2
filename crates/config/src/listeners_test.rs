//! Named listeners: parsing, Kafka's defaults, and every start-up error naming what is wrong.

use super::*;

fn parse(text: &str) -> Result<Listeners, ConfigError> {
    BrokerConfig::parse(text).unwrap().listeners()
}

fn err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn the_single_plaintext_listener_of_old_configs_still_works() {
    let l = parse("listeners = \"PLAINTEXT://127.0.0.1:0\"\n\"advertised.listeners\" = \"PLAINTEXT://broker1:19092\"").unwrap();
    assert_eq!(l.listeners.len(), 1);
    assert_eq!(l.inter_broker, "PLAINTEXT");
    let p = &l.listeners[0];
    assert_eq!(p.protocol, SecurityProtocol::Plaintext);
    assert_eq!(p.bind, "127.0.0.1:0".parse().unwrap());
    let bound = "127.0.0.1:4567".parse().unwrap();
    assert_eq!(p.advertised(bound), ("broker1".to_string(), 19092));
    // The default config is one PLAINTEXT listener on the loopback.
    let d = parse("").unwrap();
    assert_eq!(d.listeners[0].bind, "127.0.0.1:9092".parse().unwrap());
}

#[test]
fn several_named_listeners_with_a_protocol_map() {
    let l = parse(
        r#"listeners = "CLIENT://:9092,INTERNAL://127.0.0.1:9093,SECURE://localhost:0"
"listener.security.protocol.map" = "CLIENT:SASL_SSL,INTERNAL:PLAINTEXT,SECURE:SSL"
"advertised.listeners" = "CLIENT://kafka.example.com:443"
"inter.broker.listener.name" = "INTERNAL"
"#,
    )
    .unwrap();
    let names: Vec<_> = l.listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["CLIENT", "INTERNAL", "SECURE"]);
    assert_eq!(l.get("CLIENT").unwrap().protocol, SecurityProtocol::SaslSsl);
    assert_eq!(
        l.get("CLIENT").unwrap().bind,
        "0.0.0.0:9092".parse().unwrap()
    );
    assert_eq!(
        l.get("SECURE").unwrap().bind,
        "127.0.0.1:0".parse().unwrap()
    );
    assert_eq!(l.inter_broker().name, "INTERNAL");
    // Advertised: as configured, else the bound address, port 0 resolved to the bound port.
    let bound = "10.0.0.5:9092".parse().unwrap();
    assert_eq!(
        l.get("CLIENT").unwrap().advertised(bound),
        ("kafka.example.com".to_string(), 443)
    );
    let bound = "127.0.0.1:40001".parse().unwrap();
    assert_eq!(
        l.get("SECURE").unwrap().advertised(bound),
        ("localhost".to_string(), 40001)
    );
    let wildcard = BrokerConfig::parse("listeners = \"PLAINTEXT://:0\"")
        .unwrap()
        .listeners()
        .unwrap();
    assert_eq!(
        wildcard.listeners[0].advertised("0.0.0.0:5000".parse().unwrap()),
        ("0.0.0.0".to_string(), 5000)
    );
}

#[test]
fn listeners_may_be_a_toml_array() {
    let l = parse("listeners = [\"PLAINTEXT://127.0.0.1:0\", \"SSL://127.0.0.1:0\"]").unwrap();
    assert_eq!(l.listeners.len(), 2);
    assert_eq!(l.listeners[1].protocol, SecurityProtocol::Ssl);
}

#[test]
fn security_inter_broker_protocol_picks_the_listener_of_that_name() {
    let l = parse(
        "listeners = \"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0\"\n\"security.inter.broker.protocol\" = \"SSL\"",
    )
    .unwrap();
    assert_eq!(l.inter_broker, "SSL");
    let e = err(
        "listeners = \"PLAINTEXT://127.0.0.1:0\"\n\"security.inter.broker.protocol\" = \"SSL\"",
    );
    assert!(
        e.contains("security.inter.broker.protocol") && e.contains("`SSL`"),
        "{e}"
    );
    let e = err("\"inter.broker.listener.name\" = \"PLAINTEXT\"\n\"security.inter.broker.protocol\" = \"PLAINTEXT\"");
    assert!(e.contains("not both"), "{e}");
}

#[test]
fn an_unknown_inter_broker_listener_is_named() {
    let e = err("\"inter.broker.listener.name\" = \"REPLICATION\"");
    assert!(
        e.contains("inter.broker.listener.name") && e.contains("REPLICATION"),
        "{e}"
    );
}

#[test]
fn an_unknown_listener_name_or_protocol_is_named() {
    let e = err("listeners = \"CLIENT://127.0.0.1:9092\"");
    assert!(
        e.contains("CLIENT") && e.contains("listener.security.protocol.map"),
        "{e}"
    );
    let e = err("listeners = \"CLIENT://127.0.0.1:9092\"\n\"listener.security.protocol.map\" = \"CLIENT:TLS\"");
    assert!(e.contains("TLS") && e.contains("CLIENT"), "{e}");
    let e = err("\"advertised.listeners\" = \"OTHER://h:1\"");
    assert!(
        e.contains("advertised.listeners") && e.contains("OTHER"),
        "{e}"
    );
    let e = err("\"controller.listener.names\" = \"CTRL\"");
    assert!(
        e.contains("controller.listener.names") && e.contains("CTRL"),
        "{e}"
    );
}

#[test]
fn duplicate_names_and_ports_are_named() {
    let e = err("listeners = \"PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093\"");
    assert!(e.contains("`PLAINTEXT` is listed twice"), "{e}");
    let e = err("listeners = \"PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9092\"");
    assert!(
        e.contains("PLAINTEXT") && e.contains("SSL") && e.contains("9092"),
        "{e}"
    );
    // Port 0 twice is two free ports.
    parse("listeners = \"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0\"").unwrap();
}

#[test]
fn malformed_entries_are_named() {
    let e = err("listeners = \"127.0.0.1:9092\"");
    assert!(e.contains("NAME://host:port"), "{e}");
    let e = err("listeners = \"PLAINTEXT://127.0.0.1\"");
    assert!(e.contains("no port"), "{e}");
    let e = err("listeners = \"PLAINTEXT://broker.example.com:9092\"");
    assert!(e.contains("IP address"), "{e}");
    let e = err("listeners = \"\"");
    assert!(e.contains("no Kafka listener"), "{e}");
}

#[test]
fn controller_listeners_are_checked_and_not_bound() {
    let l = parse(
        r#"listeners = "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
"controller.listener.names" = "CONTROLLER"
"controller.quorum.voters" = "1@127.0.0.1:9093"
"#,
    )
    .unwrap();
    assert_eq!(l.listeners.len(), 1);
    assert_eq!(l.controller, ["CONTROLLER"]);
    let e = err(
        r#"listeners = "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9094"
"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
"controller.listener.names" = "CONTROLLER"
"controller.quorum.voters" = "1@127.0.0.1:9093"
"#,
    );
    assert!(e.contains("CONTROLLER") && e.contains("9093"), "{e}");
    let e = err("\"controller.listener.names\" = \"PLAINTEXT\"\nlisteners = \"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0\"\n\"inter.broker.listener.name\" = \"PLAINTEXT\"");
    assert!(
        e.contains("inter.broker.listener.name") && e.contains("controller listener"),
        "{e}"
    );
}

#[test]
fn an_ssl_controller_listener_is_accepted_with_both_stores() {
    // In `listeners` with this node's voter port, keys scoped to the listener.
    let text = r#"listeners = "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL"
"controller.listener.names" = "CONTROLLER"
"controller.quorum.voters" = "1@127.0.0.1:9093"
"listener.name.controller.ssl.keystore.location" = "/etc/ferry/controller.pem"
"listener.name.controller.ssl.truststore.location" = "/etc/ferry/ca.pem"
"#;
    let l = parse(text).unwrap();
    assert_eq!(l.controller, ["CONTROLLER"]);
    assert_eq!(l.listeners.len(), 1);
    let c = BrokerConfig::parse(text).unwrap();
    assert_eq!(
        c.controller_listener().unwrap(),
        Some(("CONTROLLER".to_string(), SecurityProtocol::Ssl))
    );
    // Absent from `listeners`, with the broker-wide keys.
    let l = parse(
        r#"listeners = "PLAINTEXT://127.0.0.1:9092"
"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL"
"controller.listener.names" = "CONTROLLER"
"ssl.keystore.location" = "/etc/ferry/broker.pem"
"ssl.truststore.location" = "/etc/ferry/ca.pem"
"#,
    )
    .unwrap();
    assert_eq!(l.controller, ["CONTROLLER"]);
    // Without controller listeners the quorum is plain TCP.
    assert_eq!(
        BrokerConfig::parse("")
            .unwrap()
            .controller_listener()
            .unwrap(),
        None
    );
}

#[test]
fn an_ssl_controller_listener_without_a_store_names_the_missing_key() {
    let e = err(r#"listeners = "PLAINTEXT://127.0.0.1:9092"
"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL"
"controller.listener.names" = "CONTROLLER"
"ssl.truststore.location" = "/etc/ferry/ca.pem"
"#);
    assert!(
        e.contains("listener.name.controller.ssl.keystore.location") && e.contains("CONTROLLER"),
        "{e}"
    );
    let e = err(r#"listeners = "PLAINTEXT://127.0.0.1:9092"
"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL"
"controller.listener.names" = "CONTROLLER"
"listener.name.controller.ssl.keystore.location" = "/etc/ferry/controller.pem"
"#);
    assert!(
        e.contains("listener.name.controller.ssl.truststore.location"),
        "{e}"
    );
}

#[test]
fn a_sasl_controller_listener_is_refused_by_name() {
    for protocol in ["SASL_SSL", "SASL_PLAINTEXT"] {
        for listeners in [
            "PLAINTEXT://127.0.0.1:9092",
            "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        ] {
            let e = err(&format!(
                r#"listeners = "{listeners}"
"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,CONTROLLER:{protocol}"
"controller.listener.names" = "CONTROLLER"
"controller.quorum.voters" = "1@127.0.0.1:9093"
"ssl.keystore.location" = "/etc/ferry/broker.pem"
"ssl.truststore.location" = "/etc/ferry/ca.pem"
"#
            ));
            assert!(
                e.contains("controller.listener.names")
                    && e.contains("CONTROLLER")
                    && e.contains(protocol)
                    && e.contains("SASL"),
                "{e}"
            );
        }
    }
}

#[test]
fn ssl_settings_with_per_listener_overrides() {
    let c = BrokerConfig::parse(
        r#"listeners = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0"
"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SSL"
"ssl.keystore.location" = "/etc/ferry/broker.pem"
"ssl.truststore.location" = "/etc/ferry/ca.pem"
"listener.name.internal.ssl.client.auth" = "required"
"listener.name.internal.ssl.keystore.location" = "/etc/ferry/internal.pem"
"#,
    )
    .unwrap();
    c.listeners().unwrap();
    let ssl = c.ssl_settings("SSL").unwrap();
    assert_eq!(
        ssl.keystore,
        Some(Keystore::File("/etc/ferry/broker.pem".into()))
    );
    assert_eq!(
        ssl.truststore,
        Some(PemSource::File("/etc/ferry/ca.pem".into()))
    );
    assert_eq!(ssl.client_auth, ClientAuth::None);
    assert!(ssl.verify_hostname);
    let internal = c.ssl_settings("INTERNAL").unwrap();
    assert_eq!(
        internal.keystore,
        Some(Keystore::File("/etc/ferry/internal.pem".into()))
    );
    assert_eq!(internal.client_auth, ClientAuth::Required);
}

#[test]
fn ssl_settings_errors_are_named() {
    let e = BrokerConfig::parse("\"ssl.client.auth\" = \"always\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("ssl.client.auth"), "{e}");
    let e = BrokerConfig::parse("\"ssl.keystore.type\" = \"JKS\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("ssl.keystore.type"), "{e}");
    let e = BrokerConfig::parse("\"listener.name.ssl.client.auth\" = \"maybe\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("listener.name.ssl.client.auth"), "{e}");
    let e = BrokerConfig::parse("\"listener.name.ssl.num.partitions\" = 3")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown config key"), "{e}");
    // An override for a listener that does not exist.
    let e = err("\"listener.name.secure.ssl.client.auth\" = \"required\"");
    assert!(e.contains("listener.name.secure.ssl.client.auth"), "{e}");
    let c =
        BrokerConfig::parse("\"ssl.keystore.location\" = \"/a.pem\"\n\"ssl.keystore.key\" = \"x\"")
            .unwrap();
    let e = c.ssl_settings("SSL").unwrap_err().to_string();
    assert!(e.contains("ssl.keystore"), "{e}");
    let c = BrokerConfig::parse("\"ssl.keystore.certificate.chain\" = \"x\"").unwrap();
    let e = c.ssl_settings("SSL").unwrap_err().to_string();
    assert!(e.contains("ssl.keystore.key"), "{e}");
}

#[test]
fn key_material_is_not_in_debug_output() {
    let c = BrokerConfig::parse(
        "\"ssl.keystore.certificate.chain\" = \"CHAIN\"\n\"ssl.keystore.key\" = \"SECRETKEY\"\n\"ssl.key.password\" = \"PW\"",
    )
    .unwrap();
    let s = format!("{:?}", c.ssl_settings("SSL").unwrap());
    assert!(!s.contains("SECRETKEY") && !s.contains("PW"), "{s}");
}

#[test]
fn sasl_settings_per_listener_and_mechanism() {
    let c = BrokerConfig::parse(
        r#"listeners = "SASL_PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0"
"listener.security.protocol.map" = "SASL_PLAINTEXT:SASL_PLAINTEXT,EXTERNAL:SASL_SSL"
"inter.broker.listener.name" = "SASL_PLAINTEXT"
"ssl.keystore.location" = "/etc/ferry/broker.pem"
"sasl.enabled.mechanisms" = "PLAIN"
"listener.name.sasl_plaintext.plain.sasl.jaas.config" = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret";'
"listener.name.external.sasl.enabled.mechanisms" = "SCRAM-SHA-512,PLAIN"
"listener.name.external.scram-sha-512.sasl.jaas.config" = 'org.apache.kafka.common.security.scram.ScramLoginModule required;'
"listener.name.external.connections.max.reauth.ms" = 60000
"sasl.server.max.receive.size" = 1000
"#,
    )
    .unwrap();
    c.listeners().unwrap();
    let internal = c.sasl_settings("SASL_PLAINTEXT").unwrap();
    assert_eq!(internal.mechanisms, ["PLAIN"]);
    assert_eq!(internal.jaas.len(), 1);
    assert!(internal.jaas[0].1.contains("user_broker"));
    assert_eq!(internal.max_reauth, None);
    assert_eq!(internal.max_receive_size, 1000);
    let external = c.sasl_settings("EXTERNAL").unwrap();
    assert_eq!(external.mechanisms, ["SCRAM-SHA-512", "PLAIN"]);
    // PLAIN has no JAAS text on this listener (the other listener's does not count).
    assert_eq!(external.jaas.len(), 1);
    assert_eq!(external.jaas[0].0, "SCRAM-SHA-512");
    assert_eq!(
        external.max_reauth,
        Some(std::time::Duration::from_millis(60_000))
    );
    // Neither the Debug form nor DescribeConfigs shows JAAS text.
    assert!(!format!("{internal:?}").contains("broker-secret"));
    assert!(crate::broker_config::is_sensitive(
        "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    ));
}

#[test]
fn jaas_text_is_only_read_per_listener_and_mechanism() {
    // Unscoped, or scoped to a listener but not to a mechanism: Kafka brokers ignore it; ferry
    // says so instead of starting without the users the operator meant.
    let unscoped = BrokerConfig::parse(
        r#""sasl.jaas.config" = 'org.apache.kafka.common.security.plain.PlainLoginModule required;'"#,
    )
    .unwrap();
    let e = unscoped.sasl_settings("SASL_PLAINTEXT").unwrap_err();
    assert!(
        e.to_string()
            .contains("listener.name.sasl_plaintext.<mechanism>.sasl.jaas.config"),
        "{e}"
    );
    let no_mechanism = BrokerConfig::parse(
        r#""listener.name.sasl_plaintext.sasl.jaas.config" = 'org.apache.kafka.common.security.plain.PlainLoginModule required;'"#,
    );
    assert!(no_mechanism.is_err());
    let unknown_mechanism =
        BrokerConfig::parse(r#""listener.name.sasl_plaintext.kerberos.sasl.jaas.config" = 'x'"#);
    assert!(unknown_mechanism.is_err());
}
