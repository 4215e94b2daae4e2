//! SASL/PLAIN on the server (RFC 4616, Kafka's `PlainSaslServer`): one client message,
//! `[authzid] NUL authcid NUL passwd`, checked against a [`PlainAuthenticator`].
//!
//! Kafka sends PLAIN's failure messages to the client as they are (they say nothing a client
//! could not learn by trying), so they are [`AuthError::Rejected`] with Kafka's texts. The
//! password check happens before the authorization-id check, as in Kafka, so a wrong password is
//! reported as such whatever authzid was asked for.

use std::collections::HashMap;
use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::AuthError;
use crate::mechanism::Mechanism;
use crate::principal::KafkaPrincipal;
use crate::secret::Secret;
use crate::{SaslServer, ServerReply};

/// Decides whether a PLAIN username/password pair is valid. Implementations compare passwords in
/// constant time and take about as long for an unknown user as for a known one.
pub trait PlainAuthenticator: Send + Sync {
    /// Whether `password` is `username`'s password.
    fn authenticate(&self, username: &str, password: &Secret) -> bool;
}

impl<T: PlainAuthenticator + ?Sized> PlainAuthenticator for std::sync::Arc<T> {
    fn authenticate(&self, username: &str, password: &Secret) -> bool {
        (**self).authenticate(username, password)
    }
}

impl<T: PlainAuthenticator + ?Sized> PlainAuthenticator for &T {
    fn authenticate(&self, username: &str, password: &Secret) -> bool {
        (**self).authenticate(username, password)
    }
}

/// PLAIN users and their passwords, as the JAAS `user_<name>="<password>"` options list them
/// (Kafka's `PlainServerCallbackHandler`).
#[derive(Clone, Default)]
pub struct PlainUsers {
    /// SHA-256 of each password: comparing fixed-length digests keeps the comparison's time
    /// independent of the password's length as well as of its content.
    users: HashMap<String, [u8; 32]>,
}

impl PlainUsers {
    /// No users: every authentication fails.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a user.
    pub fn insert(&mut self, username: impl Into<String>, password: &Secret) {
        self.users
            .insert(username.into(), digest(password.expose().as_bytes()));
    }

    /// Whether `username` is known.
    pub fn contains(&self, username: &str) -> bool {
        self.users.contains_key(username)
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether there are no users.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The user names, in no particular order.
    pub fn usernames(&self) -> impl Iterator<Item = &str> {
        self.users.keys().map(String::as_str)
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(&Sha256::digest(bytes));
    out
}

impl PlainAuthenticator for PlainUsers {
    fn authenticate(&self, username: &str, password: &Secret) -> bool {
        let given = digest(password.expose().as_bytes());
        // An unknown user is compared against a digest no password has (all 0xff, while the
        // chance of SHA-256 giving it is nil), so both paths hash and compare once.
        let (expected, known) = match self.users.get(username) {
            Some(expected) => (*expected, true),
            None => ([0xff; 32], false),
        };
        let equal: bool = given.ct_eq(&expected).into();
        equal && known
    }
}

impl fmt::Debug for PlainUsers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.usernames().collect();
        names.sort_unstable();
        f.debug_struct("PlainUsers")
            .field("users", &names)
            .finish_non_exhaustive()
    }
}

/// The three fields of a PLAIN message.
struct PlainMessage<'a> {
    authzid: &'a str,
    authcid: &'a str,
    password: &'a str,
}

/// Splits `[authzid] NUL authcid NUL passwd` into its three fields, with Kafka's messages.
fn parse_message(message: &[u8]) -> Result<PlainMessage<'_>, AuthError> {
    let text = std::str::from_utf8(message)
        .map_err(|_| AuthError::rejected("Invalid SASL/PLAIN response: not valid UTF-8"))?;
    let tokens: Vec<&str> = text.split('\0').collect();
    match tokens.as_slice() {
        [authzid, authcid, password] => Ok(PlainMessage {
            authzid,
            authcid,
            password,
        }),
        // Kafka counts at most four tokens before giving up.
        other => Err(AuthError::rejected(format!(
            "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
            other.len().min(4)
        ))),
    }
}

/// Checks one PLAIN client message and returns the authenticated principal.
pub fn authenticate(
    authenticator: &dyn PlainAuthenticator,
    message: &[u8],
) -> Result<KafkaPrincipal, AuthError> {
    let PlainMessage {
        authzid,
        authcid,
        password,
    } = parse_message(message)?;
    if authcid.is_empty() {
        return Err(AuthError::rejected(
            "Authentication failed: username not specified",
        ));
    }
    if password.is_empty() {
        return Err(AuthError::rejected(
            "Authentication failed: password not specified",
        ));
    }
    if !authenticator.authenticate(authcid, &Secret::new(password)) {
        return Err(AuthError::rejected(
            "Authentication failed: Invalid username or password",
        ));
    }
    if !authzid.is_empty() && authzid != authcid {
        return Err(AuthError::rejected(
            "Authentication failed: Client requested an authorization id that is different from username",
        ));
    }
    Ok(KafkaPrincipal::user(authcid))
}

/// The client's PLAIN message for `username` and `password` (no authorization id), for ferry's
/// own connections to brokers that use PLAIN. The bytes hold the password: do not log them.
pub fn client_message(username: &str, password: &Secret) -> Vec<u8> {
    let mut message = Vec::with_capacity(username.len() + password.expose().len() + 2);
    message.push(0);
    message.extend_from_slice(username.as_bytes());
    message.push(0);
    message.extend_from_slice(password.expose().as_bytes());
    message
}

