//! The remote WAL's hot requests, a PUT of an object and a GET of an object or a byte range,
//! sent straight over pooled HTTP/1.1 connections and signed with SigV4 (the SDK's own signer),
//! without the SDK's per-request pipeline.
//!
//! Why: the pipeline (interceptors, the endpoint rules engine, config layers, retry
//! classifiers, the stalled-stream monitor) cost a few hundred µs of CPU per request. At full
//! load a broker sends about 1,500 of these per GB produced, and the SDK took 9-12 % of the
//! brokers' CPU in a profile. Signing and the HTTP exchange are the only parts these requests
//! need.
//!
//! [`crate::S3Store`] uses it when its endpoint is named in the configuration (an S3-compatible
//! server, one per zone, or an S3 Express zonal endpoint given explicitly), for PUT and GET
//! only. Everything else (HEAD, LIST, DELETE, bucket calls, and S3 Express session auth on
//! AWS's own endpoints) goes through the SDK as before. Retries and time limits stay
//! [`crate::RetryingStore`]'s job. Error statuses map as the SDK path maps them (see
//! `classify_service_error`).

use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use ferry_common::{Clock, SystemClock};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::s3::{base64_encode, classify_service_error, PartsBody};
use crate::{ObjStoreError, ObjectBody, Result};

/// Characters of a key sent as they are in the URL path: RFC 3986's unreserved ones and `/`
/// (S3's canonical URI encodes everything else once).
const KEY_PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Refresh provided credentials this long before they expire.
const CREDENTIALS_REFRESH_BEFORE: Duration = Duration::from_secs(300);

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// Where an object's URL starts: `scheme://authority[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    scheme: String,
    authority: String,
    path_prefix: String,
}

impl Endpoint {
    fn parse(url: &str) -> Option<Endpoint> {
        let uri: http::Uri = url.parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return None;
        }
        let authority = uri.authority()?.as_str().to_owned();
        let path_prefix = uri.path().trim_end_matches('/').to_owned();
        Some(Endpoint {
            scheme,
            authority,
            path_prefix,
        })
    }

    /// The URL of `key` in `bucket`: `endpoint/bucket/key` (path style) or
    /// `scheme://bucket.authority/key` (virtual-hosted style).
    fn object_url(&self, bucket: &str, key: &str, path_style: bool) -> String {
        let key = utf8_percent_encode(key, KEY_PATH);
        if path_style {
            format!(
                "{}://{}{}/{bucket}/{key}",
                self.scheme, self.authority, self.path_prefix
            )
        } else {
            format!(
                "{}://{bucket}.{}{}/{key}",
                self.scheme, self.authority, self.path_prefix
            )
        }
    }
}

/// PUT and GET of one bucket's objects, sent directly (see the module docs).
pub(crate) struct DirectS3 {
    http: Client<Https, PartsBody>,
    endpoint: Endpoint,
    bucket: String,
    path_style: bool,
    region: String,
    /// `s3`, or `s3express` for a directory bucket on an explicit zonal endpoint.
    signing_name: &'static str,
    /// The SDK's credentials provider (static keys, environment, profile, instance role...),
    /// and what it last gave, kept until shortly before it expires.
    credentials: SharedCredentialsProvider,
    cached: Mutex<Option<Credentials>>,
}

impl std::fmt::Debug for DirectS3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectS3")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("path_style", &self.path_style)
            .finish_non_exhaustive()
    }
}

impl DirectS3 {
    /// A direct client for `bucket` at `endpoint` (an `http://` or `https://` URL), signing
    /// with `credentials`, or `None` when the endpoint is not such a URL (the SDK path handles
    /// it and reports what is wrong).
    pub(crate) fn new(
        endpoint: &str,
        bucket: &str,
        path_style: bool,
        region: &str,
        express: bool,
        credentials: SharedCredentialsProvider,
    ) -> Result<Option<DirectS3>> {
        let Some(endpoint) = Endpoint::parse(endpoint) else {
            return Ok(None);
        };
        let mut http = HttpConnector::new();
        // A PUT's body follows its headers at once: Nagle and delayed ACKs would hold it.
        http.set_nodelay(true);
        http.enforce_http(false);
        let tls_provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(tls_provider)
            .map_err(|e| ObjStoreError::other("configure", format!("TLS roots: {e}")))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        Ok(Some(DirectS3 {
            http: client,
            endpoint,
            bucket: bucket.to_owned(),
            path_style,
            region: region.to_owned(),
            signing_name: if express { "s3express" } else { "s3" },
            credentials,
            cached: Mutex::new(None),
        }))
    }

