//! JAAS parsing: Kafka's documented examples, quoting and escapes, comments, and every error.

use super::*;
use crate::plain::PlainAuthenticator;

const PLAIN_EXAMPLE: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";"#;

#[test]
fn kafkas_plain_example() {
    let config = PlainJaasConfig::parse(PLAIN_EXAMPLE).unwrap();
    let login = config.login.unwrap();
    assert_eq!(login.username, "admin");
    assert_eq!(login.password.expose(), "admin-secret");
    assert_eq!(config.users.len(), 2);
    assert!(config
        .users
        .authenticate("alice", &Secret::new("alice-secret")));
    assert!(config
        .users
        .authenticate("admin", &Secret::new("admin-secret")));
    assert!(!config
        .users
        .authenticate("alice", &Secret::new("admin-secret")));
}

#[test]
fn kafkas_scram_example_over_several_lines() {
    let text = "org.apache.kafka.common.security.scram.ScramLoginModule required\n    username=\"admin\"\n    password=\"admin-secret\";\n";
    let config = ScramJaasConfig::parse(text).unwrap();
    let login = config.login.unwrap();
    assert_eq!(login.username, "admin");
    assert_eq!(login.password.expose(), "admin-secret");
}

#[test]
fn server_only_config_has_no_login() {
    let text = "org.apache.kafka.common.security.plain.PlainLoginModule required user_bob='b';";
    let config = PlainJaasConfig::parse(text).unwrap();
    assert!(config.login.is_none());
    assert!(config.users.contains("bob"));
}

#[test]
fn quoting_escapes_words_and_comments() {
    let text = r#"
        // a comment
        org.apache.kafka.common.security.plain.PlainLoginModule REQUIRED /* flag is case-insensitive */
            username=admin
            password='it\'s "quoted"'
            user_admin="back\\slash\"quote\ttab\nnl\101\x"
            user_a-b.c_$="x";
    "#;
    let entry = parse_single(text).unwrap();
    assert_eq!(entry.control_flag, ControlFlag::Required);
    assert_eq!(entry.option("username").unwrap().expose(), "admin");
    assert_eq!(
        entry.option("password").unwrap().expose(),
        "it's \"quoted\""
    );
    assert_eq!(
        entry.option("user_admin").unwrap().expose(),
        "back\\slash\"quote\ttab\nnlAx"
    );
    assert_eq!(entry.option("user_a-b.c_$").unwrap().expose(), "x");
    let names: Vec<&str> = entry.options().map(|(k, _)| k).collect();
    assert_eq!(
        names,
        ["username", "password", "user_admin", "user_a-b.c_$"]
    );
}

#[test]
fn all_control_flags_and_several_entries() {
    let text = "a.B required; a.C Requisite; a.D sufficient x=y; a.E optional;";
    let entries = parse(text).unwrap();
    let flags: Vec<ControlFlag> = entries.iter().map(|e| e.control_flag).collect();
    assert_eq!(
        flags,
        [
            ControlFlag::Required,
            ControlFlag::Requisite,
            ControlFlag::Sufficient,
            ControlFlag::Optional
        ]
    );
    let err = parse_single(text).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid JAAS config: JAAS config property contains 4 login modules, should be 1 module"
    );
}

fn error_of(text: &str) -> String {
    let err = parse(text).unwrap_err();
    err.to_string()
}

#[test]
fn syntax_errors_say_where_and_what() {
    let cases = [
        ("", "Login module not specified"),
        ("  // only a comment\n", "Login module not specified"),
        ("a.B", "control flag not specified"),
        (
            "a.B mandatory;",
            "Invalid login module control flag 'mandatory'",
        ),
        ("a.B required", "not terminated by semi-colon"),
        ("a.B required x=\"y\"", "not terminated by semi-colon"),
        ("a.B required x;", "Value not specified for key 'x'"),
        ("a.B required x=;", "Value not specified for key 'x'"),
        ("a.B required x=123;", "value of 'x' must be quoted"),
        (
            "a.B required x=\"unterminated;",
            "unterminated quoted string",
        ),
        ("a.B required x=\"line\nbreak\";", "line break"),
        ("a.B required /* never closed", "unterminated /* comment"),
        ("a.B required x=\"1\" x=\"2\";", "option 'x' is set twice"),
        ("a.B required = x;", "expected an option name"),
        ("; a.B required;", "expected a login module class name"),
    ];
    for (text, expected) in cases {
        let err = error_of(text);
        assert!(err.contains(expected), "{text:?}: {err}");
    }
    let err = parse("a.B required\n  x=\"1\" x=\"2\";").unwrap_err();
    assert_eq!(
        err,
        JaasError::Syntax {
            line: 2,
            column: 9,
            message: "option 'x' is set twice".to_owned()
        }
    );
}

#[test]
fn semantic_errors() {
    let scram_for_plain =
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"a\" password=\"b\";";
    let err = PlainJaasConfig::parse(scram_for_plain)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("must be org.apache.kafka.common.security.plain.PlainLoginModule"),
        "{err}"
    );
    let err = ScramJaasConfig::parse(PLAIN_EXAMPLE)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("must be org.apache.kafka.common.security.scram.ScramLoginModule"),
        "{err}"
    );

    let half = "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"a\";";
    let err = ScramJaasConfig::parse(half).unwrap_err().to_string();
    assert!(err.contains("'username' but not 'password'"), "{err}");

    let token = "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"a\" password=\"b\" tokenauth=\"true\";";
    let err = ScramJaasConfig::parse(token).unwrap_err().to_string();
    assert!(err.contains("tokenauth"), "{err}");

    let nobody = "org.apache.kafka.common.security.plain.PlainLoginModule required user_=\"pw\";";
    let err = PlainJaasConfig::parse(nobody).unwrap_err().to_string();
    assert!(err.contains("names no user"), "{err}");
}

#[test]
fn secrets_never_reach_debug_or_errors() {
    let config = PlainJaasConfig::parse(PLAIN_EXAMPLE).unwrap();
    let debug = format!("{config:?} {:?}", parse_single(PLAIN_EXAMPLE).unwrap());
    assert!(!debug.contains("secret"), "{debug}");
    assert!(
        debug.contains("admin") && debug.contains("alice"),
        "{debug}"
    );

    let failing = [
        "a.B required password=\"hunter2\" password=\"hunter2\";",
        "a.B required password=\"hunter2\" oops;",
        "a.B required password=\"hunter2\"",
        "org.apache.kafka.common.security.scram.ScramLoginModule required password=\"hunter2\";",
        "a.B required username=\"u\" \"hunter2\";",
        "a.B required \"hunter2\" = 12;",
        "a.B \"hunter2\" x=\"y\";",
    ];
    for text in failing {
        let err = match parse_single(text) {
            Err(err) => err,
            Ok(entry) => ScramJaasConfig::from_entry(&entry).unwrap_err(),
        };
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
