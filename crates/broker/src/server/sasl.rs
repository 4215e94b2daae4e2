//! SASL on one connection of a `SASL_PLAINTEXT` or `SASL_SSL` listener: the gate every request
//! passes before the handlers see it.
//!
//! Until the client has authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate
//! may pass, as in Kafka; anything else closes the connection. A failed authentication is
//! answered (SASL_AUTHENTICATION_FAILED with Kafka's message, nothing more) and the connection
//! then closes. With `connections.max.reauth.ms` set, a session lasts that long: the client
//! re-authenticates in place (KIP-368, a new handshake on the same connection, the same
//! principal), and a request after the session expired closes the connection.
//!
//! The exchanges themselves (PLAIN, SCRAM) are ferry-auth's; this module only sequences them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_auth::{
    AuthErrorKind, KafkaPrincipal, Mechanism, PlainServer, PlainUsers, SaslServer,
    ScramCredentialSource, ScramServer, ServerReply,
};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

/// What a SASL listener accepts: its mechanisms and where each finds its users.
pub struct SaslSettings {
    /// `sasl.enabled.mechanisms`, in the order the handshake lists them.
    pub mechanisms: Vec<Mechanism>,
    /// PLAIN's users (`user_<name>="<password>"` of the listener's PLAIN JAAS config).
    pub plain_users: Arc<PlainUsers>,
    /// SCRAM credentials (those stored in the controller quorum).
    pub scram: Arc<dyn ScramCredentialSource>,
    /// `connections.max.reauth.ms`: how long a session lasts (`None`: for ever).
    pub max_reauth: Option<Duration>,
}

/// The gate's verdict on one request.
#[derive(Debug)]
pub enum Gate {
    /// Authenticated (or an ApiVersions request): hand the request to the handlers.
    Pass,
    /// A SASL request: send this answer, then read on.
    Answer(ResponseKind),
    /// Send this answer, then close the connection (a failed or out-of-order exchange).
    AnswerThenClose(ResponseKind),
    /// Close the connection without an answer, for this reason (logged by the caller).
    Close(String),
}

enum Stage {
    /// Waiting for SaslHandshake.
    Handshake,
    /// Between SaslHandshake and the end of the exchange.
    Exchange(Box<dyn SaslServer>),
    /// Authenticated; `expires` is the session's end.
    Authenticated { expires: Option<Instant> },
}

/// One connection's SASL state.
pub struct SaslSession {
    settings: Arc<SaslSettings>,
    stage: Stage,
    /// Who the client proved to be; kept through re-authentication, which must not change it.
    principal: Option<KafkaPrincipal>,
}

impl SaslSession {
    pub fn new(settings: Arc<SaslSettings>) -> Self {
        Self {
            settings,
            stage: Stage::Handshake,
            principal: None,
        }
    }

    /// The authenticated principal, once there is one.
    pub fn principal(&self) -> Option<&KafkaPrincipal> {
        self.principal.as_ref()
    }

    /// Whether the client has authenticated (its session may still have expired).
    pub fn is_authenticated(&self) -> bool {
        self.principal.is_some()
    }

    /// Decides what happens to a request of `api_key` at `version`, received at `now`.
    pub fn check(
        &mut self,
        api_key: ApiKey,
        version: i16,
        body: &RequestKind,
        now: Instant,
    ) -> Gate {
        match body {
            RequestKind::ApiVersions(_) => Gate::Pass,
            RequestKind::SaslHandshake(r) => self.handshake(r.mechanism.as_str()),
            RequestKind::SaslAuthenticate(r) => self.authenticate(&r.auth_bytes, version, now),
            _ => match &self.stage {
                Stage::Authenticated { expires } => match expires {
                    Some(at) if now >= *at => Gate::Close(format!(
                        "the SASL session of {} expired (connections.max.reauth.ms) before a {api_key:?} request",
                        self.principal.as_ref().map_or_else(String::new, |p| p.to_string())
                    )),
                    _ => Gate::Pass,
                },
                // A re-authentication in progress: Kafka lets no other request through either.
                _ => Gate::Close(format!(
                    "unexpected Kafka request of type {api_key:?} during SASL authentication"
                )),
            },
        }
    }

