//! [`S3Store`]: the [`ObjectStore`] over `aws-sdk-s3`, for S3 standard buckets, S3-compatible
//! servers (path-style, custom endpoint) and **S3 Express One Zone directory buckets**, the
//! per-AZ fast store of the remote WAL.
//!
//! # S3 Express One Zone
//!
//! Directory buckets are named `<base-name>--<zone-id>--x-s3` (e.g. `ferry-wal--use1-az4--x-s3`);
//! [`is_directory_bucket_name`] recognises the suffix. For such a bucket the SDK itself picks the
//! zonal endpoint and does *session auth*: it calls `CreateSession`, caches the short-lived
//! session credentials and signs requests with them, so ferry only sets bucket and region.
//! What ferry adds:
//!
//! - [`S3Config::express_one_zone`] is turned on automatically for a directory-bucket name, and
//!   setting it for a name without the suffix is a configuration error (AWS requires it).
//! - Directory buckets only serve virtual-hosted-style requests on AWS, so `force_path_style`
//!   with no custom `endpoint` is rejected.
//! - Directory buckets only accept `ListObjectsV2` prefixes ending in `/` and do not return keys
//!   sorted; [`S3Store::list`] asks for the enclosing "directory" and filters and sorts itself.
//! - With a custom `endpoint` (an emulator), session auth is disabled: no local server speaks
//!   `CreateSession`, so plain SigV4 with the configured credentials is used instead.
//!
//! # Retries and timeouts
//!
//! The SDK's own retries are **disabled**: retrying is [`crate::RetryingStore`]'s job, and with
//! SDK retries on, [`crate::MeteredStore`] (below the retrier) would miss billed attempts.
//!
//! # Errors
//!
//! 404/`NoSuchKey` → `NotFound`; 412 `PreconditionFailed` → `AlreadyExists`; 416 → `InvalidRange`;
//! 503/`SlowDown`/429 → `Throttled`; other 5xx and 409 `ConditionalRequestConflict` →
//! `Unavailable`; SDK timeouts → `Timeout`; connect/dispatch failures and truncated responses →
//! `Unavailable`; anything else (403, bad config) → `Other`.

use std::fmt;
use std::ops::Range;

use async_trait::async_trait;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::retry::RetryConfig as SdkRetryConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, RequestChecksumCalculation};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use aws_sdk_s3::Client;
use aws_smithy_types::body::SdkBody;
use bytes::Bytes;
use ferry_common::join_pieces;

use crate::keys::validate_key;
use crate::s3_direct::DirectS3;
use crate::store::check_range;
use crate::{ObjStoreError, ObjectBody, ObjectMeta, ObjectStore, PutOutcome, Result};

/// Suffix of S3 Express One Zone directory-bucket names.
pub const DIRECTORY_BUCKET_SUFFIX: &str = "--x-s3";

/// Whether `bucket` is an S3 Express One Zone directory-bucket name:
/// `<base-name>--<zone-id>--x-s3`, where the zone id looks like `use1-az4` (lowercase letters,
/// digits and `-`, containing `-az`).
pub fn is_directory_bucket_name(bucket: &str) -> bool {
    let Some(rest) = bucket.strip_suffix(DIRECTORY_BUCKET_SUFFIX) else {
        return false;
    };
    let Some((base, zone)) = rest.rsplit_once("--") else {
        return false;
    };
    let zone_ok = zone
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && zone.contains("-az")
        && !zone.starts_with('-');
    !base.is_empty() && zone_ok
}

/// How to reach one bucket. `access_key`/`secret_key` both set → static credentials; both unset →
/// the SDK's default provider chain (environment, profile, web identity, IMDS...).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Config {
    pub bucket: String,
    pub region: String,
    /// Custom endpoint URL (an S3-compatible server), e.g. `http://127.0.0.1:9000`.
    pub endpoint: Option<String>,
    /// Path-style addressing (`endpoint/bucket/key`), needed by most S3-compatible servers.
    pub force_path_style: bool,
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
    /// The bucket is an S3 Express One Zone directory bucket. Implied by a `--x-s3` name.
    pub express_one_zone: bool,
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("force_path_style", &self.force_path_style)
            .field("access_key", &self.access_key)
            .field(
                "secret_key",
                &self.secret_key.as_ref().map(|_| "<redacted>"),
            )
            .field("express_one_zone", &self.express_one_zone)
            .finish()
    }
}

