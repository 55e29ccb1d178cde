//! The GCS backend on a real fake-gcs-server (the Go module
//! `github.com/fsouza/fake-gcs-server`), started by the tests on
//! 127.0.0.1 with no credentials (it checks none).
//!
//! What that server serves is tested as it is: `init` creating a missing
//! bucket (JSON API), listings and probes (XML API), and the one-line
//! errors of a missing bucket and an unreachable server. It does not take
//! the XML-API object upload (`PUT /BUCKET/OBJECT` with
//! `x-goog-if-generation-match`) that `object_store`'s GCS client sends, so
//! the backend contract and a backup cycle run through [`UploadAdapter`]:
//! a proxy that turns each such upload into the JSON-API media upload the
//! server does take (`ifGenerationMatch` as a query parameter) and passes
//! every other request through unchanged.
//!
//! The server is `$TESSERA_FAKE_GCS`, `fake-gcs-server` on `PATH`,
//! `~/go/bin/fake-gcs-server` or `~/.cache/tessera-ci/fake-gcs-server`
//! (`.ci/run` installs it there). Without it the tests say so and pass,
//! unless `TESSERA_REQUIRE_FAKE_GCS=1` (set by `.ci/run`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_core::backend::contract::{check_contract, check_key_validation};
use tessera_core::check::CheckOptions;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::Repository;

use crate::common::{
    assert_one_line, backup, backup_forget_gc_check_restore, bytes, init_blake3, restore,
};
use tessera_core::backend::{
    GcsOptions, GcsStore, KeyKind, ObjectKey, ObjectStore, TransferOptions,
};

use crate::s3_minio::{folder, free_port};

fn binary() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let found = std::env::var_os("TESSERA_FAKE_GCS")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::env::var_os("PATH").into_iter().flat_map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("fake-gcs-server"))
                .collect::<Vec<_>>()
        }))
        .chain(home.iter().map(|h| h.join("go/bin/fake-gcs-server")))
        .chain(
            home.iter()
                .map(|h| h.join(".cache/tessera-ci/fake-gcs-server")),
        )
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var("TESSERA_REQUIRE_FAKE_GCS").as_deref() == Ok("1") {
            panic!(
                "TESSERA_REQUIRE_FAKE_GCS=1 but no fake-gcs-server was found \
                 (install: go install github.com/fsouza/fake-gcs-server@latest)"
            );
        }
        eprintln!("GCS test skipped: fake-gcs-server is not installed (set TESSERA_REQUIRE_FAKE_GCS=1 to fail instead)");
    }
    found
}

/// A fake-gcs-server, in memory or keeping its objects in a temporary
/// directory (so a restart finds them); killed on drop.
struct FakeGcs {
    bin: PathBuf,
    /// `memory` or `filesystem` (whose missing bucket is an `lstat` error,
    /// not the server's "no bucket named").
    backend: &'static str,
    root: tempfile::TempDir,
    port: u16,
    child: std::sync::Mutex<Option<Child>>,
}

impl FakeGcs {
    fn start() -> Option<FakeGcs> {
        Self::start_with("memory")
    }

    fn start_with(backend: &'static str) -> Option<FakeGcs> {
        let g = FakeGcs {
            bin: binary()?,
            backend,
            root: tempfile::Builder::new()
                .prefix("tessera-fake-gcs-")
                .tempdir()
                .unwrap(),
            port: free_port(),
            child: std::sync::Mutex::new(None),
        };
        g.resume();
        Some(g)
    }

