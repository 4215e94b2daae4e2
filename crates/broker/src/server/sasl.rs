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
//! After a SaslHandshake v0 the client sends its SASL tokens as bare size-prefixed frames, not as
//! SaslAuthenticate requests ([`SaslSession::raw_token`]), and a failure simply closes the
//! connection, as Kafka serves v0.
//!
//! The exchanges themselves (PLAIN, SCRAM) are ferry-auth's; this module only sequences them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_auth::{
    AuthErrorKind, KafkaPrincipal, Mechanism, OAuthBearerServer, OAuthBearerValidator, PlainServer,
    PlainUsers, SaslServer, ScramCredentialSource, ScramServer, ServerReply,
};
use ferry_common::SharedClock;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use super::log_budget::LogBudget;

/// Failed logins are logged, but a client guessing passwords cannot fill the disk: a few per
/// ten seconds for the whole broker.
static FAILED_LOGINS: LogBudget = LogBudget::new(10, Duration::from_secs(10));

/// What a SASL listener accepts: its mechanisms and where each finds its users.
pub struct SaslSettings {
    /// `sasl.enabled.mechanisms`, in the order the handshake lists them.
    pub mechanisms: Vec<Mechanism>,
    /// PLAIN's users (`user_<name>="<password>"` of the listener's PLAIN JAAS config).
    pub plain_users: Arc<PlainUsers>,
    /// SCRAM credentials (those stored in the controller quorum).
    pub scram: Arc<dyn ScramCredentialSource>,
    /// OAUTHBEARER's token checks, when it is enabled.
    pub oauth: Option<Arc<OAuthBearerValidator>>,
    /// The wall clock tokens' `exp` and `nbf` are compared with.
    pub clock: SharedClock,
    /// `connections.max.reauth.ms`: how long a session lasts (`None`: for ever).
    pub max_reauth: Option<Duration>,
    /// `sasl.server.max.receive.size`: the largest request frame before authentication.
    pub max_receive_size: usize,
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
    /// Between SaslHandshake and the end of the exchange; `raw` after a SaslHandshake v0, whose
    /// client then sends its SASL tokens as bare size-prefixed frames instead of
    /// SaslAuthenticate requests (Kafka before 1.0, and librdkafka builds that check for v0).
    Exchange {
        server: Box<dyn SaslServer>,
        raw: bool,
    },
    /// Authenticated; `expires` is the session's end.
    Authenticated { expires: Option<Instant> },
}

/// What one step of an exchange came to.
enum Step {
    /// Send these bytes; the exchange goes on.
    Challenge(Vec<u8>),
    /// Authenticated: send the final bytes; `lifetime` is the session's.
    Complete {
        response: Vec<u8>,
        lifetime: Option<Duration>,
    },
    /// Failed with this error code and client message; the connection closes.
    Failed { code: i16, message: String },
}

/// The answer to a bare SASL token (after a SaslHandshake v0).
#[derive(Debug)]
pub enum RawToken {
    /// Send these bytes as a size-prefixed frame (empty when the exchange is done and the
    /// mechanism has nothing to add, as Kafka sends it).
    Reply(Vec<u8>),
    /// Close the connection: v0 has no way to carry an error (logged by the caller).
    Close(String),
}

/// One connection's SASL state.
pub struct SaslSession {
    settings: Arc<SaslSettings>,
    stage: Stage,
    /// Who the client proved to be; kept through re-authentication, which must not change it.
    principal: Option<KafkaPrincipal>,
    /// How the last exchange ended (mechanism, success), until the caller takes it for metrics.
    outcome: Option<(Mechanism, bool)>,
}

impl SaslSession {
    pub fn new(settings: Arc<SaslSettings>) -> Self {
        Self {
            settings,
            stage: Stage::Handshake,
            principal: None,
            outcome: None,
        }
    }

    /// How the exchange that just ended went (mechanism, success), once: for metrics.
    pub fn take_outcome(&mut self) -> Option<(Mechanism, bool)> {
        self.outcome.take()
    }

    /// The authenticated principal, once there is one.
    pub fn principal(&self) -> Option<&KafkaPrincipal> {
        self.principal.as_ref()
    }