impl S3Config {
    /// Whether the bucket is treated as an Express One Zone directory bucket (flag or name).
    pub fn is_express(&self) -> bool {
        self.express_one_zone || is_directory_bucket_name(&self.bucket)
    }

    /// Checks the combination of settings; [`S3Store::connect`] calls it.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(ObjStoreError::other("configure", msg));
        if self.bucket.is_empty() {
            return bad("S3 bucket name is empty".into());
        }
        if self.region.is_empty() {
            return bad("S3 region is empty".into());
        }
        if self.access_key.is_some() != self.secret_key.is_some() {
            return bad("set both access_key and secret_key, or neither".into());
        }
        if self.express_one_zone && !is_directory_bucket_name(&self.bucket) {
            return bad(format!(
                "express_one_zone is set but {:?} is not a directory-bucket name \
                 (<base>--<zone-id>--x-s3)",
                self.bucket
            ));
        }
        if self.is_express() && self.force_path_style && self.endpoint.is_none() {
            return bad(format!(
                "directory bucket {:?} only supports virtual-hosted-style requests; \
                 unset force_path_style",
                self.bucket
            ));
        }
        Ok(())
    }

    /// The SDK configuration this store uses (no network traffic with static credentials).
    pub async fn sdk_config(&self) -> Result<aws_sdk_s3::Config> {
        Ok(self.sdk_config_and_credentials().await?.0)
    }

    /// [`S3Config::sdk_config`], and the credentials provider it signs with (the direct
    /// requests of [`crate::s3_direct`] sign with the same).
    async fn sdk_config_and_credentials(
        &self,
    ) -> Result<(aws_sdk_s3::Config, Option<SharedCredentialsProvider>)> {
        self.validate()?;
        let region = Region::new(self.region.clone());
        let (mut builder, credentials) = match (&self.access_key, &self.secret_key) {
            (Some(ak), Some(sk)) => {
                let credentials = SharedCredentialsProvider::new(Credentials::new(
                    ak,
                    sk,
                    None,
                    None,
                    "ferry-static",
                ));
                let builder = aws_sdk_s3::Config::builder()
                    .behavior_version(BehaviorVersion::latest())
                    .region(region)
                    .credentials_provider(credentials.clone());
                (builder, Some(credentials))
            }
            _ => {
                let shared = aws_config::defaults(BehaviorVersion::latest())
                    .region(region)
                    .load()
                    .await;
                (
                    aws_sdk_s3::config::Builder::from(&shared),
                    shared.credentials_provider(),
                )
            }
        };
        builder = builder
            .force_path_style(self.force_path_style)
            .retry_config(SdkRetryConfig::disabled())
            // PUTs carry the CRC-32C ferry computes itself (`put_inner`); the SDK's own CRC-32
            // would be a second pass over every byte.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired);
        if let Some(endpoint) = &self.endpoint {
            builder = builder.endpoint_url(endpoint);
            if self.is_express() {
                builder = builder.disable_s3_express_session_auth(true);
            }
        }
        Ok((builder.build(), credentials))
    }
}

/// An [`ObjectStore`] on one S3 (or S3 Express One Zone) bucket.
#[derive(Clone)]
pub struct S3Store {
    client: Client,
    bucket: String,
    express: bool,
    /// PUTs and GETs sent without the SDK's pipeline, when the endpoint is configured
    /// ([`crate::s3_direct`]).
    direct: Option<std::sync::Arc<DirectS3>>,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store")
            .field("bucket", &self.bucket)
            .field("express", &self.express)
            .finish_non_exhaustive()
    }
}

impl S3Store {
    /// Builds the SDK client for `config`. Makes no request (buckets are not checked here).
    pub async fn connect(config: &S3Config) -> Result<Self> {
        let (sdk, credentials) = config.sdk_config_and_credentials().await?;
        if config.is_express() && !config.express_one_zone {
            tracing::info!(
                bucket = %config.bucket,
                "bucket name ends in --x-s3: using it as an S3 Express One Zone directory bucket"
            );
        }
        let direct = match (&config.endpoint, credentials) {
            (Some(endpoint), Some(credentials)) => DirectS3::new(
                endpoint,
                &config.bucket,
                config.force_path_style,
                &config.region,
                config.is_express(),
                credentials,
            )?
            .map(std::sync::Arc::new),
            _ => None,
        };
        let mut store =
            Self::from_client(Client::from_conf(sdk), &config.bucket, config.is_express());
        store.direct = direct;
        Ok(store)
    }