    fn handshake(&mut self, asked: &str) -> Gate {
        let enabled = || {
            self.settings
                .mechanisms
                .iter()
                .map(|m| StrBytes::from_static_str(m.name()))
                .collect::<Vec<_>>()
        };
        if matches!(self.stage, Stage::Exchange(_)) {
            return Gate::AnswerThenClose(ResponseKind::SaslHandshake(
                SaslHandshakeResponse::default()
                    .with_error_code(ResponseError::IllegalSaslState.code())
                    .with_mechanisms(enabled()),
            ));
        }
        let Some(mechanism) = self
            .settings
            .mechanisms
            .iter()
            .copied()
            .find(|m| m.name() == asked)
        else {
            return Gate::AnswerThenClose(ResponseKind::SaslHandshake(
                SaslHandshakeResponse::default()
                    .with_error_code(ResponseError::UnsupportedSaslMechanism.code())
                    .with_mechanisms(enabled()),
            ));
        };
        let server: Box<dyn SaslServer> = match mechanism.scram() {
            Some(scram) => Box::new(ScramServer::new(scram, self.settings.scram.clone())),
            None => Box::new(PlainServer::new(self.settings.plain_users.clone())),
        };
        self.stage = Stage::Exchange(server);
        Gate::Answer(ResponseKind::SaslHandshake(
            SaslHandshakeResponse::default().with_mechanisms(enabled()),
        ))
    }