    /// Start (again) on the same port and directory; wait until it listens.
    fn resume(&self) {
        let mut child = self.child.lock().unwrap();
        assert!(child.is_none(), "already running");
        let port = self.port;
        *child = Some(
            Command::new(&self.bin)
                .args([
                    "-scheme",
                    "http",
                    "-host",
                    "127.0.0.1",
                    "-backend",
                    self.backend,
                ])
                .arg("-filesystem-root")
                .arg(self.root.path())
                .args(["-log-level", "error", "-port"])
                .arg(port.to_string())
                .arg("-public-host")
                .arg(format!("127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start fake-gcs-server"),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "fake-gcs-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop the server at once (SIGKILL).
    fn stop(&self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn options(&self) -> GcsOptions {
        GcsOptions {
            transfer: TransferOptions {
                max_retries: 1,
                retry_timeout: Duration::from_secs(2),
                request_timeout: Duration::from_secs(20),
                connect_timeout: Duration::from_secs(2),
                ..TransferOptions::default()
            },
            endpoint: Some(self.endpoint()),
            anonymous: true,
            project: Some("tessera-test".into()),
            ..GcsOptions::default()
        }
    }
}

impl Drop for FakeGcs {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `init` creates the bucket and says so; the next opening finds it; a
/// listing of the new repository is empty.
#[test]
fn gcs_init_creates_a_missing_bucket() {
    let Some(g) = FakeGcs::start() else { return };
    let loc = format!("gs:made-by-init/{}", folder("repo"));
    let e = GcsStore::open(&loc, g.options()).unwrap_err();
    assert_one_line(&e, &["bucket 'made-by-init' does not exist"]);
    let (store, created) = GcsStore::open_creating(&loc, g.options()).unwrap();
    assert!(created, "the bucket was missing");
    assert!(store.list(KeyKind::Manifest).unwrap().is_empty());
    assert!(matches!(
        store.get(&ObjectKey::Config),
        Err(tessera_core::Error::MissingObject(_))
    ));
    let (again, created) = GcsStore::open_creating(&loc, g.options()).unwrap();
    assert!(!created, "it exists now");
    assert!(again.list(KeyKind::IndexSegment).unwrap().is_empty());
}

#[test]
fn gcs_unreachable_server_and_bad_locations_are_one_line_errors() {
    let Some(g) = FakeGcs::start() else { return };
    let options = g.options();
    drop(g);
    let e = GcsStore::open("gs:gone/x", options).unwrap_err();
    assert_one_line(&e, &["cannot reach"]);
    let e = tessera_core::backend::open("gs:Not_A_Bucket/x", |_, _| false)
        .err()
        .unwrap();
    assert_one_line(&e, &["bad GCS location"]);
}

/// The backend contract where the server takes the client's uploads;
/// where it does not (fake-gcs-server 1.x), the upload fails in one line
/// and the test says what it could not run.
#[test]
fn gcs_backend_contract_where_the_server_takes_uploads() {
    let Some(g) = FakeGcs::start() else { return };
    let loc = format!("gs:contract/{}", folder("c"));
    let (store, _) = GcsStore::open_creating(&loc, g.options()).unwrap();
    match store.put_if_absent(&ObjectKey::IndexSegment(1), b"probe") {
        Ok(true) => {
            store.delete(&ObjectKey::IndexSegment(1)).unwrap();
            check_contract(&store);
        }
        Ok(false) => panic!("a fresh repository already had the object"),
        Err(e) => {
            assert_one_line(&e, &["GCS PUT (if absent)", &g.endpoint()]);
            eprintln!(
                "GCS contract not run: this fake-gcs-server does not take XML-API uploads ({e})"
            );
        }
    }
}

/// A proxy to a fake-gcs-server that turns the XML-API upload into the
/// JSON-API media upload (one request per connection); runs until the
/// test process ends.
struct UploadAdapter {
    port: u16,
}

impl UploadAdapter {
    fn start(server: u16) -> UploadAdapter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = adapt(client, server);
                });
            }
        });
        UploadAdapter { port }
    }

    fn options(&self, g: &FakeGcs) -> GcsOptions {
        GcsOptions {
            endpoint: Some(format!("http://127.0.0.1:{}", self.port)),
            ..g.options()
        }
    }
}