    /// Wraps an existing client (for callers that configure the SDK themselves).
    pub fn from_client(client: Client, bucket: &str, express_one_zone: bool) -> Self {
        Self {
            client,
            bucket: bucket.to_owned(),
            express: express_one_zone,
            direct: None,
        }
    }

    /// Whether PUTs and GETs go out directly ([`crate::s3_direct`]) rather than through the
    /// SDK's pipeline: with an endpoint named in the configuration.
    pub fn sends_puts_and_gets_directly(&self) -> bool {
        self.direct.is_some()
    }

    /// The underlying SDK client (e.g. for bucket administration in tests).
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn put_inner(&self, key: &str, body: ObjectBody, if_absent: bool) -> Result<()> {
        validate_key(key)?;
        let op = if if_absent { "put_if_absent" } else { "put" };
        if let Some(direct) = &self.direct {
            return direct.put(op, key, body, if_absent).await;
        }
        // The store checks the body against this CRC-32C, so the SigV4 signature need not cover
        // the payload: that would be a SHA-256 of every byte on the broker and again on the
        // server.
        let crc = body.crc32c().to_be_bytes();
        let len = i64::try_from(body.len()).unwrap_or(i64::MAX);
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_length(len)
            .checksum_crc32_c(base64_encode(&crc))
            .body(parts_stream(body));
        if if_absent {
            req = req.if_none_match("*");
        }
        req.customize()
            .disable_payload_signing()
            .send()
            .await
            .map_err(|e| map_sdk_error(op, key, e))?;
        Ok(())
    }
}

/// A request body that sends `body`'s parts as they are, one frame each (hyper writes them
/// with vectored writes), and can be rebuilt for a retry.
fn parts_stream(body: ObjectBody) -> ByteStream {
    let parts: std::sync::Arc<[Bytes]> = body.parts().into();
    ByteStream::new(SdkBody::retryable(move || {
        SdkBody::from_body_1_x(PartsBody::new(parts.clone()))
    }))
}

/// The parts of an [`ObjectBody`] as an http-body 1 body.
pub(crate) struct PartsBody {
    parts: std::sync::Arc<[Bytes]>,
    next: usize,
}

impl PartsBody {
    pub(crate) fn new(parts: std::sync::Arc<[Bytes]>) -> Self {
        Self { parts, next: 0 }
    }

    /// No body (a GET).
    pub(crate) fn empty() -> Self {
        Self::new(std::sync::Arc::new([]))
    }
}

impl http_body::Body for PartsBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<std::result::Result<http_body::Frame<Bytes>, Self::Error>>> {
        let part = self.parts.get(self.next).cloned();
        self.next += 1;
        std::task::Poll::Ready(part.map(|p| Ok(http_body::Frame::data(p))))
    }

    fn is_end_stream(&self) -> bool {
        self.next >= self.parts.len()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let rest = self
            .parts
            .get(self.next..)
            .unwrap_or_default()
            .iter()
            .map(|p| p.len() as u64)
            .sum();
        http_body::SizeHint::with_exact(rest)
    }
}

/// Standard base64 with padding (the encoding of S3's `x-amz-checksum-*` headers).
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    aws_smithy_types::base64::encode(bytes)
}

fn millis(t: Option<&DateTime>) -> i64 {
    t.and_then(|t| t.to_millis().ok()).unwrap_or(0)
}

/// Maps an SDK error to an [`ObjStoreError`] (see the module docs for the table).
fn map_sdk_error<E>(op: &'static str, key: &str, err: SdkError<E, HttpResponse>) -> ObjStoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = err.raw_response().map(|r| r.status().as_u16());
    match err {
        SdkError::TimeoutError(_) => ObjStoreError::Timeout {
            op,
            message: format!("{key}: SDK timeout"),
        },
        SdkError::DispatchFailure(failure) => {
            let message = format!("{key}: request not sent or no response: {failure:?}");
            if failure.is_timeout() {
                ObjStoreError::Timeout { op, message }
            } else {
                ObjStoreError::Unavailable {
                    op,
                    message,
                    source: None,
                }
            }
        }
        SdkError::ResponseError(_) => ObjStoreError::Unavailable {
            op,
            message: format!("{key}: unreadable response (status {status:?})"),
            source: None,
        },
        SdkError::ServiceError(service) => {
            let inner = service.into_err();
            let code = inner.code().unwrap_or("").to_owned();
            let message = format!(
                "{key}: {} {code}: {}",
                status.map(|s| s.to_string()).unwrap_or_default(),
                inner.message().unwrap_or("")
            );
            classify_service_error(op, key, status, &code, message, Box::new(inner))
        }
        other => ObjStoreError::Other {
            op,
            message: format!("{key}: {other}"),
            source: Some(Box::new(other)),
        },
    }
}

