//! Client telemetry (KIP-714): GetTelemetrySubscriptions and PushTelemetry (the list of
//! client-metrics resources is [`super::config_resources`]).
//!
//! ferry keeps no client-metrics subscriptions, so every client is told that no metrics are
//! wanted: an empty `requested_metrics`, which a client answers by asking again after
//! `push_interval_ms` and pushing nothing meanwhile. The answer holds no state: a client's
//! subscription id is a function of its instance id (Kafka's formula for the empty
//! subscription), so a push is checked against it without remembering the client. Kafka's
//! per-client rules that need memory (a get or push before the interval answers
//! THROTTLING_QUOTA_EXCEEDED; nothing is accepted after a terminating push) are not applied;
//! a client that follows the protocol never meets them.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse, PushTelemetryRequest,
    PushTelemetryResponse,
};
use uuid::Uuid;

/// Kafka's default push interval of a client-metrics subscription (`interval.ms`): 5 minutes.
pub(crate) const PUSH_INTERVAL_MS: i32 = 5 * 60 * 1000;
/// Kafka's default `telemetry.max.bytes`: the largest push accepted.
pub(crate) const TELEMETRY_MAX_BYTES: i32 = 1024 * 1024;
/// The compressions a push may use, in Kafka's order of preference: zstd, lz4, gzip, snappy.
const ACCEPTED_COMPRESSION_TYPES: [i8; 4] = [4, 3, 1, 2];
/// The highest compression type id Kafka knows (zstd); 0 is none.
const MAX_COMPRESSION_TYPE: i8 = 4;
/// Kafka's `Uuid.ONE_UUID` (the metadata topic's id), reserved like the zero uuid.
const ONE_UUID: Uuid = Uuid::from_u128(1);

/// GetTelemetrySubscriptions: the empty subscription, with a new client instance id when the
/// client sends the zero uuid (its first request).
pub fn subscriptions(
    request: GetTelemetrySubscriptionsRequest,
) -> GetTelemetrySubscriptionsResponse {
    let id = if request.client_instance_id.is_nil() {
        new_client_instance_id()
    } else {
        request.client_instance_id
    };
    GetTelemetrySubscriptionsResponse::default()
        .with_client_instance_id(id)
        .with_subscription_id(subscription_id(id))
        .with_accepted_compression_types(ACCEPTED_COMPRESSION_TYPES.to_vec())
        .with_push_interval_ms(PUSH_INTERVAL_MS)
        .with_telemetry_max_bytes(TELEMETRY_MAX_BYTES)
        .with_delta_temporality(true)
        .with_requested_metrics(Vec::new())
}

/// PushTelemetry: the metrics are dropped (none were asked for); the errors are Kafka's, in
/// Kafka's order.
pub fn push(request: PushTelemetryRequest) -> PushTelemetryResponse {
    PushTelemetryResponse::default().with_error_code(push_error(&request).map_or(0, |e| e.code()))
}

fn push_error(request: &PushTelemetryRequest) -> Option<ResponseError> {
    let id = request.client_instance_id;
    if id.is_nil() || id == ONE_UUID {
        return Some(ResponseError::InvalidRequest);
    }
    if request.subscription_id != subscription_id(id) {
        return Some(ResponseError::UnknownSubscriptionId);
    }
    if !(0..=MAX_COMPRESSION_TYPE).contains(&request.compression_type) {
        return Some(ResponseError::UnsupportedCompressionType);
    }
    if request.metrics.len() > TELEMETRY_MAX_BYTES as usize {
        return Some(ResponseError::TelemetryTooLarge);
    }
    None
}

/// A random id that is neither of Kafka's reserved ids (a v4 uuid never is: its version bits
/// are set).
fn new_client_instance_id() -> Uuid {
    Uuid::new_v4()
}

/// Kafka's subscription id of the empty subscription for client `id`: the CRC32C of the
/// subscribed metrics as Java prints the empty set (`[]`) followed by the push interval, xor
/// Java's hash of the uuid.
pub(crate) fn subscription_id(id: Uuid) -> i32 {
    let text = format!("[]{PUSH_INTERVAL_MS}");
    let crc = crc32c::crc32c(text.as_bytes()) as i32;
    let (most, least) = id.as_u64_pair();
    let h = most ^ least;
    let java_hash = ((h >> 32) as i32) ^ (h as i32);
    crc ^ java_hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn push_of(id: Uuid) -> PushTelemetryRequest {
        PushTelemetryRequest::default()
            .with_client_instance_id(id)
            .with_subscription_id(subscription_id(id))
    }

    #[test]
    fn a_first_request_gets_a_new_instance_id_and_the_empty_subscription() {
        let first = subscriptions(GetTelemetrySubscriptionsRequest::default());
        assert!(!first.client_instance_id.is_nil());
        assert_ne!(first.client_instance_id, ONE_UUID);
        assert!(first.requested_metrics.is_empty());
        assert_eq!(first.push_interval_ms, PUSH_INTERVAL_MS);
        assert_eq!(first.error_code, 0);
        // A known client keeps its id and its subscription id.
        let again = subscriptions(
            GetTelemetrySubscriptionsRequest::default()
                .with_client_instance_id(first.client_instance_id),
        );
        assert_eq!(again.client_instance_id, first.client_instance_id);
        assert_eq!(again.subscription_id, first.subscription_id);
    }

    #[test]
    fn a_push_with_the_subscription_it_was_given_is_accepted() {
        let id = Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0);
        let push = push_of(id)
            .with_compression_type(4)
            .with_metrics(Bytes::from_static(b"otlp"));
        assert_eq!(super::push(push).error_code, 0);
        assert_eq!(
            super::push(push_of(id).with_terminating(true)).error_code,
            0
        );
    }

    #[test]
    fn a_bad_push_answers_kafkas_error() {
        let id = Uuid::from_u128(42);
        let cases = [
            (push_of(Uuid::nil()), ResponseError::InvalidRequest),
            (push_of(ONE_UUID), ResponseError::InvalidRequest),
            (
                push_of(id).with_subscription_id(subscription_id(id) ^ 1),
                ResponseError::UnknownSubscriptionId,
            ),
            (
                push_of(id).with_compression_type(5),
                ResponseError::UnsupportedCompressionType,
            ),
            (
                push_of(id).with_metrics(Bytes::from(vec![0; TELEMETRY_MAX_BYTES as usize + 1])),
                ResponseError::TelemetryTooLarge,
            ),
        ];
        for (request, error) in cases {
            assert_eq!(super::push(request).error_code, error.code(), "{error:?}");
        }
    }
}
