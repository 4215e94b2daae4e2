//! AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554), with Kafka's checks and
//! error codes (`ScramControlManager`, `ScramImage.describe`).
//!
//! An upsertion carries the salted password; the broker keeps only what RFC 5802 lets a server
//! keep: `StoredKey = H(HMAC(SaltedPassword, "Client Key"))` and
//! `ServerKey = HMAC(SaltedPassword, "Server Key")`, with the mechanism's hash. Writes go to
//! the controller quorum, one record per user; describes read this broker's image (which may
//! lag a write made through another broker, as in Kafka).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use sha2::{Digest, Sha256, Sha512};

use super::{message, str_bytes, RequestContext};

use crate::broker::Broker;
use ferry_cluster::security::{ScramCredential, ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS};

/// `(StoredKey, ServerKey)` for a salted password (RFC 5802 section 3).
pub fn scram_keys(mechanism: ScramMechanism, salted_password: &[u8]) -> (Vec<u8>, Vec<u8>) {
    match mechanism {
        ScramMechanism::ScramSha256 => keys::<Sha256, Hmac<Sha256>>(salted_password),
        ScramMechanism::ScramSha512 => keys::<Sha512, Hmac<Sha512>>(salted_password),
    }
}

fn keys<H: Digest, M: Mac + KeyInit>(salted_password: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let hmac = |text: &[u8]| {
        // HMAC takes keys of any length.
        let mut mac = <M as KeyInit>::new_from_slice(salted_password)
            .unwrap_or_else(|_| <M as KeyInit>::new(&Default::default()));
        mac.update(text);
        mac.finalize().into_bytes().to_vec()
    };
    let client_key = hmac(b"Client Key");
    let stored_key = H::digest(&client_key).to_vec();
    (stored_key, hmac(b"Server Key"))
}

/// One user's change: what it asks, or why it was refused before reaching the quorum.
enum Change {
    Delete(ScramMechanism),
    Upsert(ScramMechanism, ScramCredential),
}

