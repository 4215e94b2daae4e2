//! The object operations the broker uses (PUT with `If-None-Match: *`, ranged GET, HEAD), each
//! moving an object's bytes in one blocking step, over s3s-fs's layout (`ROOT/BUCKET/KEY`);
//! every other operation (buckets, LIST, DELETE) is s3s-fs's own.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::TryStreamExt;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};
use s3s_fs::FileSystem;

pub struct FastStore {
    root: PathBuf,
    fs: FileSystem,
    tmp_counter: AtomicU64,
}

impl FastStore {
    pub fn new(root: &Path) -> anyhow::Result<Self> {
        let root = std::fs::canonicalize(root)?;
        let fs = FileSystem::new(&root).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        Ok(Self {
            root,
            fs,
            tmp_counter: AtomicU64::new(0),
        })
    }

    fn bucket_dir(&self, bucket: &str) -> S3Result<PathBuf> {
        let dir = self.root.join(checked(bucket)?);
        if !dir.is_dir() {
            return Err(s3_error!(NoSuchBucket));
        }
        Ok(dir)
    }

    fn object_path(&self, bucket: &str, key: &str) -> S3Result<PathBuf> {
        Ok(self.bucket_dir(bucket)?.join(checked(key)?))
    }
}

/// A bucket name or key as a relative path that stays below the root.
fn checked(name: &str) -> S3Result<&Path> {
    let path = Path::new(name);
    if name.is_empty() || !path.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(s3_error!(InvalidArgument, "unsupported name {name:?}"));
    }
    Ok(path)
}

fn io_error(e: std::io::Error) -> s3s::S3Error {
    s3_error!(e, InternalError)
}

/// The object's ETag, the same from its PUT and every GET (a ranged GET too, as S3's): its size
/// and modification time, so that answering a GET costs no pass over the bytes.
fn etag(len: u64, modified: std::time::SystemTime) -> ETag {
    let nanos = modified
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    ETag::Strong(format!("{len:x}-{nanos:x}"))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> S3Result<T> + Send + 'static,
) -> S3Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| s3_error!(InternalError, "blocking task: {e}"))?
}

#[async_trait::async_trait]
impl S3 for FastStore {
    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let input = req.input;
        let path = self.object_path(&input.bucket, &input.key)?;
        // The body's chunks go to the file as they are (no copy into one buffer), with the
        // CRC-32C taken over them on the way: a real store's cost is not on this machine, so
        // this one should not add passes over every byte that S3 would not make here either.
        let chunks: Vec<Bytes> = match input.body {
            Some(body) => body
                .try_collect()
                .await
                .map_err(|e| s3_error!(IncompleteBody, "{e}"))?,
            None => Vec::new(),
        };
        let len: usize = chunks.iter().map(Bytes::len).sum();
        if let Some(want) = input.content_length {
            if want != len as i64 {
                return Err(s3_error!(IncompleteBody));
            }
        }
        let crc = chunks
            .iter()
            .fold(0, |crc, c| crc32c::crc32c_append(crc, c));
        if let Some(want) = &input.checksum_crc32c {
            if *want != base64(&crc.to_be_bytes()) {
                return Err(s3_error!(BadDigest, "x-amz-checksum-crc32c does not match"));
            }
        }
        let only_if_absent = matches!(input.if_none_match, Some(ETagCondition::Any));
        let tmp = self.root.join(format!(
            ".tmp.fast.{}.part",
            self.tmp_counter.fetch_add(1, Ordering::Relaxed)
        ));
        let modified = blocking(move || {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(io_error)?;
            }
            let mut f = std::fs::File::create(&tmp).map_err(io_error)?;
            for c in &chunks {
                f.write_all(c).map_err(io_error)?;
            }
            let modified = f.metadata().and_then(|m| m.modified()).map_err(io_error)?;
            drop(f);
            // A hard link fails if the key exists: the conditional PUT is atomic.
            let placed = if only_if_absent {
                std::fs::hard_link(&tmp, &path).map(|_| true).or_else(|e| {
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        Ok(false)
                    } else {
                        Err(e)
                    }
                })
            } else {
                std::fs::rename(&tmp, &path).map(|_| true)
            };
            let _ = std::fs::remove_file(&tmp);
            match placed {
                Ok(true) => Ok(modified),
                Ok(false) => Err(s3_error!(PreconditionFailed)),
                Err(e) => Err(io_error(e)),
            }
        })
        .await?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(etag(len as u64, modified)),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let path = self.object_path(&input.bucket, &input.key)?;
        let range = input.range;
        let (data, file_len, modified, start) = blocking(move || {
            let f = std::fs::File::open(&path).map_err(|e| s3_error!(e, NoSuchKey))?;
            let meta = f.metadata().map_err(io_error)?;
            let len = meta.len();
            let span = match range {
                None => 0..len,
                Some(r) => r.check(len)?,
            };
            let n = usize::try_from(span.end - span.start).map_err(|_| s3_error!(InvalidRange))?;
            // Read into spare capacity: a zero-filled buffer would be one more pass.
            let mut buf = Vec::with_capacity(n);
            (&f).seek(SeekFrom::Start(span.start)).map_err(io_error)?;
            (&f).take(n as u64)
                .read_to_end(&mut buf)
                .map_err(io_error)?;
            if buf.len() != n {
                return Err(s3_error!(InternalError, "object shrank while read"));
            }
            let modified = meta.modified().map_err(io_error)?;
            Ok((Bytes::from(buf), len, modified, span.start))
        })
        .await?;
        let n = data.len() as u64;
        let content_range = range.map(|_| {
            let last = (start + n).saturating_sub(1);
            format!("bytes {start}-{last}/{file_len}")
        });
        Ok(S3Response::new(GetObjectOutput {
            content_length: Some(n as i64),
            content_range,
            last_modified: Some(Timestamp::from(modified)),
            e_tag: Some(etag(file_len, modified)),
            body: Some(StreamingBlob::from(s3s::Body::from(data))),
            ..Default::default()
        }))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        let path = self.object_path(&input.bucket, &input.key)?;
        let meta =
            blocking(move || std::fs::metadata(&path).map_err(|e| s3_error!(e, NoSuchKey))).await?;
        if !meta.is_file() {
            return Err(s3_error!(NoSuchKey));
        }
        let modified = meta.modified().map_err(io_error)?;
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(meta.len() as i64),
            last_modified: Some(Timestamp::from(modified)),
            e_tag: Some(etag(meta.len(), modified)),
            ..Default::default()
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        self.fs.create_bucket(req).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.fs.head_bucket(req).await
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        self.fs.list_buckets(req).await
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        self.fs.delete_bucket(req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.fs.delete_object(req).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        self.fs.delete_objects(req).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        self.fs.list_objects_v2(req).await
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        self.fs.list_objects(req).await
    }
}

/// Standard base64 with padding (S3's checksum headers).
fn base64(bytes: &[u8]) -> String {
    base64_simd::STANDARD.encode_to_string(bytes)
}