/// The PLAIN exchange as a [`SaslServer`]: one message, then complete or failed.
pub struct PlainServer<A> {
    authenticator: A,
    state: PlainState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PlainState {
    AwaitingMessage,
    Complete,
    Failed,
}

impl<A: PlainAuthenticator> PlainServer<A> {
    /// A server checking passwords with `authenticator`.
    pub fn new(authenticator: A) -> Self {
        PlainServer {
            authenticator,
            state: PlainState::AwaitingMessage,
        }
    }
}

impl<A> fmt::Debug for PlainServer<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainServer")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<A: PlainAuthenticator> SaslServer for PlainServer<A> {
    fn mechanism(&self) -> Mechanism {
        Mechanism::Plain
    }

    fn step(&mut self, client_message: &[u8]) -> Result<ServerReply, AuthError> {
        match self.state {
            PlainState::AwaitingMessage => {}
            PlainState::Complete | PlainState::Failed => {
                return Err(AuthError::IllegalState {
                    mechanism: Mechanism::Plain,
                    state: if self.state == PlainState::Complete {
                        "complete"
                    } else {
                        "failed"
                    },
                })
            }
        }
        match authenticate(&self.authenticator, client_message) {
            Ok(principal) => {
                self.state = PlainState::Complete;
                Ok(ServerReply::Complete {
                    response: Vec::new(),
                    principal,
                })
            }
            Err(err) => {
                self.state = PlainState::Failed;
                Err(err)
            }
        }
    }

    fn is_complete(&self) -> bool {
        self.state == PlainState::Complete
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AuthErrorKind;

    fn users() -> PlainUsers {
        let mut users = PlainUsers::new();
        users.insert("admin", &Secret::new("admin-secret"));
        users.insert("alice", &Secret::new("alice-secret"));
        users
    }

    fn rejected(message: &[u8]) -> String {
        let err = authenticate(&users(), message).unwrap_err();
        assert_eq!(err.kind(), AuthErrorKind::AuthenticationFailed);
        err.to_string()
    }

    #[test]
    fn good_password_authenticates_the_user() {
        let p = authenticate(&users(), b"\0alice\0alice-secret").unwrap();
        assert_eq!(p, KafkaPrincipal::user("alice"));
        // An authzid equal to the authcid is accepted.
        let p = authenticate(&users(), b"alice\0alice\0alice-secret").unwrap();
        assert_eq!(p.to_string(), "User:alice");
    }

    #[test]
    fn client_message_is_what_the_server_reads() {
        let message = client_message("alice", &Secret::new("alice-secret"));
        assert_eq!(message, b"\0alice\0alice-secret");
        let p = authenticate(&users(), &message).unwrap();
        assert_eq!(p.name(), "alice");
    }

    #[test]
    fn wrong_password_and_unknown_user_fail_alike() {
        let wrong = rejected(b"\0alice\0admin-secret");
        let unknown = rejected(b"\0mallory\0alice-secret");
        assert_eq!(wrong, "Authentication failed: Invalid username or password");
        assert_eq!(wrong, unknown);
        // A prefix or an extension of the password is not the password.
        rejected(b"\0alice\0alice-secre");
        rejected(b"\0alice\0alice-secrett");
    }

    #[test]
    fn authzid_different_from_username_is_rejected() {
        assert_eq!(
            rejected(b"admin\0alice\0alice-secret"),
            "Authentication failed: Client requested an authorization id that is different from username"
        );
    }

    #[test]
    fn malformed_messages_are_rejected_with_kafkas_texts() {
        assert_eq!(
            rejected(b"alice-secret"),
            "Invalid SASL/PLAIN response: expected 3 tokens, got 1"
        );
        assert_eq!(
            rejected(b"alice\0alice-secret"),
            "Invalid SASL/PLAIN response: expected 3 tokens, got 2"
        );
        assert_eq!(
            rejected(b"\0alice\0alice-secret\0extra\0more"),
            "Invalid SASL/PLAIN response: expected 3 tokens, got 4"
        );
        assert_eq!(
            rejected(b"\0\0alice-secret"),
            "Authentication failed: username not specified"
        );
        assert_eq!(
            rejected(b"\0alice\0"),
            "Authentication failed: password not specified"
        );
        assert!(rejected(b"\0alice\0\xff\xfe").contains("UTF-8"));
    }

    #[test]
    fn server_completes_once_then_refuses_more() {
        let mut server = PlainServer::new(users());
        assert_eq!(server.mechanism(), Mechanism::Plain);
        let reply = server.step(b"\0admin\0admin-secret").unwrap();
        assert_eq!(
            reply,
            ServerReply::Complete {
                response: vec![],
                principal: KafkaPrincipal::user("admin")
            }
        );
        assert!(server.is_complete());
        let err = server.step(b"\0admin\0admin-secret").unwrap_err();
        assert_eq!(err.kind(), AuthErrorKind::IllegalSaslState);
    }

    #[test]
    fn server_fails_for_good_after_a_bad_message() {
        let mut server = PlainServer::new(users());
        server.step(b"\0admin\0nope").unwrap_err();
        assert!(!server.is_complete());
        let err = server.step(b"\0admin\0admin-secret").unwrap_err();
        assert_eq!(err.kind(), AuthErrorKind::IllegalSaslState);
    }

    #[test]
    fn debug_lists_names_but_no_passwords() {
        let text = format!("{:?}", users());
        assert!(text.contains("alice") && text.contains("admin"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }
}
