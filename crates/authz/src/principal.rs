//! Who asks and from where: the principal (`Type:name`, Kafka's `KafkaPrincipal`) and the host
//! string an ACL's host is compared with.
//!
//! ACLs store principals and hosts as plain strings and Kafka compares them as strings, so the
//! broker must present them exactly as Kafka would: the principal as `type:name` split at the
//! first colon, the host as Java's `InetAddress.getHostAddress()` writes it ([`host_address`]).

use std::net::IpAddr;

use crate::error::AclError;

/// The principal type of users (`User:alice`).
pub const USER_TYPE: &str = "User";

/// The principal string of an ACL that matches every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// The host string of an ACL that matches every host.
pub const WILDCARD_HOST: &str = "*";

/// Who asks: ferry-auth's principal, the one authentication produces, so that the principal
/// a connection proved and the one ACLs are checked for are the same type.
pub use ferry_auth::KafkaPrincipal;

/// Parses `Type:name` as an ACL or `super.users` entry names a principal (split at the first
/// colon; Kafka's `SecurityUtils.parseKafkaPrincipal`).
pub fn parse_principal(s: &str) -> Result<KafkaPrincipal, AclError> {
    s.parse()
        .map_err(|_| AclError::InvalidPrincipal(s.to_owned()))
}

/// True when `acl_principal` (an ACL's principal string) names `principal`.
pub(crate) fn names(principal: &KafkaPrincipal, acl_principal: &str) -> bool {
    split_principal(acl_principal)
        .is_some_and(|(t, n)| t == principal.principal_type() && n == principal.name())
}

/// Splits `Type:name` at the first colon; `None` when empty or without a colon.
pub(crate) fn split_principal(s: &str) -> Option<(&str, &str)> {
    s.split_once(':')
}

/// The host string Kafka compares with an ACL's host: Java's `getHostAddress()`. IPv4 is
/// dotted decimal; IPv6 is eight lower-case hex groups without zero compression
/// (`0:0:0:0:0:0:0:1`, not `::1`); an IPv4-mapped IPv6 address is shown as IPv4, as Java
/// turns it into an `Inet4Address`. (A link-local scope suffix such as `%eth0` is not added.)
pub fn host_address(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let groups: Vec<String> = v6.segments().iter().map(|g| format!("{g:x}")).collect();
                groups.join(":")
            }
        },
    }
}
