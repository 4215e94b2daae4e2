//! `ssl.principal.mapping.rules`: Kafka's own test cases (SslPrincipalMapperTest) and the DN
//! format of Java's X500Principal.

use super::*;

fn mapper(rules: &str) -> SslPrincipalMapper {
    SslPrincipalMapper::from_rules(rules).unwrap()
}

#[test]
fn kafkas_valid_rules_parse() {
    for rules in [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ] {
        assert!(SslPrincipalMapper::from_rules(rules).is_ok(), "{rules}");
    }
}

#[test]
fn kafkas_invalid_rules_are_errors() {
    for rules in [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ] {
        let err = SslPrincipalMapper::from_rules(rules).unwrap_err();
        assert!(
            err.to_string().starts_with("Invalid rule: `"),
            "{rules}: {err}"
        );
    }
    let err = SslPrincipalMapper::from_rules("RULE:^CN=(.*?)$/$1/L/U").unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid rule: `RULE:^CN=(.*?)$/$1/L/U`: unmatched substring: `/U`"
    );
}

#[test]
fn rules_our_regex_engine_cannot_run_fail_at_parse_time() {
    for rules in [
        "RULE:^CN=(?=x)(.*)$/$1/",
        "RULE:^CN=(a)\\1$/$1/",
        "RULE:^CN=(.*$/$1/",
        "RULE:^CN=(.*)$/$/",
        "RULE:^CN=(.*)$/${missing}/",
        "RULE:^CN=(.*)$/\\/",
    ] {
        let err = SslPrincipalMapper::from_rules(rules);
        assert!(err.is_err(), "{rules}");
    }
}

#[test]
fn kafkas_mapping_examples() {
    let rules = [
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]
    .join(", ");
    let m = mapper(&rules);
    assert_eq!(
        m.name("CN=Duke,OU=ServiceUsers,O=Org,C=US").unwrap(),
        "duke"
    );
    assert_eq!(
        m.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US").unwrap(),
        "duke@sme"
    );
    assert_eq!(m.name("cn=duke,ou=sme,dc=mycp,dc=com").unwrap(), "DUKE@SME");
    assert_eq!(
        m.name("cN=duke,OU=JavaSoft,O=Sun Microsystems").unwrap(),
        "DUKE"
    );
    assert_eq!(
        m.name("OU=JavaSoft,O=Sun Microsystems,C=US").unwrap(),
        "OU=JavaSoft,O=Sun Microsystems,C=US"
    );
}

#[test]
fn documented_rule_without_flag_keeps_case_and_default_falls_back() {
    let m = mapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT");
    assert_eq!(
        m.name("CN=Kafka-Broker,OU=ServiceUsers,O=ferry").unwrap(),
        "Kafka-Broker"
    );
    assert_eq!(
        m.name("CN=alice,OU=eng,O=ferry").unwrap(),
        "CN=alice,OU=eng,O=ferry"
    );
    assert_eq!(
        m.principal("CN=svc,OU=ServiceUsers").unwrap(),
        KafkaPrincipal::user("svc")
    );
}

#[test]
fn no_matching_rule_is_an_error() {
    let m = mapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/U");
    let err = m.name("CN=alice,OU=eng").unwrap_err();
    assert_eq!(
        err.to_string(),
        "No rules apply to CN=alice,OU=eng, rules [RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/U]"
    );
    assert!(
        mapper("").name("CN=x").is_err(),
        "an empty list matches nothing"
    );
}

#[test]
fn default_mapper_is_default_rule() {
    let m = SslPrincipalMapper::default();
    assert_eq!(m.to_string(), "SslPrincipalMapper(rules = [DEFAULT])");
    assert_eq!(m.name("CN=a,O=b").unwrap(), "CN=a,O=b");
    assert_eq!(mapper(DEFAULT_RULES).to_string(), m.to_string());
}

fn splits(expected: &str, rules: &str) {
    assert_eq!(
        mapper(rules).to_string(),
        format!("SslPrincipalMapper(rules = {expected})"),
        "{rules}"
    );
}

