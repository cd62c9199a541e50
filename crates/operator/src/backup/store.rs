//! The object store a backup goes to, through the `object_store` crate: it
//! speaks S3 (and S3-compatible stores), GCS and Azure Blob behind one trait,
//! does multipart uploads with bounded buffers, retries with backoff, and
//! signs with the rustls/ring stack the operator already links (no OpenSSL,
//! no second TLS provider). It is maintained by the Apache Arrow project.

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use std::sync::Arc;

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
    let store = AmazonS3Builder::new()
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
        .build()?;
    Ok(Arc::new(store))
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