    fn authenticate(&mut self, auth_bytes: &Bytes, version: i16, now: Instant) -> Gate {
        let reauthenticating = self.principal.is_some();
        let Stage::Exchange(server) = &mut self.stage else {
            return Gate::AnswerThenClose(ResponseKind::SaslAuthenticate(
                SaslAuthenticateResponse::default()
                    .with_error_code(ResponseError::IllegalSaslState.code())
                    .with_error_message(Some(StrBytes::from_static_str(
                        "Unexpected SaslAuthenticate request before a SaslHandshake",
                    ))),
            ));
        };
        let failed = |code: i16, message: String| {
            Gate::AnswerThenClose(ResponseKind::SaslAuthenticate(
                SaslAuthenticateResponse::default()
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message))),
            ))
        };
        match server.step(auth_bytes) {
            Ok(ServerReply::Challenge(bytes)) => Gate::Answer(ResponseKind::SaslAuthenticate(
                SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(bytes)),
            )),
            Ok(ServerReply::Complete {
                response,
                principal,
            }) => {
                if let Some(before) = &self.principal {
                    if *before != principal {
                        tracing::info!(%before, after = %principal,
                            "re-authentication refused: the principal changed");
                        return failed(
                            ResponseError::SaslAuthenticationFailed.code(),
                            format!("Cannot change principals during re-authentication from {before}: {principal}"),
                        );
                    }
                }
                let lifetime = self.settings.max_reauth;
                self.stage = Stage::Authenticated {
                    expires: lifetime.map(|l| now + l),
                };
                self.principal = Some(principal);
                let mut answer =
                    SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(response));
                // v1 tells the client how long its session lasts, so it re-authenticates in time.
                if version >= 1 {
                    if let Some(l) = lifetime {
                        answer = answer.with_session_lifetime_ms(
                            i64::try_from(l.as_millis()).unwrap_or(i64::MAX),
                        );
                    }
                }
                Gate::Answer(ResponseKind::SaslAuthenticate(answer))
            }
            Err(e) => {
                tracing::info!(
                    mechanism = server.mechanism().name(),
                    reason = e.reason().unwrap_or_default(),
                    "SASL authentication failed"
                );
                let code = match e.kind() {
                    AuthErrorKind::AuthenticationFailed => ResponseError::SaslAuthenticationFailed,
                    AuthErrorKind::IllegalSaslState => ResponseError::IllegalSaslState,
                    AuthErrorKind::UnsupportedSaslMechanism => {
                        ResponseError::UnsupportedSaslMechanism
                    }
                    _ => ResponseError::UnknownServerError,
                };
                failed(code.code(), e.client_message(reauthenticating))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use ferry_auth::{ScramClient, ScramCredential, ScramMechanism, Secret};
    use kafka_protocol::messages::{
        ApiVersionsRequest, MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
    };

    fn settings(max_reauth: Option<Duration>) -> Arc<SaslSettings> {
        let mut plain = PlainUsers::new();
        plain.insert("alice", &Secret::from("alice-secret"));
        let mut scram = HashMap::new();
        scram.insert(
            ("bob".to_string(), ScramMechanism::Sha512),
            ScramCredential::from_password(ScramMechanism::Sha512, "bob-secret", 4096).unwrap(),
        );
        Arc::new(SaslSettings {
            mechanisms: vec![Mechanism::Plain, Mechanism::ScramSha512],
            plain_users: Arc::new(plain),
            scram: Arc::new(scram),
            max_reauth,
        })
    }

    fn handshake(mechanism: &'static str) -> RequestKind {
        RequestKind::SaslHandshake(
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism)),
        )
    }

    fn authenticate(bytes: Vec<u8>) -> RequestKind {
        RequestKind::SaslAuthenticate(
            SaslAuthenticateRequest::default().with_auth_bytes(bytes.into()),
        )
    }

    fn metadata() -> RequestKind {
        RequestKind::Metadata(MetadataRequest::default())
    }

    fn plain(user: &str, password: &str) -> Vec<u8> {
        format!("\0{user}\0{password}").into_bytes()
    }

    fn error_of(gate: &Gate) -> i16 {
        match gate {
            Gate::Answer(ResponseKind::SaslAuthenticate(r))
            | Gate::AnswerThenClose(ResponseKind::SaslAuthenticate(r)) => r.error_code,
            Gate::Answer(ResponseKind::SaslHandshake(r))
            | Gate::AnswerThenClose(ResponseKind::SaslHandshake(r)) => r.error_code,
            other => panic!("not a SASL answer: {other:?}"),
        }
    }

    #[test]
    fn only_api_versions_and_sasl_pass_before_authentication() {
        let now = Instant::now();
        let mut s = SaslSession::new(settings(None));
        let versions = RequestKind::ApiVersions(ApiVersionsRequest::default());
        assert!(matches!(
            s.check(ApiKey::ApiVersions, 3, &versions, now),
            Gate::Pass
        ));
        assert!(matches!(
            s.check(ApiKey::Metadata, 12, &metadata(), now),
            Gate::Close(_)
        ));
        // SaslAuthenticate before a handshake is an illegal state, answered, then closed.
        let g = s.check(
            ApiKey::SaslAuthenticate,
            2,
            &authenticate(plain("alice", "alice-secret")),
            now,
        );
        assert!(matches!(g, Gate::AnswerThenClose(_)));
        assert_eq!(error_of(&g), ResponseError::IllegalSaslState.code());
        assert!(s.principal().is_none());
    }

    #[test]
    fn plain_logs_in_and_then_requests_pass() {
        let now = Instant::now();
        let mut s = SaslSession::new(settings(None));
        let g = s.check(ApiKey::SaslHandshake, 1, &handshake("PLAIN"), now);
        assert!(matches!(g, Gate::Answer(_)));
        assert_eq!(error_of(&g), 0);
        let g = s.check(
            ApiKey::SaslAuthenticate,
            2,
            &authenticate(plain("alice", "alice-secret")),
            now,
        );
        assert!(matches!(g, Gate::Answer(_)));
        assert_eq!(error_of(&g), 0);
        assert_eq!(s.principal(), Some(&KafkaPrincipal::user("alice")));
        assert!(matches!(
            s.check(ApiKey::Metadata, 12, &metadata(), now),
            Gate::Pass
        ));
    }

    #[test]
    fn a_wrong_password_is_answered_with_sasl_authentication_failed_and_closes() {
        let now = Instant::now();
        let mut s = SaslSession::new(settings(None));
        s.check(ApiKey::SaslHandshake, 1, &handshake("PLAIN"), now);
        let g = s.check(
            ApiKey::SaslAuthenticate,
            2,
            &authenticate(plain("alice", "nope")),
            now,
        );
        assert!(matches!(g, Gate::AnswerThenClose(_)));
        assert_eq!(error_of(&g), ResponseError::SaslAuthenticationFailed.code());
        assert!(s.principal().is_none());
    }

    #[test]
    fn an_unknown_or_disabled_mechanism_lists_the_enabled_ones() {
        let now = Instant::now();
        let mut s = SaslSession::new(settings(None));
        let g = s.check(ApiKey::SaslHandshake, 1, &handshake("SCRAM-SHA-256"), now);
        let Gate::AnswerThenClose(ResponseKind::SaslHandshake(r)) = g else {
            panic!("{g:?}");
        };
        assert_eq!(r.error_code, ResponseError::UnsupportedSaslMechanism.code());
        let names: Vec<&str> = r.mechanisms.iter().map(|m| m.as_str()).collect();
        assert_eq!(names, ["PLAIN", "SCRAM-SHA-512"]);
    }

    /// A SCRAM-SHA-512 exchange with ferry-auth's client, returning the last gate.
    fn scram_login(s: &mut SaslSession, user: &str, password: &str, now: Instant) -> Gate {
        let g = s.check(ApiKey::SaslHandshake, 1, &handshake("SCRAM-SHA-512"), now);
        assert_eq!(error_of(&g), 0);
        let mut client = ScramClient::new(ScramMechanism::Sha512, user, Secret::from(password));
        let first = client.client_first().unwrap();
        let g = s.check(ApiKey::SaslAuthenticate, 2, &authenticate(first), now);
        let Gate::Answer(ResponseKind::SaslAuthenticate(first)) = g else {
            return g;
        };
        let last = client.handle_server_first(&first.auth_bytes).unwrap();
        s.check(ApiKey::SaslAuthenticate, 2, &authenticate(last), now)
    }

    #[test]
    fn scram_logs_in_and_a_session_expires_unless_renewed_by_the_same_principal() {
        let t0 = Instant::now();
        let mut s = SaslSession::new(settings(Some(Duration::from_secs(60))));
        let g = scram_login(&mut s, "bob", "bob-secret", t0);
        let Gate::Answer(ResponseKind::SaslAuthenticate(done)) = &g else {
            panic!("{g:?}");
        };
        assert_eq!(done.error_code, 0);
        assert_eq!(done.session_lifetime_ms, 60_000);
        assert_eq!(s.principal(), Some(&KafkaPrincipal::user("bob")));
        assert!(matches!(
            s.check(ApiKey::Metadata, 12, &metadata(), t0),
            Gate::Pass
        ));
        // Re-authenticated in time: the session is renewed.
        let t1 = t0 + Duration::from_secs(50);
        assert_eq!(error_of(&scram_login(&mut s, "bob", "bob-secret", t1)), 0);
        let t2 = t0 + Duration::from_secs(100);
        assert!(matches!(
            s.check(ApiKey::Metadata, 12, &metadata(), t2),
            Gate::Pass
        ));
        // Not renewed: the next request closes the connection.
        let t3 = t1 + Duration::from_secs(61);
        assert!(matches!(
            s.check(ApiKey::Metadata, 12, &metadata(), t3),
            Gate::Close(_)
        ));
    }

    #[test]
    fn re_authentication_cannot_change_the_principal() {
        let now = Instant::now();
        let mut s = SaslSession::new(settings(Some(Duration::from_secs(60))));
        assert_eq!(error_of(&scram_login(&mut s, "bob", "bob-secret", now)), 0);
        s.check(ApiKey::SaslHandshake, 1, &handshake("PLAIN"), now);
        let g = s.check(
            ApiKey::SaslAuthenticate,
            2,
            &authenticate(plain("alice", "alice-secret")),
            now,
        );
        assert!(matches!(g, Gate::AnswerThenClose(_)));
        assert_eq!(error_of(&g), ResponseError::SaslAuthenticationFailed.code());
    }

    #[test]
    fn a_wrong_scram_password_fails_like_an_unknown_user() {
        let now = Instant::now();
        let mut wrong = SaslSession::new(settings(None));
        let g1 = scram_login(&mut wrong, "bob", "not-bobs", now);
        let mut unknown = SaslSession::new(settings(None));
        let g2 = scram_login(&mut unknown, "mallory", "whatever", now);
        for g in [&g1, &g2] {
            assert!(matches!(g, Gate::AnswerThenClose(_)), "{g:?}");
            assert_eq!(error_of(g), ResponseError::SaslAuthenticationFailed.code());
        }
        let message = |g: &Gate| match g {
            Gate::AnswerThenClose(ResponseKind::SaslAuthenticate(r)) => r.error_message.clone(),
            _ => None,
        };
        assert_eq!(message(&g1), message(&g2));
    }
}