#[test]
fn kafkas_rule_splitting() {
    splits("[]", "");
    splits("[DEFAULT]", "DEFAULT");
    splits("[RULE:/]", "RULE://");
    splits("[RULE:/.*]", "RULE:/.*/");
    splits("[RULE:/.*/L]", "RULE:/.*/L");
    splits("[RULE:/, DEFAULT]", "RULE://,DEFAULT");
    splits("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  ");
    splits(
        "[RULE:   /     , DEFAULT]",
        "  RULE:   /     / ,  DEFAULT  ",
    );
    splits(
        "[RULE:  /     /U, DEFAULT]",
        "  RULE:  /     /U   ,DEFAULT  ",
    );
    splits(
        "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
        "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
    );
    // Empty items are skipped.
    splits("[]", ",   , , ,      , , ,   ");
    splits("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,");
    splits(
        "[RULE: /   , DEFAULT]",
        ",  , RULE: /   /    ,,,   DEFAULT, ,   ",
    );
    splits(
        "[RULE:   /  /U, DEFAULT]",
        "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,",
    );
    // Escapes stay in the pattern and the replacement as written.
    splits(
        "[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]",
        "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//",
    );
    splits(
        "[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]",
        "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/",
    );
    // Commas inside a pattern or replacement do not split.
    splits(
        "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
        "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
    );
}

#[test]
fn kafkas_comma_with_whitespace() {
    let m = mapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT");
    assert_eq!(
        m.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz").unwrap(),
        "Tkac\\, Adam"
    );
}

#[test]
fn group_references_follow_java() {
    // $4 with three groups is literal, as Kafka escapes it.
    let m = mapper("RULE:^(a)(b)(c)$/$3$2$1$4/");
    assert_eq!(m.name("abc").unwrap(), "cba$4");
    // $12 with three groups is $1 then "2".
    let m = mapper("RULE:^(a)(b)(c)$/$12/");
    assert_eq!(m.name("abc").unwrap(), "a2");
    // $0 is the whole match; \$ is a dollar sign; named groups work.
    let m = mapper("RULE:^CN=(?P<user>[^,]+).*$/${user}\\$$0/");
    assert_eq!(m.name("CN=bob,O=x").unwrap(), "bob$CN=bob,O=x");
}

#[test]
fn distinguished_name_is_javas_rfc2253_form() {
    let subject = vec![
        vec![DnAttribute::text("2.5.4.6", "US")],
        vec![DnAttribute::text("2.5.4.10", "ferry")],
        vec![DnAttribute::text("2.5.4.11", "eng")],
        vec![DnAttribute::text("2.5.4.3", "alice")],
    ];
    assert_eq!(distinguished_name(&subject), "CN=alice,OU=eng,O=ferry,C=US");

    let subject = vec![
        vec![DnAttribute::text("dc", "com")],
        vec![DnAttribute::text("DC", "example")],
        vec![
            DnAttribute::text("CN", "Tkac, Adam"),
            DnAttribute::text("0.9.2342.19200300.100.1.1", "tadam"),
        ],
    ];
    assert_eq!(
        distinguished_name(&subject),
        "CN=Tkac\\, Adam+UID=tadam,DC=example,DC=com"
    );

    let email_der = [&[0x16, 0x11][..], b"alice@example.com"].concat();
    let subject = vec![
        vec![DnAttribute {
            attribute_type: "1.2.840.113549.1.9.1".into(),
            value: DnValue::Der(email_der),
        }],
        vec![DnAttribute::text("2.5.4.3", "alice")],
    ];
    assert_eq!(
        distinguished_name(&subject),
        "CN=alice,1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d"
    );
}

#[test]
fn values_are_escaped_like_java() {
    assert_eq!(
        escape_value("a,b=c+d<e>f#g;h\"i\\j"),
        "a\\,b\\=c\\+d\\<e\\>f\\#g\\;h\\\"i\\\\j"
    );
    assert_eq!(escape_value("  padded  "), "\\ \\ padded\\ \\ ");
    assert_eq!(escape_value("in side"), "in side");
    assert_eq!(escape_value("nul\0"), "nul\\00");
    assert_eq!(escape_value("élan"), "élan");
}

#[test]
fn dn_then_rules_end_to_end() {
    let subject = vec![
        vec![DnAttribute::text("O", "ferry")],
        vec![DnAttribute::text("OU", "ServiceUsers")],
        vec![DnAttribute::text("CN", "Broker-1")],
    ];
    let dn = distinguished_name(&subject);
    let m = mapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT");
    assert_eq!(m.principal(&dn).unwrap().to_string(), "User:broker-1");
}

#[test]
fn replacement_repeats_on_an_empty_match_at_the_end_as_java_does() {
    // Java: "abc".replaceAll("(.*)", "x$1") is "xabcx"; Kafka inherits it.
    assert_eq!(mapper("RULE:(.*)/x$1/").name("abc").unwrap(), "xabcx");
    assert_eq!(mapper("RULE:^(.*)$/x$1/").name("abc").unwrap(), "xabc");
    assert_eq!(mapper("RULE:b*/-/").name("abc").unwrap_err().dn, "abc");
    assert_eq!(mapper("RULE:a?b?c?/-/").name("abc").unwrap(), "--");
}
