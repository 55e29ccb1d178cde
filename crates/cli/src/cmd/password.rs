//! Passwords: where a password comes from, and opening a repository that
//! may be encrypted (asking only if it is).
//!
//! A password is taken from, in order: `--password-file`,
//! `--password-command`, `TESSERA_PASSWORD`, or a prompt when standard
//! input is a terminal. It is asked for only when the repository turns
//! out to be encrypted, and never printed.

use crate::args::RepoArg;
use crate::ui;
use anyhow::{bail, Context, Result};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use tessera_core::backend::ObjectStore;
use tessera_core::repo::IndexLoad;
use tessera_core::{Password, Repository, Writer};

/// The first line of a file (trailing newline removed).
fn first_line(bytes: Vec<u8>) -> Password {
    let mut b = bytes;
    if let Some(n) = b.iter().position(|&c| c == b'\n') {
        b.truncate(n);
    }
    if b.last() == Some(&b'\r') {
        b.pop();
    }
    Password::new(b)
}

fn from_file(path: &Path) -> Result<Password> {
    let b = std::fs::read(path)
        .with_context(|| format!("cannot read the password file {}", path.display()))?;
    Ok(first_line(b))
}

fn from_command(cmd: &str) -> Result<Password> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot run the password command")?;
    if !out.status.success() {
        bail!("the password command failed ({})", out.status);
    }
    Ok(first_line(out.stdout))
}

fn prompt(text: &str) -> Result<Password> {
    let p = rpassword::prompt_password(text).context("cannot read a password from the terminal")?;
    Ok(Password::new(p.into_bytes()))
}

/// The password of the repository, from the first source given.
pub fn password(repo: &RepoArg) -> Result<Password> {
    if let Some(f) = &repo.password_file {
        return from_file(f);
    }
    if let Some(c) = &repo.password_command {
        return from_command(c);
    }
    if let Some(p) = std::env::var_os("TESSERA_PASSWORD") {
        return Ok(Password::new(p.into_encoded_bytes()));
    }
    if std::io::stdin().is_terminal() {
        return prompt(&format!("password for {}: ", repo.repo));
    }
    bail!("the repository is encrypted and no password was given: set TESSERA_PASSWORD, or use --password-file or --password-command")
}

/// A new password (init, key add, key passwd): from `file`, or the
/// repository's password sources (init), or typed twice on a terminal.
pub fn new_password(repo: &RepoArg, file: Option<&Path>, for_init: bool) -> Result<Password> {
    if let Some(f) = file {
        return from_file(f);
    }
    if for_init
        && (repo.password_file.is_some()
            || repo.password_command.is_some()
            || std::env::var_os("TESSERA_PASSWORD").is_some())
    {
        return password(repo);
    }
    if !for_init {
        if let Some(p) = std::env::var_os("TESSERA_NEW_PASSWORD") {
            return Ok(Password::new(p.into_encoded_bytes()));
        }
    }
    if !std::io::stdin().is_terminal() {
        bail!(if for_init {
            "an encrypted repository needs a password: set TESSERA_PASSWORD, use --password-file or --password-command, or --encryption none"
        } else {
            "give the new password with --new-password-file or TESSERA_NEW_PASSWORD"
        });
    }
    let a = prompt("new password: ")?;
    let b = prompt("new password again: ")?;
    if a.bytes() != b.bytes() {
        bail!("the two passwords differ");
    }
    if a.bytes().is_empty() {
        bail!("refusing an empty password");
    }
    Ok(a)
}

/// Open for reading, asking for the password only if needed. The
/// fingerprint index is loaded on first use: listing snapshots or
/// statistics never reads it, and a restore or listing loads it at its
/// first recipe read.
pub fn open(repo: &RepoArg, backend: Arc<dyn ObjectStore>) -> Result<Repository> {
    // A reader lock: a GC in another process waits for it before deleting
    // containers this command may read.
    let mut r = Repository::open_reader_loading(
        backend,
        "tessera (reading)",
        &|| password(repo).map_err(|e| tessera_core::Error::Key(ui::one_line(&e))),
        IndexLoad::Lazy,
    )?;
    r.set_threads(repo.threads);
    Ok(r)
}

/// Open for writing, asking for the password only if needed; the
/// fingerprint index is loaded as `load` says.
pub fn open_writer(
    repo: &RepoArg,
    backend: Arc<dyn ObjectStore>,
    command: &str,
    load: IndexLoad,
) -> Result<Writer> {
    let mut w = Repository::open_writer_loading(
        backend,
        command,
        &|| password(repo).map_err(|e| tessera_core::Error::Key(ui::one_line(&e))),
        load,
    )?;
    w.set_threads(repo.threads);
    Ok(w)
}

/// [`open_writer`] that removes every object no manifest lists if it opens
/// alone (`check --repair-leftovers`), whatever the sweep marker says.
pub fn open_writer_sweeping(
    repo: &RepoArg,
    backend: Arc<dyn ObjectStore>,
    command: &str,
) -> Result<Writer> {
    Ok(Repository::open_writer_sweeping(backend, command, &|| {
        password(repo).map_err(|e| tessera_core::Error::Key(ui::one_line(&e)))
    })?)
}
