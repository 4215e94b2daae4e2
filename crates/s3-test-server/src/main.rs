//! `ferry-s3-test-server ROOT [--host H] [--port P] [--access-key AK --secret-key SK]`
//!
//! Serves the buckets under `ROOT` (one directory each) with s3s-fs's S3 implementation and
//! prints `listening on HOST:PORT` once bound (`--port 0`, the default, picks a free port), so
//! tests and benchmarks can start it on an ephemeral port. Every accepted connection gets
//! TCP_NODELAY, as production S3 endpoints have, and object bytes move in one step (see
//! Cargo.toml for why both matter).

use std::io::Write;

use anyhow::{bail, Context};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;

mod store;

struct Args {
    root: String,
    host: String,
    port: u16,
    access_key: Option<String>,
    secret_key: Option<String>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = std::env::args().skip(1);
    let mut root = None;
    let mut out = Args {
        root: String::new(),
        host: "127.0.0.1".into(),
        port: 0,
        access_key: None,
        secret_key: None,
    };
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--host" => out.host = value("--host")?,
            "--port" => out.port = value("--port")?.parse().context("--port")?,
            "--access-key" => out.access_key = Some(value("--access-key")?),
            "--secret-key" => out.secret_key = Some(value("--secret-key")?),
            "-h" | "--help" => {
                println!("usage: ferry-s3-test-server ROOT [--host H] [--port P] [--access-key AK --secret-key SK]");
                std::process::exit(0);
            }
            other if other.starts_with('-') => bail!("unknown option {other}"),
            other => root = Some(other.to_string()),
        }
    }
    out.root = root.context("usage: ferry-s3-test-server ROOT [options]")?;
    if out.access_key.is_some() != out.secret_key.is_some() {
        bail!("give both --access-key and --secret-key, or neither");
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let store = store::FastStore::new(std::path::Path::new(&args.root))
        .with_context(|| format!("root directory {}", args.root))?;
    let mut builder = S3ServiceBuilder::new(store);
    if let (Some(ak), Some(sk)) = (args.access_key, args.secret_key) {
        builder.set_auth(SimpleAuth::from_single(ak, sk));
    }
    let service = builder.build();
    let listener = TcpListener::bind((args.host.as_str(), args.port))
        .await
        .with_context(|| format!("binding {}:{}", args.host, args.port))?;
    let addr = listener.local_addr()?;
    println!("listening on {addr}");
    std::io::stdout().flush()?;
    let http = ConnBuilder::new(TokioExecutor::new());
    loop {
        let (socket, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("accept: {e}");
                continue;
            }
        };
        if let Err(e) = socket.set_nodelay(true) {
            eprintln!("TCP_NODELAY: {e}");
        }
        let conn = http
            .serve_connection(TokioIo::new(socket), service.clone())
            .into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}