    /// Whether the client has authenticated (its session may still have expired).
    pub fn is_authenticated(&self) -> bool {
        self.principal.is_some()
    }

    /// Whether the next frame is a bare SASL token, not a Kafka request (after SaslHandshake
    /// v0): the caller hands it to [`SaslSession::raw_token`].
    pub fn expects_raw_token(&self) -> bool {
        matches!(self.stage, Stage::Exchange { raw: true, .. })
    }

    /// The largest request frame this connection may send now: `sasl.server.max.receive.size`
    /// until it has authenticated, `otherwise` after.
    pub fn max_frame(&self, otherwise: usize) -> usize {
        if self.is_authenticated() {
            otherwise
        } else {
            self.settings.max_receive_size.min(otherwise)
        }
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
            RequestKind::SaslHandshake(r) => self.handshake(r.mechanism.as_str(), version),
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

    /// Handles a bare SASL token received at `now` (only when [`Self::expects_raw_token`]).
    pub fn raw_token(&mut self, token: &[u8], now: Instant) -> RawToken {
        match self.step(token, now) {
            Step::Challenge(bytes) => RawToken::Reply(bytes),
            Step::Complete { response, .. } => RawToken::Reply(response),
            Step::Failed { message, .. } => RawToken::Close(message),
        }
    }

    fn handshake(&mut self, asked: &str, version: i16) -> Gate {
        let enabled = || {
            self.settings
                .mechanisms
                .iter()
                .map(|m| StrBytes::from_static_str(m.name()))
                .collect::<Vec<_>>()
        };
        if matches!(self.stage, Stage::Exchange { .. }) {
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
        let server: Box<dyn SaslServer> = match (mechanism, &self.settings.oauth) {
            (Mechanism::OAuthBearer, Some(validator)) => Box::new(OAuthBearerServer::new(
                validator.clone(),
                self.settings.clock.now_ms(),
            )),
            // Enabled mechanisms always have their settings (checked at start-up).
            (Mechanism::OAuthBearer, None) | (Mechanism::Plain, _) => {
                Box::new(PlainServer::new(self.settings.plain_users.clone()))
            }
            (Mechanism::ScramSha256, _) => Box::new(ScramServer::new(
                ferry_auth::ScramMechanism::Sha256,
                self.settings.scram.clone(),
            )),
            (Mechanism::ScramSha512, _) => Box::new(ScramServer::new(
                ferry_auth::ScramMechanism::Sha512,
                self.settings.scram.clone(),
            )),
        };
        self.stage = Stage::Exchange {
            server,
            raw: version == 0,
        };
        Gate::Answer(ResponseKind::SaslHandshake(
            SaslHandshakeResponse::default().with_mechanisms(enabled()),
        ))
    }

    fn authenticate(&mut self, auth_bytes: &Bytes, version: i16, now: Instant) -> Gate {
        if !matches!(self.stage, Stage::Exchange { raw: false, .. }) {
            return Gate::AnswerThenClose(ResponseKind::SaslAuthenticate(
                SaslAuthenticateResponse::default()
                    .with_error_code(ResponseError::IllegalSaslState.code())
                    .with_error_message(Some(StrBytes::from_static_str(
                        "Unexpected SaslAuthenticate request before a SaslHandshake",
                    ))),
            ));
        }
        match self.step(auth_bytes, now) {
            Step::Challenge(bytes) => Gate::Answer(ResponseKind::SaslAuthenticate(
                SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(bytes)),
            )),
            Step::Complete { response, lifetime } => {
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
            Step::Failed { code, message } => {
                Gate::AnswerThenClose(ResponseKind::SaslAuthenticate(
                    SaslAuthenticateResponse::default()
                        .with_error_code(code)
                        .with_error_message(Some(StrBytes::from_string(message))),
                ))
            }
        }
    }

    /// Feeds the client's next message to the exchange in progress.
    fn step(&mut self, client_message: &[u8], now: Instant) -> Step {
        let reauthenticating = self.principal.is_some();
        let Stage::Exchange { server, .. } = &mut self.stage else {
            return Step::Failed {
                code: ResponseError::IllegalSaslState.code(),
                message: "Unexpected SASL token before a SaslHandshake".into(),
            };
        };
        match server.step(client_message) {
            Ok(ServerReply::Challenge(bytes)) => Step::Challenge(bytes),
            Ok(ServerReply::Complete {
                response,
                principal,
            }) => {
                if let Some(before) = &self.principal {
                    if *before != principal {
                        tracing::info!(%before, after = %principal,
                            "re-authentication refused: the principal changed");
                        self.outcome = Some((server.mechanism(), false));
                        return Step::Failed {
                            code: ResponseError::SaslAuthenticationFailed.code(),
                            message: format!("Cannot change principals during re-authentication from {before}: {principal}"),
                        };
                    }
                }
                // A session ends with connections.max.reauth.ms, or sooner when the credential
                // itself expires (an OAUTHBEARER token), as Kafka's authenticator decides.
                let lifetime = self.settings.max_reauth.map(|max| {
                    let left = server.credential_expires_at_ms().map(|at| {
                        let ms = at.saturating_sub(self.settings.clock.now_ms()).max(0);
                        Duration::from_millis(u64::try_from(ms).unwrap_or(0))
                    });
                    left.map_or(max, |left| left.min(max))
                });
                self.outcome = Some((server.mechanism(), true));
                self.stage = Stage::Authenticated {
                    expires: lifetime.map(|l| now + l),
                };
                self.principal = Some(principal);
                Step::Complete { response, lifetime }
            }
            Err(e) => {
                self.outcome = Some((server.mechanism(), false));
                if let Some(left_out) = FAILED_LOGINS.admit(now) {
                    tracing::info!(
                        mechanism = server.mechanism().name(),
                        reason = e.reason().unwrap_or_default(),
                        similar_messages_left_out = left_out,
                        "SASL authentication failed"
                    );
                }
                let code = match e.kind() {
                    AuthErrorKind::AuthenticationFailed => ResponseError::SaslAuthenticationFailed,
                    AuthErrorKind::IllegalSaslState => ResponseError::IllegalSaslState,
                    AuthErrorKind::UnsupportedSaslMechanism => {
                        ResponseError::UnsupportedSaslMechanism
                    }
                    _ => ResponseError::UnknownServerError,
                };
                Step::Failed {
                    code: code.code(),
                    message: e.client_message(reauthenticating),
                }
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
            oauth: None,
            clock: ferry_common::system_clock(),
            max_reauth,
            max_receive_size: 524_288,
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

    #[test]
    fn after_a_v0_handshake_tokens_come_bare() {
        let now = Instant::now();
        let mut s = SaslSession::new(settings(None));
        let g = s.check(ApiKey::SaslHandshake, 0, &handshake("PLAIN"), now);
        assert_eq!(error_of(&g), 0);
        assert!(s.expects_raw_token());
        let RawToken::Reply(reply) = s.raw_token(&plain("alice", "alice-secret"), now) else {
            panic!("PLAIN with the right password is answered");
        };
        assert!(reply.is_empty());
        assert!(!s.expects_raw_token());
        assert_eq!(s.principal(), Some(&KafkaPrincipal::user("alice")));
        assert!(matches!(
            s.check(ApiKey::Metadata, 12, &metadata(), now),
            Gate::Pass
        ));
        // A wrong password closes the connection: v0 cannot carry an error.
        let mut s = SaslSession::new(settings(None));
        s.check(ApiKey::SaslHandshake, 0, &handshake("PLAIN"), now);
        assert!(matches!(
            s.raw_token(&plain("alice", "nope"), now),
            RawToken::Close(_)
        ));
        assert!(s.principal().is_none());
        // SaslAuthenticate after a v0 handshake is out of order.
        let mut s = SaslSession::new(settings(None));
        s.check(ApiKey::SaslHandshake, 0, &handshake("PLAIN"), now);
        let g = s.check(
            ApiKey::SaslAuthenticate,
            1,
            &authenticate(plain("alice", "alice-secret")),
            now,
        );
        assert_eq!(error_of(&g), ResponseError::IllegalSaslState.code());
    }
}
