//! The object store a backup goes to, through the `object_store` crate: it
//! speaks S3 (and S3-compatible stores), GCS and Azure Blob behind one trait,
//! does multipart uploads with bounded buffers, retries with backoff, and
//! signs with the rustls/ring stack the operator already links (no OpenSSL,
//! no second TLS provider). It is maintained by the Apache Arrow project.

use object_store::aws::AmazonS3Builder;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService, ReqwestConnector,
};
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// How many calls to tenants' stores the operator process makes at once, in
/// all: each holds a worker (of the cluster controller's for a restore's
/// check, of the backup controller's for a bucket check or a deletion) for
/// up to its deadline, so a tenant whose store stalls holds at most this
/// many, and no namespace holds more than one (see [`StoreSlots`]).
pub const STORE_CALLS_AT_ONCE: usize = 2;

/// How long a reconcile that found no free slot waits before it asks again.
pub const STORE_BUSY_RETRY: Duration = Duration::from_secs(5);

/// Who may talk to a tenant's object store now: one call per namespace and
/// [`STORE_CALLS_AT_ONCE`] in all. A reconcile that gets no slot does not
/// wait for one (a worker waiting is a worker held): it asks again after
/// [`STORE_BUSY_RETRY`]. So a tenant whose stores stall shares the workers
/// fairly: each of its namespaces holds one at most, and the others stay
/// free for every other tenant's reconciles.
#[derive(Debug)]
pub struct StoreSlots {
    at_once: usize,
    busy: Mutex<HashSet<String>>,
}

/// A slot taken; given back when dropped.
#[derive(Debug)]
pub struct StoreSlot<'a> {
    slots: &'a StoreSlots,
    namespace: String,
}

impl StoreSlots {
    pub fn new(at_once: usize) -> StoreSlots {
        StoreSlots {
            at_once,
            busy: Mutex::new(HashSet::new()),
        }
    }

    /// The process's slots.
    pub fn process() -> &'static StoreSlots {
        static SLOTS: LazyLock<StoreSlots> = LazyLock::new(|| StoreSlots::new(STORE_CALLS_AT_ONCE));
        &SLOTS
    }

    /// A slot for a call from `namespace`, or `None` when that namespace
    /// has one already or every slot is taken.
    pub fn try_take(&self, namespace: &str) -> Option<StoreSlot<'_>> {
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        if busy.len() >= self.at_once || busy.contains(namespace) {
            return None;
        }
        busy.insert(namespace.to_string());
        Some(StoreSlot {
            slots: self,
            namespace: namespace.to_string(),
        })
    }
}

impl Drop for StoreSlot<'_> {
    fn drop(&mut self) {
        let mut busy = self.slots.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.remove(&self.namespace);
    }
}