    /// Signing credentials: the provider's, asked again shortly before they expire.
    async fn identity(&self) -> Result<Identity> {
        let fresh = |c: &Credentials| {
            c.expiry().is_none_or(|at| {
                at.duration_since(wall_time())
                    .is_ok_and(|left| left > CREDENTIALS_REFRESH_BEFORE)
            })
        };
        if let Some(c) = lock(&self.cached).as_ref().filter(|c| fresh(c)) {
            return Ok(c.clone().into());
        }
        let c = self.credentials.provide_credentials().await.map_err(|e| {
            ObjStoreError::Unavailable {
                op: "credentials",
                message: format!("no credentials for S3: {e}"),
                source: Some(Box::new(e)),
            }
        })?;
        *lock(&self.cached) = Some(c.clone());
        Ok(c.into())
    }

    /// Sends a signed request for `key` and returns the response with its whole body, in the
    /// pieces it arrived in. Statuses other than 2xx become errors (with S3's error code).
    async fn exchange(
        &self,
        op: &'static str,
        method: Method,
        key: &str,
        headers: Vec<(&'static str, String)>,
        body: PartsBody,
    ) -> Result<(http::response::Parts, Vec<Bytes>)> {
        let url = self.endpoint.object_url(&self.bucket, key, self.path_style);
        let method_has_body = method == Method::PUT;
        let mut req = Request::builder().method(method).uri(&url);
        for (name, value) in &headers {
            req = req.header(*name, value);
        }
        let mut req = req
            .body(body)
            .map_err(|e| ObjStoreError::other(op, format!("{key}: request: {e}")))?;
        // A body-less request signs the empty payload's hash, as the SDK does; a PUT's payload is
        // covered by its CRC-32C header instead of a SHA-256 pass over every byte.
        let payload = if method_has_body {
            SignableBody::UnsignedPayload
        } else {
            SignableBody::Bytes(&[])
        };
        self.sign(&mut req, payload).await?;
        let unavailable = |e: &dyn std::fmt::Display| ObjStoreError::Unavailable {
            op,
            message: format!("{key}: {e}"),
            source: None,
        };
        let resp = self
            .http
            .request(req)
            .await
            .map_err(|e| unavailable(&format!("request not sent or no response: {e:?}")))?;
        let (parts, mut incoming) = resp.into_parts();
        let mut pieces = Vec::new();
        while let Some(frame) = incoming.frame().await {
            let frame =
                frame.map_err(|e| unavailable(&format!("response body interrupted: {e}")))?;
            if let Ok(data) = frame.into_data() {
                if !data.is_empty() {
                    pieces.push(data);
                }
            }
        }
        if !parts.status.is_success() {
            return Err(status_error(op, key, parts.status, &pieces));
        }
        Ok((parts, pieces))
    }

    async fn sign(&self, req: &mut Request<PartsBody>, payload: SignableBody<'_>) -> Result<()> {
        let identity = self.identity().await?;
        let mut settings = SigningSettings::default();
        // S3's rules: the path is encoded once and not normalised, and the payload's hash (or
        // UNSIGNED-PAYLOAD) goes in x-amz-content-sha256.
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(self.signing_name)
            .time(wall_time())
            .settings(settings)
            .build()
            .map_err(|e| ObjStoreError::other("sign", e.to_string()))?
            .into();
        let uri = req.uri().to_string();
        let headers = req
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)));
        let signable = SignableRequest::new(req.method().as_str(), &uri, headers, payload)
            .map_err(|e| ObjStoreError::other("sign", e.to_string()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| ObjStoreError::other("sign", e.to_string()))?
            .into_parts();
        instructions.apply_to_request_http1x(req);
        Ok(())
    }

    /// PUT of `body`, with its CRC-32C for S3 to check; `If-None-Match: *` when `if_absent`.
    pub(crate) async fn put(
        &self,
        op: &'static str,
        key: &str,
        body: ObjectBody,
        if_absent: bool,
    ) -> Result<()> {
        let mut headers = vec![
            ("content-length", body.len().to_string()),
            (
                "x-amz-checksum-crc32c",
                base64_encode(&body.crc32c().to_be_bytes()),
            ),
        ];
        if if_absent {
            headers.push(("if-none-match", "*".to_owned()));
        }
        let parts = PartsBody::new(body.into_parts().into());
        self.exchange(op, Method::PUT, key, headers, parts).await?;
        Ok(())
    }

    /// GET of the object, or of bytes `range` of it: the body in the pieces it arrived in, and
    /// the object's size when the answer names it (`Content-Range`).
    pub(crate) async fn get(
        &self,
        op: &'static str,
        key: &str,
        range: Option<&Range<u64>>,
    ) -> Result<(Vec<Bytes>, Option<u64>)> {
        let headers = match range {
            Some(r) => vec![("range", format!("bytes={}-{}", r.start, r.end - 1))],
            None => Vec::new(),
        };
        let (parts, pieces) = self
            .exchange(op, Method::GET, key, headers, PartsBody::empty())
            .await?;
        let size = parts
            .headers
            .get(http::header::CONTENT_RANGE)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .and_then(|cr| cr.rsplit_once('/'))
            .and_then(|(_, total)| total.parse::<u64>().ok());
        Ok((pieces, size))
    }
}