pub(crate) fn classify_service_error(
    op: &'static str,
    key: &str,
    status: Option<u16>,
    code: &str,
    message: String,
    source: crate::error::BoxError,
) -> ObjStoreError {
    match (status, code) {
        // A missing bucket is a configuration problem, not a missing object.
        (_, "NoSuchBucket") => ObjStoreError::Other {
            op,
            message,
            source: Some(source),
        },
        (_, "NoSuchKey" | "NotFound") | (Some(404), _) => ObjStoreError::not_found(key),
        (_, "PreconditionFailed") | (Some(412), _) => ObjStoreError::AlreadyExists {
            key: key.to_owned(),
        },
        (_, "InvalidRange") | (Some(416), _) => ObjStoreError::InvalidRange {
            key: key.to_owned(),
            start: 0,
            end: 0,
            size: None,
        },
        (_, "SlowDown" | "Throttling" | "ThrottlingException" | "TooManyRequests")
        | (Some(503 | 429), _) => ObjStoreError::Throttled { op, message },
        (_, "ConditionalRequestConflict" | "InternalError" | "ServiceUnavailable")
        | (Some(500..=599), _) => ObjStoreError::Unavailable {
            op,
            message,
            source: Some(source),
        },
        _ => ObjStoreError::Other {
            op,
            message,
            source: Some(source),
        },
    }
}