/// Where and how to reach the bucket.
#[derive(Clone)]
pub struct S3Settings {
    pub endpoint: String,
    pub bucket: String,
    pub region: Option<String>,
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// An S3 client for the bucket: path-style requests (what S3-compatible
/// stores all take), plain HTTP allowed when the endpoint says `http://`.
pub fn s3(settings: &S3Settings) -> Result<Arc<dyn ObjectStore>, object_store::Error> {
    Ok(Arc::new(builder(settings).build()?))
}

fn builder(settings: &S3Settings) -> AmazonS3Builder {
    AmazonS3Builder::new()
        .with_endpoint(&settings.endpoint)
        .with_bucket_name(&settings.bucket)
        .with_region(settings.region.as_deref().unwrap_or("us-east-1"))
        .with_access_key_id(&settings.access_key_id)
        .with_secret_access_key(&settings.secret_access_key)
        .with_allow_http(settings.endpoint.starts_with("http://"))
        .with_virtual_hosted_style_request(false)
        // The payload is not hashed into each request's signature: the
        // backup hashes every shard's bytes once for its manifest (which the
        // restore checks), and on 2 cores the second SHA-256 of every part
        // cost a sixth of the throughput.
        .with_unsigned_payload(true)
}

/// The largest response body the operator process reads from a store: the
/// manifest's own cap ([`super::manifest::MAX_MANIFEST_BYTES`]) and a little
/// more. Error bodies (which the library reads whole) are held to it too, so
/// an endpoint that answers with an endless body costs the operator at most
/// this much, not its memory limit.
pub const OPERATOR_BODY_CAP: usize = super::manifest::MAX_MANIFEST_BYTES + 64 * 1024;

/// How long one request of the operator process may take, body included.
pub const OPERATOR_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// [`s3`] for the calls the operator process itself makes on a store a
/// tenant names (the bucket check, the manifest, the restore check, the
/// deletion of a backup's objects): every response body capped at
/// [`OPERATOR_BODY_CAP`], a connection within 3 s, a request within
/// [`OPERATOR_REQUEST_TIMEOUT`], one retry at most. The backup and restore
/// Jobs, which move the data, use [`s3`] in the tenant's own namespace.
pub fn s3_for_operator(settings: &S3Settings) -> Result<Arc<dyn ObjectStore>, object_store::Error> {
    // The options replace the builder's whole (its `allow_http` included),
    // so they say it again.
    let store = builder(settings)
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(settings.endpoint.starts_with("http://"))
                .with_timeout(OPERATOR_REQUEST_TIMEOUT)
                .with_connect_timeout(Duration::from_secs(3)),
        )
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 1,
            retry_timeout: OPERATOR_REQUEST_TIMEOUT,
        })
        .with_http_connector(Capped {
            cap: OPERATOR_BODY_CAP,
        })
        .build()?;
    Ok(Arc::new(store))
}

/// An [`HttpConnector`] whose responses' bodies fail past `cap` bytes.
#[derive(Debug, Clone, Copy)]
struct Capped {
    cap: usize,
}

impl HttpConnector for Capped {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(CappedService {
            inner,
            cap: self.cap,
        }))
    }
}

#[derive(Debug)]
struct CappedService {
    inner: HttpClient,
    cap: usize,
}

#[async_trait::async_trait]
impl HttpService for CappedService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        use http_body_util::BodyExt as _;
        let response = self.inner.execute(req).await?;
        let (parts, body) = response.into_parts();
        let cap = self.cap;
        let body = http_body_util::Limited::new(body, cap).map_err(move |e| {
            HttpError::new(HttpErrorKind::Decode, BodyTooLarge { cap, source: e })
        });
        Ok(HttpResponse::from_parts(parts, HttpResponseBody::new(body)))
    }
}

