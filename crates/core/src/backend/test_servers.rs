//! Real servers for the SFTP and rclone tests, started by the tests: a
//! local OpenSSH `sshd` on 127.0.0.1 (an unprivileged port, a generated
//! host key and user key in a temporary directory) and an rclone
//! configuration with a local remote. A test tool, behind the `testing`
//! feature, shared by the core and CLI tests.
//!
//! A missing `sshd`, `ssh-keygen` or `rclone` makes [`Sshd::start`] and
//! [`RcloneRemote::new`] say so and return `None` (the test passes
//! without running), unless `TESSERA_REQUIRE_SSHD=1` /
//! `TESSERA_REQUIRE_RCLONE=1` or `CI=true`, where they panic: no test
//! skips silently in CI.

use super::cloud::TransferOptions;
use super::sftp::{SftpLocation, Transport};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Whether a missing server must fail the test.
fn required(var: &str) -> bool {
    std::env::var(var).as_deref() == Ok("1") || std::env::var("CI").as_deref() == Ok("true")
}

/// `name` on `PATH` or in the system directories it may be installed to.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Skip (`None`) or fail for a missing program.
fn missing<T>(what: &str, var: &str, install: &str) -> Option<T> {
    if required(var) {
        panic!("{var}=1 (or CI=true) but {what} is not installed ({install})");
    }
    eprintln!("test skipped: {what} is not installed ({install}; set {var}=1 to fail instead)");
    None
}

/// Short retries, so a stopped server fails a request within seconds.
pub fn quick_transfer() -> TransferOptions {
    TransferOptions {
        max_retries: 3,
        retry_timeout: Duration::from_secs(3),
        connect_timeout: Duration::from_secs(10),
        ..TransferOptions::default()
    }
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn keygen(keygen: &Path, file: &Path) {
    let ok = Command::new(keygen)
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "tessera-test", "-f"])
        .arg(file)
        .stdin(Stdio::null())
        .status()
        .expect("run ssh-keygen")
        .success();
    assert!(ok, "ssh-keygen failed");
}

/// An OpenSSH server on 127.0.0.1 that lets the current user in with a
/// generated key; killed (with its sessions) on drop.
pub struct Sshd {
    sshd: PathBuf,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub user: String,
    child: Mutex<Option<Child>>,
}

impl Sshd {
    /// Start a server, or `None` if OpenSSH is missing and may be.
    pub fn start() -> Option<Sshd> {
        let install = "apt-get install -y openssh-server";
        let Some(sshd) = find_program("sshd") else {
            return missing("sshd", "TESSERA_REQUIRE_SSHD", install);
        };
        let Some(kg) = find_program("ssh-keygen") else {
            return missing("ssh-keygen", "TESSERA_REQUIRE_SSHD", install);
        };
        if find_program("ssh").is_none() {
            return missing(
                "ssh",
                "TESSERA_REQUIRE_SSHD",
                "apt-get install -y openssh-client",
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("tessera-sshd-")
            .tempdir()
            .expect("a temporary directory");
        let d = dir.path();
        keygen(&kg, &d.join("host_key"));
        keygen(&kg, &d.join("user_key"));
        keygen(&kg, &d.join("stranger_key"));
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).expect("copy key");
        let port = free_port();
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let user = Command::new("id")
            .arg("-un")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| std::env::var("USER").unwrap_or_else(|_| "root".into()));
        if uid == 0 {
            // sshd running as root wants its privilege separation directory.
            let _ = std::fs::create_dir_all("/run/sshd");
        }
        let sftp_server = ["/usr/lib/openssh/sftp-server", "/usr/libexec/sftp-server"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .unwrap_or("internal-sftp");
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nPubkeyAuthentication yes\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
             StrictModes no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n\
             Subsystem sftp {sftp_server}\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config).expect("write sshd_config");
        let host_pub = std::fs::read_to_string(d.join("host_key.pub")).expect("host key");
        let host_pub: Vec<&str> = host_pub.split_whitespace().take(2).collect();
        std::fs::write(
            d.join("known_hosts"),
            format!("[127.0.0.1]:{port} {}\n", host_pub.join(" ")),
        )
        .expect("write known_hosts");
        for (name, key) in [
            ("ssh_config", "user_key"),
            ("stranger_config", "stranger_key"),
        ] {
            let c = format!(
                "Host *\n  IdentityFile {d}/{key}\n  IdentitiesOnly yes\n  IdentityAgent none\n\
                 UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n  BatchMode yes\n\
                 ConnectTimeout 10\n",
                d = d.display()
            );
            std::fs::write(d.join(name), c).expect("write ssh_config");
        }
        let s = Sshd {
            sshd,
            dir,
            port,
            user,
            child: Mutex::new(None),
        };
        s.resume();
        Some(s)
    }

