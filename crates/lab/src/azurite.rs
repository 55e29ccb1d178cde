//! An Azurite server (Microsoft's Blob Storage emulator) the lab starts for
//! `[repo] backend = "azure"`: on 127.0.0.1, a free port, a workspace
//! under the work directory; killed and its data removed when the run ends.

use anyhow::{bail, Context, Result};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tessera_core::backend::{AzureOptions, AzureStore};

/// Azurite's development account and its published key.
const ACCOUNT: &str = "devstoreaccount1";
const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
pub const CONTAINER: &str = "tessera";

/// The endpoint of the server of the run in progress.
static ENDPOINT: Mutex<Option<String>> = Mutex::new(None);

pub struct LabAzurite {
    child: Child,
    data: PathBuf,
}

/// `$TESSERA_AZURITE`, `azurite-blob` on `PATH` or the copy `.ci/run`
/// installs under `~/.cache/tessera-ci/azurite`.
pub fn binary() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    std::env::var_os("TESSERA_AZURITE")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            std::env::var_os("PATH")
                .map(|p| {
                    std::env::split_paths(&p)
                        .map(|d| d.join("azurite-blob"))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        )
        .chain(
            home.iter()
                .map(|h| h.join(".cache/tessera-ci/azurite/node_modules/.bin/azurite-blob")),
        )
        .find(|p| p.is_file())
}

/// Options for the running server: its endpoint and the account key.
pub fn options() -> Result<AzureOptions> {
    let e = ENDPOINT.lock().unwrap().clone();
    let endpoint = e.context("no Azurite server is running for this lab run")?;
    Ok(AzureOptions {
        endpoint: Some(endpoint),
        access_key: Some(KEY.into()),
        ..AzureOptions::default()
    })
}

/// The location of a repository on the running server.
pub fn location(folder: &str) -> String {
    format!("azure:{ACCOUNT}/{CONTAINER}/{folder}")
}

impl LabAzurite {
    pub fn start(work: &Path) -> Result<LabAzurite> {
        let bin = binary().context(
            "backend = \"azure\" needs Azurite (npm install --prefix ~/.cache/tessera-ci/azurite azurite, or set TESSERA_AZURITE)",
        )?;
        let data = work.join("azurite-data");
        if data.exists() {
            std::fs::remove_dir_all(&data)
                .with_context(|| format!("cannot clear {}", data.display()))?;
        }
        std::fs::create_dir_all(&data)?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(&bin)
            .args(["--blobHost", "127.0.0.1", "--blobPort"])
            .arg(port.to_string())
            .arg("--location")
            .arg(&data)
            .args([
                "--silent",
                "--skipApiVersionCheck",
                "--loose",
                "--disableTelemetry",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let server = LabAzurite { child, data };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("Azurite did not start within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        *ENDPOINT.lock().unwrap() = Some(format!("http://127.0.0.1:{port}/{ACCOUNT}"));
        // The container every approach's repository is a folder of.
        AzureStore::open_creating(&location("probe"), options()?)
            .context("cannot create the lab's container on Azurite")?;
        Ok(server)
    }
}

impl Drop for LabAzurite {
    fn drop(&mut self) {
        *ENDPOINT.lock().unwrap() = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}