/// A store answered with a body past the operator's cap.
#[derive(Debug, thiserror::Error)]
#[error("the store's answer is larger than {cap} bytes: {source}")]
struct BodyTooLarge {
    cap: usize,
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// What the operator says of a failed store call, in a backup's status
/// and events: whether the store was reached, and its HTTP status when it
/// answered; never the body of an answer, an address or the difference
/// between a refused connection and one that timed out. A tenant names the
/// endpoint: the operator must not become a way to read or map what else
/// its own network reaches. The whole error goes to the operator's log.
pub fn store_error(e: &object_store::Error) -> String {
    tracing::debug!(error = %e, "object store call failed");
    match e {
        object_store::Error::NotFound { .. } => return "not found".into(),
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => {
            return "access denied (check the credentials and the bucket's policy)".into();
        }
        _ => {}
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(http) = err.downcast_ref::<HttpError>() {
            return match http.kind() {
                HttpErrorKind::Decode => {
                    "the store's answer could not be read (not S3, or larger than the operator reads)"
                        .into()
                }
                _ => "the store could not be reached, or did not answer in time".into(),
            };
        }
        source = err.source();
    }
    let text = e.to_string();
    match text
        .split_once("status code: ")
        .and_then(|(_, rest)| rest.get(..3))
        .filter(|code| code.bytes().all(|b| b.is_ascii_digit()))
    {
        Some(code) => format!("the store answered HTTP {code}"),
        None => "the store's answer was not understood".into(),
    }
}

/// Deletes every object under `folder` (a backup's `<prefix>/<ns>/<name>`;
/// prefixes match whole path segments, so `a/b` never takes `a/bc`).
/// Returns how many were deleted. Objects listed meanwhile by nobody else:
/// a backup's folder is written only by its own Job.
pub async fn delete_folder(
    store: &Arc<dyn ObjectStore>,
    folder: &str,
) -> Result<usize, object_store::Error> {
    use futures::{StreamExt as _, TryStreamExt as _};
    let prefix = object_store::path::Path::from(folder);
    let paths: Vec<object_store::path::Path> = store
        .list(Some(&prefix))
        .map_ok(|meta| meta.location)
        .try_collect()
        .await?;
    let count = paths.len();
    let locations = futures::stream::iter(paths.into_iter().map(Ok)).boxed();
    store
        .delete_stream(locations)
        .try_for_each(|_| futures::future::ready(Ok(())))
        .await?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn one_store_call_per_namespace_and_a_few_in_all() {
        let slots = super::StoreSlots::new(2);
        let a = slots.try_take("tenant-a").unwrap();
        assert!(
            slots.try_take("tenant-a").is_none(),
            "a second call of one namespace"
        );
        let b = slots.try_take("tenant-b").unwrap();
        assert!(
            slots.try_take("tenant-c").is_none(),
            "a third call while two are in flight"
        );
        drop(a);
        let c = slots.try_take("tenant-c").unwrap();
        drop((b, c));
        assert!(slots.try_take("tenant-a").is_some());
    }

    use std::io::{Read, Write};

    /// A one-connection-at-a-time HTTP server on 127.0.0.1 that answers
    /// every request with `head` and then `body` (repeated `repeat` times);
    /// returns its endpoint. It serves `requests` connections, then stops.
    fn server(head: &'static str, body: &'static str, repeat: usize, requests: usize) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for _ in 0..requests {
                let Ok((mut conn, _)) = listener.accept() else {
                    return;
                };
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(head.as_bytes());
                for _ in 0..repeat {
                    if conn.write_all(body.as_bytes()).is_err() {
                        break;
                    }
                }
            }
        });
        format!("http://127.0.0.1:{port}")
    }

    fn settings(endpoint: String) -> S3Settings {
        S3Settings {
            endpoint,
            bucket: "b".into(),
            region: None,
            access_key_id: "k".into(),
            secret_access_key: "s".into(),
        }
    }

    #[tokio::test]
    async fn the_operators_client_reaches_a_plain_http_store() {
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>b</Name><Prefix>x/</Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>";
        let head = Box::leak(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_boxed_str(),
        );
        let store = s3_for_operator(&settings(server(head, body, 1, 2))).unwrap();
        let listed = store
            .list_with_delimiter(Some(&object_store::path::Path::from("x")))
            .await;
        assert!(listed.is_ok(), "{listed:?}");
    }

    #[tokio::test]
    async fn an_endless_error_body_is_cut_at_the_cap_and_named_without_its_text() {
        // 403 with 64 KiB chunks for longer than the cap (and then some).
        let chunk: &'static str =
            Box::leak(format!("{:x}\r\n{}\r\n", 65536, "E".repeat(65536)).into_boxed_str());
        let endpoint = server(
            "HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n",
            chunk,
            OPERATOR_BODY_CAP / 65536 + 64,
            4,
        );
        let store = s3_for_operator(&settings(endpoint)).unwrap();
        let started = std::time::Instant::now();
        let err = store
            .list_with_delimiter(Some(&object_store::path::Path::from("x")))
            .await
            .unwrap_err();
        let said = store_error(&err);
        assert!(said.contains("could not be read"), "{said} ({err})");
        assert!(!said.contains("EEEE"), "{said}");
        assert!(
            started.elapsed() < OPERATOR_REQUEST_TIMEOUT * 3,
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_store_that_refuses_connections_is_named_as_unreachable_only() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let store = s3_for_operator(&settings(format!("http://127.0.0.1:{port}"))).unwrap();
        let err = store
            .list_with_delimiter(Some(&object_store::path::Path::from("x")))
            .await
            .unwrap_err();
        let said = store_error(&err);
        assert_eq!(
            said,
            "the store could not be reached, or did not answer in time"
        );
    }
}