/// One request: read it, rewrite an upload, send it with the server's
/// own host name and `Connection: close`, relay the answer (an upload's
/// with the `ETag` the client wants to see).
fn adapt(mut client: TcpStream, server: u16) -> std::io::Result<()> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let head_end = loop {
        let n = client.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        raw.extend_from_slice(&buf[..n]);
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request = lines.next().unwrap_or_default().to_string();
    let mut headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = raw[head_end..].to_vec();
    while body.len() < len {
        let n = client.read(&mut buf)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    let mut parts = request.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let upload = method == "PUT" && !target.contains('?');
    let request = if upload {
        let (bucket, object) = target
            .trim_start_matches('/')
            .split_once('/')
            .unwrap_or_default();
        let mut t = format!("/upload/storage/v1/b/{bucket}/o?uploadType=media&name={object}");
        if let Some((_, g)) = headers
            .iter()
            .find(|(k, _)| k == "x-goog-if-generation-match")
        {
            t.push_str(&format!("&ifGenerationMatch={g}"));
        }
        format!("POST {t} HTTP/1.1")
    } else {
        request
    };
    headers.retain(|(k, _)| k != "host" && k != "connection");
    let mut out = format!("{request}\r\nhost: 127.0.0.1:{server}\r\nconnection: close\r\n");
    for (k, v) in &headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut upstream = TcpStream::connect(("127.0.0.1", server))?;
    upstream.write_all(out.as_bytes())?;
    upstream.write_all(&body)?;
    let mut answer = Vec::new();
    upstream.read_to_end(&mut answer)?;
    if upload && answer.starts_with(b"HTTP/1.1 2") {
        if let Some(i) = answer.windows(2).position(|w| w == b"\r\n") {
            answer.splice(i + 2..i + 2, b"ETag: \"adapter\"\r\n".iter().copied());
        }
    }
    client.write_all(&answer)?;
    client.shutdown(std::net::Shutdown::Both)
}

/// The backend contract, through the upload adapter.
#[test]
fn gcs_backend_contract_through_the_upload_adapter() {
    let Some(g) = FakeGcs::start() else { return };
    let adapter = UploadAdapter::start(g.port);
    let options = adapter.options(&g);
    let (store, _) = GcsStore::open_creating(
        &format!("gs:contract-adapter/{}", folder("c")),
        options.clone(),
    )
    .unwrap();
    store.check_conditional_writes().unwrap();
    check_contract(&store);
    check_key_validation(
        &GcsStore::open(&format!("gs:contract-adapter/{}", folder("k")), options).unwrap(),
    );
}

/// Backups, a forget, a GC, `check --read-data` and a restore on GCS,
/// through the upload adapter.
#[test]
fn gcs_backup_forget_gc_check_restore() {
    let Some(g) = FakeGcs::start() else { return };
    let adapter = UploadAdapter::start(g.port);
    let (store, created) =
        GcsStore::open_creating(&format!("gs:cycle/{}", folder("r")), adapter.options(&g)).unwrap();
    assert!(created);
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    backup_forget_gc_check_restore(store);
}

/// The server SIGKILLed at the 3rd upload of a backup: a one-line error,
/// the committed backup intact after a restart, the same writer going on.
#[test]
fn gcs_server_killed_mid_backup() {
    use crate::s3_minio::{Op, Trigger};
    let Some(g) = FakeGcs::start_with("filesystem") else {
        return;
    };
    let g = Arc::new(g);
    let adapter = UploadAdapter::start(g.port);
    let options = adapter.options(&g);
    let loc = format!("gs:killed/{}", folder("r"));
    // This backend's buckets are its root's folders (a missing one is an
    // `lstat` error there, not "no bucket named").
    std::fs::create_dir_all(g.root.path().join("killed")).unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(GcsStore::open(&loc, options.clone()).unwrap());
    init_blake3(
        store.clone(),
        ChunkerConfig::Fastcdc {
            min: 1024,
            avg: 4096,
            max: 16384,
        },
        64 * 1024,
        false,
    );
    let v1 = bytes(11, 600_000);
    let mut w = Repository::open_writer(store.clone(), "test").unwrap();
    let id1 = backup(&mut w, "s", &v1).unwrap();
    w.close().unwrap();

    let stopper = g.clone();
    let trig = Arc::new(
        Trigger::new(
            GcsStore::open(&loc, options.clone()).unwrap(),
            3,
            |op| matches!(op, Op::Put),
            Box::new(move || stopper.stop()),
        )
        .disarmed(),
    );
    let mut w = Repository::open_writer(trig.clone(), "test").unwrap();
    trig.arm();
    let v2 = bytes(12, 900_000);
    let e = backup(&mut w, "s", &v2).unwrap_err();
    assert!(trig.fired());
    assert_one_line(&e, &["GCS"]);
    g.resume();
    let id2 = backup(&mut w, "s", &v2).unwrap();
    w.close().unwrap();
    let r = Repository::open(Arc::new(GcsStore::open(&loc, options).unwrap())).unwrap();
    assert_eq!(restore(&r, id1).unwrap(), v1);
    assert_eq!(restore(&r, id2).unwrap(), v2);
    let c = r.check(&CheckOptions::default()).unwrap();
    assert!(c.ok(), "{:?}", c.problems);
}