/// Wall time, through ferry's clock seam (signatures carry it; S3 refuses one 15 minutes off).
fn wall_time() -> SystemTime {
    let ms = u64::try_from(SystemClock.now_ms()).unwrap_or(0);
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An error status, classified as the SDK path classifies it, with S3's `<Code>` and
/// `<Message>` from the XML body when there is one.
fn status_error(op: &'static str, key: &str, status: StatusCode, body: &[Bytes]) -> ObjStoreError {
    let text: Vec<u8> = body
        .iter()
        .flat_map(|b| b.iter().copied())
        .take(4096)
        .collect();
    let text = String::from_utf8_lossy(&text);
    let element = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find('<')? + start;
        Some(text[start..end].to_owned())
    };
    let code = element("Code").unwrap_or_default();
    let message = format!(
        "{key}: {} {code}: {}",
        status.as_u16(),
        element("Message").unwrap_or_default()
    );
    let source: crate::error::BoxError = Box::new(std::io::Error::other(message.clone()));
    classify_service_error(op, key, Some(status.as_u16()), &code, message, source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_urls_encode_keys_once_in_either_style() {
        let e = Endpoint::parse("http://127.0.0.1:9000/").unwrap();
        assert_eq!(
            e.object_url("b", "wal/7/a b+c%.wal", true),
            "http://127.0.0.1:9000/b/wal/7/a%20b%2Bc%25.wal"
        );
        let e = Endpoint::parse("https://s3express-use1-az4.us-east-1.amazonaws.com").unwrap();
        assert_eq!(
            e.object_url("w--use1-az4--x-s3", "wal/x~y_z-1.wal", false),
            "https://w--use1-az4--x-s3.s3express-use1-az4.us-east-1.amazonaws.com/wal/x~y_z-1.wal"
        );
        let e = Endpoint::parse("http://minio:9000/prefix/").unwrap();
        assert_eq!(e.object_url("b", "k", true), "http://minio:9000/prefix/b/k");
        assert_eq!(Endpoint::parse("ftp://x"), None);
        assert_eq!(Endpoint::parse("not a url"), None);
    }

    #[test]
    fn error_statuses_map_as_the_sdk_path_maps_them() {
        let xml = |code: &str| {
            vec![Bytes::from(format!(
                "<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m</Message></Error>"
            ))]
        };
        let e = status_error("get", "k", StatusCode::NOT_FOUND, &xml("NoSuchKey"));
        assert!(matches!(e, ObjStoreError::NotFound { .. }), "{e:?}");
        let e = status_error("put", "k", StatusCode::PRECONDITION_FAILED, &[]);
        assert!(matches!(e, ObjStoreError::AlreadyExists { .. }), "{e:?}");
        let e = status_error("get", "k", StatusCode::RANGE_NOT_SATISFIABLE, &[]);
        assert!(matches!(e, ObjStoreError::InvalidRange { .. }), "{e:?}");
        let e = status_error(
            "put",
            "k",
            StatusCode::SERVICE_UNAVAILABLE,
            &xml("SlowDown"),
        );
        assert!(matches!(e, ObjStoreError::Throttled { .. }), "{e:?}");
        let e = status_error(
            "put",
            "k",
            StatusCode::CONFLICT,
            &xml("ConditionalRequestConflict"),
        );
        assert!(matches!(e, ObjStoreError::Unavailable { .. }), "{e:?}");
        let e = status_error("get", "k", StatusCode::FORBIDDEN, &xml("AccessDenied"));
        match e {
            ObjStoreError::Other { message, .. } => assert!(message.contains("AccessDenied")),
            other => panic!("{other:?}"),
        }
    }
}