    /// Start (again) on the same port and keys; wait until it listens.
    pub fn resume(&self) {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        assert!(child.is_none(), "already running");
        let log = std::fs::File::create(self.dir.path().join("sshd.log")).ok();
        let mut cmd = Command::new(&self.sshd);
        cmd.arg("-D")
            .arg("-f")
            .arg(self.dir.path().join("sshd_config"))
            .arg("-E")
            .arg(self.dir.path().join("sshd.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        match log {
            Some(f) => cmd.stderr(f),
            None => cmd.stderr(Stdio::null()),
        };
        *child = Some(cmd.spawn().expect("start sshd"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(Ok(Some(st))) = child.as_mut().map(Child::try_wait) {
                let log =
                    std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default();
                panic!("sshd exited ({st}): {log}");
            }
            assert!(Instant::now() < deadline, "sshd did not start in 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kill the server and every session it forked (SIGKILL: a crash).
    pub fn stop(&self) {
        if let Some(mut c) = self.child.lock().unwrap_or_else(|p| p.into_inner()).take() {
            kill_tree(c.id());
            let _ = c.wait();
        }
    }

    /// The location of `path` under the temporary directory.
    pub fn location(&self, path: &str) -> String {
        format!(
            "sftp:{}@127.0.0.1:{}{}/{path}",
            self.user,
            self.port,
            self.dir.path().display()
        )
    }

    /// Arguments for `ssh` that use the generated key and host key
    /// (`TESSERA_SSH_ARGS` for a `tessera` process).
    pub fn ssh_args(&self) -> String {
        format!("-F {}", self.dir.path().join("ssh_config").display())
    }

    /// The transport to `location` with the generated key, or with a key
    /// the server does not know (`stranger`).
    pub fn transport(&self, location: &str, stranger: bool) -> (Transport, String) {
        let loc = SftpLocation::parse(location).expect("an sftp location");
        let mut t = loc.transport();
        let config = if stranger {
            "stranger_config"
        } else {
            "ssh_config"
        };
        t.args.splice(
            0..0,
            [
                "-F".to_string(),
                self.dir.path().join(config).display().to_string(),
            ],
        );
        (t, loc.path)
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Kill `pid` and its descendants (found through `/proc`), children first
/// found, then all at once with SIGKILL. Only processes a test started.
pub fn kill_tree(pid: u32) {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        all.extend(children_of(all[i]));
        i += 1;
    }
    for p in all {
        // SAFETY: signalling a process this test started (or its child).
        unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
    }
}

/// Direct children of `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    // The field after the parenthesised name is the state,
                    // then the parent's id.
                    let rest = &s[s.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// An rclone configuration with one local remote, `tessera-local`, in a
/// temporary directory that also holds the remote's data.
pub struct RcloneRemote {
    pub rclone: PathBuf,
    pub dir: tempfile::TempDir,
}

impl RcloneRemote {
    /// A configuration, or `None` if rclone is missing and may be.
    pub fn new() -> Option<RcloneRemote> {
        let Some(rclone) = find_program("rclone") else {
            return missing(
                "rclone",
                "TESSERA_REQUIRE_RCLONE",
                "apt-get install -y rclone",
            );
        };
        let dir = tempfile::Builder::new()
            .prefix("tessera-rclone-")
            .tempdir()
            .expect("a temporary directory");
        std::fs::write(
            dir.path().join("rclone.conf"),
            "[tessera-local]\ntype = local\n",
        )
        .expect("write rclone.conf");
        Some(RcloneRemote { rclone, dir })
    }

    /// `rclone:tessera-local:DIR/path`, in the temporary directory.
    pub fn location(&self, path: &str) -> String {
        format!("rclone:tessera-local:{}/{path}", self.dir.path().display())
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("rclone.conf")
    }

    /// Arguments for rclone (`TESSERA_RCLONE_ARGS` for a `tessera` process).
    pub fn rclone_args(&self) -> String {
        format!("--config {}", self.config().display())
    }

    /// The transport to a location, with this configuration.
    pub fn transport(&self, location: &str) -> Transport {
        let remote = super::rclone::remote(location).expect("an rclone location");
        let mut t = super::rclone::transport(remote);
        t.program = self.rclone.display().to_string();
        t.args.splice(
            0..0,
            ["--config".to_string(), self.config().display().to_string()],
        );
        t
    }
}