pub async fn alter(
    broker: &Arc<Broker>,
    request: AlterUserScramCredentialsRequest,
    ctx: &RequestContext,
) -> AlterUserScramCredentialsResponse {
    let allowed = ctx.may_cluster(broker, ferry_authz::AclOperation::AlterConfigs);
    // Users in request order; a user named twice is refused as a whole.
    let mut order: Vec<String> = Vec::new();
    let mut outcome: BTreeMap<String, Result<Change, (ResponseError, String)>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut note = |user: String, change: Result<Change, (ResponseError, String)>| {
        if !seen.insert(user.clone()) {
            outcome.insert(
                user,
                Err((
                    ResponseError::DuplicateResource,
                    "A user credential cannot be altered twice in the same request".into(),
                )),
            );
        } else {
            order.push(user.clone());
            outcome.insert(user, change);
        }
    };
    let image = broker.metadata.image();
    for d in request.deletions {
        let user = d.name.to_string();
        let change = check_user_and_mechanism(&user, d.mechanism).and_then(|m| {
            if image.scram_credential(&user, m).is_none() {
                Err((
                    ResponseError::ResourceNotFound,
                    "Attempt to delete a user credential that does not exist".into(),
                ))
            } else {
                Ok(Change::Delete(m))
            }
        });
        note(user, change);
    }
    for u in request.upsertions {
        let user = u.name.to_string();
        let change = check_user_and_mechanism(&user, u.mechanism).and_then(|m| {
            if u.iterations < MIN_ITERATIONS {
                return Err((
                    ResponseError::UnacceptableCredential,
                    "Too few iterations".into(),
                ));
            }
            if u.iterations > MAX_ITERATIONS {
                return Err((
                    ResponseError::UnacceptableCredential,
                    "Too many iterations".into(),
                ));
            }
            let (stored_key, server_key) = scram_keys(m, &u.salted_password);
            Ok(Change::Upsert(
                m,
                ScramCredential {
                    salt: u.salt.to_vec(),
                    stored_key,
                    server_key,
                    iterations: u.iterations,
                },
            ))
        });
        note(user, change);
    }
    let mut results = Vec::with_capacity(order.len());
    for user in order {
        let error = match outcome.remove(&user) {
            _ if !allowed => Some((ResponseError::ClusterAuthorizationFailed, String::new())),
            Some(Ok(change)) => apply(broker, &user, change).await,
            Some(Err(e)) => Some(e),
            None => None,
        };
        let mut result = AlterUserScramCredentialsResult::default()
            .with_user(str_bytes(&user))
            .with_error_message(None);
        if let Some((e, why)) = error {
            broker.metrics.error("AlterUserScramCredentials", e.code());
            result = result.with_error_code(e.code());
            if !why.is_empty() {
                result = result.with_error_message(message(why));
            }
        }
        results.push(result);
    }
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// Kafka's `validateScramUsernameAndMechanism`.
fn check_user_and_mechanism(
    user: &str,
    mechanism: i8,
) -> Result<ScramMechanism, (ResponseError, String)> {
    if user.is_empty() {
        return Err((
            ResponseError::UnacceptableCredential,
            "Username must not be empty".into(),
        ));
    }
    ScramMechanism::from_code(mechanism).ok_or_else(|| {
        (
            ResponseError::UnsupportedSaslMechanism,
            "Unknown SCRAM mechanism".into(),
        )
    })
}

async fn apply(broker: &Broker, user: &str, change: Change) -> Option<(ResponseError, String)> {
    let written = match change {
        Change::Delete(m) => broker.metadata.delete_scram_credential(user, m).await,
        Change::Upsert(m, c) => broker.metadata.upsert_scram_credential(user, m, c).await,
    };
    written
        .err()
        .map(|e| (crate::errors::security_record_error(&e), e.to_string()))
}

pub fn describe(
    broker: &Arc<Broker>,
    request: DescribeUserScramCredentialsRequest,
    ctx: &RequestContext,
) -> DescribeUserScramCredentialsResponse {
    if !ctx.may_cluster(broker, ferry_authz::AclOperation::DescribeConfigs) {
        let e = ResponseError::ClusterAuthorizationFailed;
        return DescribeUserScramCredentialsResponse::default()
            .with_error_message(None)
            .with_error_code(e.code());
    }
    let image = broker.metadata.image();
    // User to "named more than once".
    let mut users: Vec<(String, bool)> = Vec::new();
    match request.users.filter(|u| !u.is_empty()) {
        None => {
            users.extend(image.scram_credentials.keys().map(|u| (u.clone(), false)));
        }
        Some(asked) => {
            for name in asked {
                let name = name.name.to_string();
                match users.iter_mut().find(|(u, _)| *u == name) {
                    Some(entry) => entry.1 = true,
                    None => users.push((name, false)),
                }
            }
        }
    }
    let results = users
        .into_iter()
        .map(|(user, duplicate)| {
            let result = DescribeUserScramCredentialsResult::default()
                .with_user(str_bytes(&user))
                .with_error_message(None);
            if duplicate {
                return result
                    .with_error_code(ResponseError::DuplicateResource.code())
                    .with_error_message(message(format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                    )));
            }
            match image.scram_credentials_of(&user) {
                Some(creds) if !creds.is_empty() => result.with_credential_infos(
                    creds
                        .iter()
                        .map(|(m, c)| {
                            CredentialInfo::default()
                                .with_mechanism(m.code())
                                .with_iterations(c.iterations)
                        })
                        .collect(),
                ),
                _ => result
                    .with_error_code(ResponseError::ResourceNotFound.code())
                    .with_error_message(message(format!(
                        "attemptToDescribeUserThatDoesNotExist: {user}"
                    ))),
            }
        })
        .collect();
    DescribeUserScramCredentialsResponse::default()
        .with_error_message(None)
        .with_results(results)
}

#[cfg(test)]
#[path = "scram_test.rs"]
mod tests;
