//! The Azure tests' harness: a real Azurite (Microsoft's Blob Storage
//! emulator) on 127.0.0.1, on a free port, with a temporary workspace,
//! started and stopped by the tests; its well-known development account.
//!
//! Azurite is found as `$TESSERA_AZURITE` (the `azurite-blob` script),
//! `azurite-blob` on `PATH` or `~/.cache/tessera-ci/azurite/node_modules/.bin/azurite-blob`
//! (`.ci/run` installs it there from npm). Without it the Azure tests say
//! so and pass, unless `TESSERA_REQUIRE_AZURITE=1` (set by `.ci/run`),
//! where they fail.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tessera_core::backend::{AzureOptions, AzureStore, TransferOptions};

use crate::s3_minio::free_port;

/// Azurite's development account and its published key.
pub const ACCOUNT: &str = "devstoreaccount1";
pub const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
pub const CONTAINER: &str = "tessera";

/// The `azurite-blob` script, or `None` (after saying why) when the tests
/// may skip.
pub fn azurite_binary() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let candidates = std::env::var_os("TESSERA_AZURITE")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::env::var_os("PATH").into_iter().flat_map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("azurite-blob"))
                .collect::<Vec<_>>()
        }))
        .chain(
            home.iter()
                .map(|h| h.join(".cache/tessera-ci/azurite/node_modules/.bin/azurite-blob")),
        );
    for c in candidates {
        if c.is_file() {
            return Some(c);
        }
    }
    if std::env::var("TESSERA_REQUIRE_AZURITE").as_deref() == Ok("1") {
        panic!(
            "TESSERA_REQUIRE_AZURITE=1 but no Azurite was found \
             (install: npm install --prefix ~/.cache/tessera-ci/azurite azurite)"
        );
    }
    eprintln!(
        "Azure test skipped: Azurite is not installed (set TESSERA_REQUIRE_AZURITE=1 to fail instead)"
    );
    None
}

/// An Azurite server; stopped (killed) on drop, its workspace removed.
pub struct Azurite {
    binary: PathBuf,
    data: tempfile::TempDir,
    pub port: u16,
    child: Mutex<Option<Child>>,
}

impl Azurite {
    /// Start a server with the container [`CONTAINER`], or `None` when
    /// Azurite is missing and may be.
    pub fn start() -> Option<Azurite> {
        let binary = azurite_binary()?;
        let data = tempfile::Builder::new()
            .prefix("tessera-azurite-")
            .tempdir()
            .unwrap();
        let a = Azurite {
            binary,
            data,
            port: free_port(),
            child: Mutex::new(None),
        };
        a.resume();
        let (_, created) = AzureStore::open_creating(&a.location("ready"), a.options()).unwrap();
        assert!(created, "a fresh server has no container");
        Some(a)
    }

    /// The blob service's URL (path style: the account is its first segment).
    pub fn endpoint(&self) -> String {
        endpoint(self.port)
    }

    /// A location in the container under a folder of its own.
    pub fn location(&self, prefix: &str) -> String {
        format!("azure:{ACCOUNT}/{CONTAINER}/{prefix}")
    }

    /// Options for this server: its endpoint, the account key, few and
    /// short retries (a stopped server fails a request within seconds).
    pub fn options(&self) -> AzureOptions {
        options(&self.endpoint())
    }

    /// The server's output, beside its workspace.
    pub fn log_path(&self) -> PathBuf {
        let name = self.data.path().file_name().unwrap().to_string_lossy();
        std::env::temp_dir().join(format!("{name}.log"))
    }

    /// Start (again) on the same port and workspace; wait until it answers.
    pub fn resume(&self) {
        let mut child = self.child.lock().unwrap();
        assert!(child.is_none(), "already running");
        let log = std::fs::File::create(self.log_path()).ok();
        let mut cmd = Command::new(&self.binary);
        cmd.args(["--blobHost", "127.0.0.1", "--blobPort"])
            .arg(self.port.to_string())
            .arg("--location")
            .arg(self.data.path())
            .args([
                "--silent",
                "--skipApiVersionCheck",
                "--loose",
                "--disableTelemetry",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        match log {
            Some(f) => cmd.stderr(f),
            None => cmd.stderr(Stdio::null()),
        };
        *child = Some(cmd.spawn().expect("start azurite"));
        drop(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "Azurite did not start in 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stop the server at once (SIGKILL, as a crash or a lost machine).
    pub fn stop(&self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(self.log_path());
    }
}

/// The path-style endpoint of an Azurite (or a proxy to one) on `port`.
pub fn endpoint(port: u16) -> String {
    format!("http://127.0.0.1:{port}/{ACCOUNT}")
}

/// Options for tests against `endpoint`.
pub fn options(endpoint: &str) -> AzureOptions {
    AzureOptions {
        transfer: TransferOptions {
            max_retries: 2,
            retry_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(2),
            ..TransferOptions::default()
        },
        endpoint: Some(endpoint.to_string()),
        access_key: Some(KEY.to_string()),
    }
}
