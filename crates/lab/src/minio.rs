//! A MinIO server the lab starts for `[repo] backend = "s3"`: on
//! 127.0.0.1, a free port, a data directory under the work directory;
//! killed and its data removed when the run ends.

use anyhow::{bail, Context, Result};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tessera_core::backend::s3::S3Credentials;
use tessera_core::backend::{ObjectStore, S3Options, S3Store};

const USER: &str = "tessera-lab";
const SECRET: &str = "tessera-lab-secret";
pub const BUCKET: &str = "tessera";

/// The endpoint of the server of the run in progress.
static ENDPOINT: Mutex<Option<String>> = Mutex::new(None);

pub struct LabMinio {
    child: Child,
    data: PathBuf,
}

/// `$TESSERA_MINIO`, `minio` on `PATH`, `~/go/bin/minio` or
/// `~/.cache/tessera-ci/minio`.
pub fn binary() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    std::env::var_os("TESSERA_MINIO")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            std::env::var_os("PATH")
                .map(|p| {
                    std::env::split_paths(&p)
                        .map(|d| d.join("minio"))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        )
        .chain(home.iter().map(|h| h.join("go/bin/minio")))
        .chain(home.iter().map(|h| h.join(".cache/tessera-ci/minio")))
        .find(|p| p.is_file())
}

/// Options for the lab's server: its credentials, no metadata cache.
pub fn options() -> S3Options {
    S3Options {
        credentials: Some(S3Credentials {
            access_key_id: USER.into(),
            secret_access_key: SECRET.into(),
            session_token: None,
        }),
        region: Some("us-east-1".into()),
        ..S3Options::default()
    }
}

/// The location of a repository on the running server.
pub fn location(folder: &str) -> Result<String> {
    let e = ENDPOINT.lock().unwrap().clone();
    let e = e.context("no MinIO server is running for this lab run")?;
    Ok(format!("s3:{e}/{BUCKET}/{folder}"))
}

impl LabMinio {
    pub fn start(work: &Path) -> Result<LabMinio> {
        let bin = binary().context(
            "backend = \"s3\" needs MinIO (go install github.com/minio/minio@latest, or set TESSERA_MINIO)",
        )?;
        let data = work.join("minio-data");
        if data.exists() {
            std::fs::remove_dir_all(&data)
                .with_context(|| format!("cannot clear {}", data.display()))?;
        }
        // A top-level folder of a fresh single-drive server is a bucket.
        std::fs::create_dir_all(data.join(BUCKET))?;
        let port = free_port()?;
        let console = free_port()?;
        let child = Command::new(&bin)
            .args(["server", "--quiet", "--address"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--console-address")
            .arg(format!("127.0.0.1:{console}"))
            .arg(&data)
            .env("MINIO_ROOT_USER", USER)
            .env("MINIO_ROOT_PASSWORD", SECRET)
            .env("MINIO_BROWSER", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let server = LabMinio { child, data };
        let endpoint = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let up = TcpStream::connect(("127.0.0.1", port)).is_ok()
                && S3Store::open(&format!("s3:{endpoint}/{BUCKET}/probe"), options())
                    .is_ok_and(|s| s.list(tessera_core::backend::KeyKind::Manifest).is_ok());
            if up {
                break;
            }
            if Instant::now() > deadline {
                bail!("MinIO did not start within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        *ENDPOINT.lock().unwrap() = Some(endpoint);
        Ok(server)
    }
}

impl Drop for LabMinio {
    fn drop(&mut self) {
        *ENDPOINT.lock().unwrap() = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