#[async_trait]
impl ObjectStore for S3Store {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.put_inner(key, ObjectBody::from_bytes(data), false)
            .await
    }

    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutOutcome> {
        self.put_body_if_absent(key, ObjectBody::from_bytes(data))
            .await
    }

    async fn put_body_if_absent(&self, key: &str, body: ObjectBody) -> Result<PutOutcome> {
        match self.put_inner(key, body, true).await {
            Ok(()) => Ok(PutOutcome::Created),
            Err(ObjStoreError::AlreadyExists { .. }) => Ok(PutOutcome::AlreadyExists),
            Err(e) => Err(e),
        }
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        validate_key(key)?;
        if let Some(direct) = &self.direct {
            return direct
                .get("get", key, None)
                .await
                .map(|(p, _)| join_pieces(&p));
        }
        let resp = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| map_sdk_error("get", key, e))?;
        read_body_pieces("get", key, resp.body)
            .await
            .map(|p| join_pieces(&p))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let pieces = self.get_range_pieces(key, range).await?;
        Ok(join_pieces(&pieces))
    }

    async fn get_range_pieces(&self, key: &str, range: Range<u64>) -> Result<Vec<Bytes>> {
        validate_key(key)?;
        if range.start > range.end {
            return Err(ObjStoreError::invalid_range(key, &range, None));
        }
        if range.start == range.end {
            // HTTP cannot express an empty range; check existence and bounds with a HEAD.
            let meta = self
                .head(key)
                .await?
                .ok_or_else(|| ObjStoreError::not_found(key))?;
            check_range(key, &range, meta.size)?;
            return Ok(Vec::new());
        }
        if let Some(direct) = &self.direct {
            let (pieces, size) = direct
                .get("get_range", key, Some(&range))
                .await
                .map_err(|e| match e {
                    ObjStoreError::InvalidRange { size, .. } => {
                        ObjStoreError::invalid_range(key, &range, size)
                    }
                    other => other,
                })?;
            return exact_range(key, &range, pieces, size);
        }
        let resp = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={}-{}", range.start, range.end - 1))
            .send()
            .await
            .map_err(|e| match map_sdk_error("get_range", key, e) {
                ObjStoreError::InvalidRange { size, .. } => {
                    ObjStoreError::invalid_range(key, &range, size)
                }
                other => other,
            })?;
        let size = resp
            .content_range()
            .and_then(|cr| cr.rsplit_once('/'))
            .and_then(|(_, total)| total.parse::<u64>().ok());
        let pieces = read_body_pieces("get_range", key, resp.body).await?;
        exact_range(key, &range, pieces, size)
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        validate_key(key)?;
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(resp) => Ok(Some(ObjectMeta {
                key: key.to_owned(),
                size: resp.content_length().unwrap_or(0).max(0) as u64,
                last_modified_ms: millis(resp.last_modified()),
            })),
            Err(e) => match map_sdk_error("head", key, e) {
                ObjStoreError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        // Directory buckets accept only prefixes that end in '/': ask for the enclosing
        // "directory" and filter here. General buckets get the prefix as is.
        let request_prefix = if self.express {
            prefix.rfind('/').map_or("", |i| &prefix[..=i])
        } else {
            prefix
        };
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut req = self.client.list_objects_v2().bucket(&self.bucket);
            if !request_prefix.is_empty() {
                req = req.prefix(request_prefix);
            }
            if let Some(t) = token.take() {
                req = req.continuation_token(t);
            }
            let resp = req
                .send()
                .await
                .map_err(|e| map_sdk_error("list", prefix, e))?;
            for obj in resp.contents() {
                let Some(key) = obj.key() else { continue };
                if key.starts_with(prefix) {
                    out.push(ObjectMeta {
                        key: key.to_owned(),
                        size: obj.size().unwrap_or(0).max(0) as u64,
                        last_modified_ms: millis(obj.last_modified()),
                    });
                }
            }
            match resp.next_continuation_token() {
                Some(t) if resp.is_truncated().unwrap_or(false) => token = Some(t.to_owned()),
                _ => break,
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        match self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => match map_sdk_error("delete", key, e) {
                ObjStoreError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    /// `DeleteObjects` in quiet mode (only failures answered), 1,000 keys a request, S3's
    /// limit.
    async fn delete_many(&self, keys: &[String]) -> Result<Vec<(String, ObjStoreError)>> {
        let mut failed = Vec::new();
        let mut valid = Vec::with_capacity(keys.len());
        for key in keys {
            match validate_key(key) {
                Ok(()) => valid.push(key),
                Err(e) => failed.push((key.clone(), e)),
            }
        }
        for chunk in valid.chunks(DELETE_OBJECTS_MAX_KEYS) {
            let mut objects = Vec::with_capacity(chunk.len());
            for key in chunk {
                let id = ObjectIdentifier::builder()
                    .key(key.as_str())
                    .build()
                    .map_err(|e| build_error("delete_objects", key, e))?;
                objects.push(id);
            }
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| build_error("delete_objects", chunk[0], e))?;
            let resp = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send()
                .await
                .map_err(|e| map_sdk_error("delete_objects", chunk[0], e))?;
            for err in resp.errors() {
                let key = err.key().unwrap_or("").to_owned();
                let code = err.code().unwrap_or("");
                let message = format!("{key}: {code}: {}", err.message().unwrap_or(""));
                let e = classify_service_error(
                    "delete_objects",
                    &key,
                    None,
                    code,
                    message.clone(),
                    message.into(),
                );
                // A key already gone is deleted, as for a single DELETE.
                if !matches!(e, ObjStoreError::NotFound { .. }) {
                    failed.push((key, e));
                }
            }
        }
        Ok(failed)
    }

    fn bucket(&self) -> &str {
        &self.bucket
    }
}

/// Keys in one `DeleteObjects` request, at most (S3's limit).
const DELETE_OBJECTS_MAX_KEYS: usize = 1000;

/// A request the SDK's builder refused (a required field missing: a bug here, not the store's).
fn build_error(op: &'static str, key: &str, e: aws_sdk_s3::error::BuildError) -> ObjStoreError {
    ObjStoreError::Other {
        op,
        message: format!("{key}: {e}"),
        source: Some(Box::new(e)),
    }
}

/// `pieces` when they are exactly bytes `range`: S3 answers a range that runs past the end with
/// the bytes that exist; we do not.
fn exact_range(
    key: &str,
    range: &Range<u64>,
    pieces: Vec<Bytes>,
    size: Option<u64>,
) -> Result<Vec<Bytes>> {
    let len: usize = pieces.iter().map(Bytes::len).sum();
    if len as u64 != range.end - range.start {
        return Err(ObjStoreError::invalid_range(key, range, size));
    }
    Ok(pieces)
}

/// A body in the pieces it arrived in (no copy).
async fn read_body_pieces(op: &'static str, key: &str, body: ByteStream) -> Result<Vec<Bytes>> {
    body.collect()
        .await
        .map(|agg| agg.into_segments().collect())
        .map_err(|e| ObjStoreError::Unavailable {
            op,
            message: format!("{key}: response body interrupted: {e}"),
            source: Some(Box::new(e)),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_are_standard_base64() {
        assert_eq!(base64_encode(&[]), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        // CRC-32C of "123456789" is 0xE3069283.
        assert_eq!(
            base64_encode(&crc32c::crc32c(b"123456789").to_be_bytes()),
            "4waSgw=="
        );
    }

    #[test]
    fn directory_bucket_names_are_recognised_by_their_suffix() {
        for name in [
            "ferry-wal--use1-az4--x-s3",
            "a--usw2-az1--x-s3",
            "my.bucket--euw1-az3--x-s3",
            "wal--usw2-lax1-az1--x-s3",
        ] {
            assert!(is_directory_bucket_name(name), "{name}");
        }
        for name in [
            "ferry-wal",
            "ferry-wal--x-s3",
            "--use1-az4--x-s3",
            "ferry--use1--x-s3",
            "ferry--USE1-AZ4--x-s3",
            "ferry--use1-az4--x-s3-extra",
            "ferry-use1-az4-x-s3",
        ] {
            assert!(!is_directory_bucket_name(name), "{name}");
        }
    }

    fn config(bucket: &str) -> S3Config {
        S3Config {
            bucket: bucket.into(),
            region: "us-east-1".into(),
            ..S3Config::default()
        }
    }

    #[test]
    fn express_is_implied_by_the_name_and_the_flag_requires_it() {
        assert!(config("wal--use1-az4--x-s3").is_express());
        assert!(!config("wal").is_express());
        let flagged = S3Config {
            express_one_zone: true,
            ..config("wal")
        };
        assert!(flagged.validate().is_err());
        let ok = S3Config {
            express_one_zone: true,
            ..config("wal--use1-az4--x-s3")
        };
        assert!(ok.validate().is_ok());
    }

    #[test]
    fn directory_buckets_on_aws_refuse_path_style() {
        let path_style = S3Config {
            force_path_style: true,
            ..config("wal--use1-az4--x-s3")
        };
        assert!(path_style.validate().is_err());
        let emulator = S3Config {
            endpoint: Some("http://127.0.0.1:1".into()),
            ..path_style
        };
        assert!(emulator.validate().is_ok());
    }

    #[test]
    fn credentials_come_in_pairs_and_secrets_are_not_printed() {
        let half = S3Config {
            access_key: Some("ak".into()),
            ..config("b")
        };
        assert!(half.validate().is_err());
        let full = S3Config {
            secret_key: Some("very-secret".into()),
            ..half
        };
        assert!(full.validate().is_ok());
        assert!(!format!("{full:?}").contains("very-secret"));
    }

    #[test]
    fn service_errors_map_to_retriable_or_final_kinds() {
        let map = |status, code: &str| {
            classify_service_error("get", "k", status, code, String::new(), "x".into())
        };
        assert!(matches!(
            map(Some(404), "NoSuchKey"),
            ObjStoreError::NotFound { .. }
        ));
        assert!(matches!(map(Some(404), ""), ObjStoreError::NotFound { .. }));
        assert!(matches!(
            map(Some(404), "NoSuchBucket"),
            ObjStoreError::Other { .. }
        ));
        assert!(matches!(
            map(Some(412), "PreconditionFailed"),
            ObjStoreError::AlreadyExists { .. }
        ));
        assert!(matches!(
            map(Some(503), "SlowDown"),
            ObjStoreError::Throttled { .. }
        ));
        assert!(matches!(
            map(Some(500), "InternalError"),
            ObjStoreError::Unavailable { .. }
        ));
        assert!(map(Some(409), "ConditionalRequestConflict").is_retriable());
        assert!(matches!(
            map(Some(416), "InvalidRange"),
            ObjStoreError::InvalidRange { .. }
        ));
        let denied = map(Some(403), "AccessDenied");
        assert!(matches!(denied, ObjStoreError::Other { .. }) && !denied.is_retriable());
    }

    #[tokio::test]
    async fn static_credentials_build_a_client_without_network() {
        let store = S3Store::connect(&S3Config {
            endpoint: Some("http://127.0.0.1:1".into()),
            force_path_style: true,
            access_key: Some("ak".into()),
            secret_key: Some("sk".into()),
            ..config("wal--use1-az4--x-s3")
        })
        .await
        .unwrap();
        assert_eq!(store.bucket(), "wal--use1-az4--x-s3");
        assert!(store.express);
    }
}
