//! Passwords and key slots: where a password comes from, opening an
//! encrypted repository, and `tessera key add|list|remove|passwd`.
//!
//! A password is taken from, in order: `--password-file`,
//! `--password-command`, `TESSERA_PASSWORD`, or a prompt when standard
//! input is a terminal. It is asked for only when the repository turns
//! out to be encrypted, and never printed.

use super::open_backend;
use crate::args::{KeyCommand, RepoArg};
use crate::ui;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use tessera_core::backend::ObjectStore;
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

/// Open for reading, asking for the password only if needed.
pub fn open(repo: &RepoArg, backend: Arc<dyn ObjectStore>) -> Result<Repository> {
    // A reader lock: a GC in another process waits for it before deleting
    // containers this command may read.
    let mut r = Repository::open_reader_with(backend, "tessera (reading)", &|| {
        password(repo).map_err(|e| tessera_core::Error::Key(ui::one_line(&e)))
    })?;
    r.set_threads(repo.threads);
    Ok(r)
}

/// Open for writing, asking for the password only if needed.
pub fn open_writer(repo: &RepoArg, backend: Arc<dyn ObjectStore>, command: &str) -> Result<Writer> {
    let mut w = Repository::open_writer_with(backend, command, &|| {
        password(repo).map_err(|e| tessera_core::Error::Key(ui::one_line(&e)))
    })?;
    w.set_threads(repo.threads);
    Ok(w)
}

#[derive(Serialize)]
struct SlotRow {
    id: u64,
    current: bool,
    created: u64,
    user: String,
    host: String,
    kdf: String,
    m_kib: u32,
    t: u32,
    p: u32,
}

pub fn run(repo: &RepoArg, command: KeyCommand, json: bool) -> Result<ExitCode> {
    let backend = open_backend(repo)?;
    match command {
        KeyCommand::List => {
            let r = open(repo, backend)?;
            if !r.seal_config().encryption.is_encrypted() {
                bail!("the repository is not encrypted: it has no keys");
            }
            let rows: Vec<SlotRow> = r
                .key_slots()?
                .into_iter()
                .map(|s| SlotRow {
                    current: r.key_slot_used() == Some(s.id),
                    id: s.id,
                    created: s.created,
                    user: s.user,
                    host: s.host,
                    kdf: s.kdf,
                    m_kib: s.params.m_kib,
                    t: s.params.t,
                    p: s.params.p,
                })
                .collect();
            if json {
                ui::print_json(&rows)?;
            } else {
                println!(
                    " {:>4}  {:<19}  {:<24}  KDF",
                    "ID", "CREATED (UTC)", "USER@HOST"
                );
                for s in rows {
                    println!(
                        "{}{:>4}  {:<19}  {:<24}  {} m={}KiB t={} p={}",
                        if s.current { "*" } else { " " },
                        s.id,
                        ui::time(s.created),
                        format!("{}@{}", s.user, s.host),
                        s.kdf,
                        s.m_kib,
                        s.t,
                        s.p
                    );
                }
            }
        }
        KeyCommand::Add {
            new_password_file,
            kdf,
        } => {
            let mut w = open_writer(repo, backend, "tessera key add")?;
            let p = new_password(repo, new_password_file.as_deref(), false)?;
            let id = w.add_key(&p, kdf)?;
            w.close()?;
            report(json, "added", id)?;
        }
        KeyCommand::Remove { id } => {
            let mut w = open_writer(repo, backend, "tessera key remove")?;
            w.remove_key(id)?;
            w.close()?;
            report(json, "removed", id)?;
        }
        KeyCommand::Passwd {
            new_password_file,
            kdf,
        } => {
            let mut w = open_writer(repo, backend, "tessera key passwd")?;
            let p = new_password(repo, new_password_file.as_deref(), false)?;
            let id = w.change_password(&p, kdf)?;
            w.close()?;
            report(json, "replaced the password's key slot by", id)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn report(json: bool, what: &str, id: u64) -> Result<()> {
    if json {
        #[derive(Serialize)]
        struct Done<'a> {
            action: &'a str,
            key_slot: u64,
        }
        ui::print_json(&Done {
            action: what,
            key_slot: id,
        })
    } else {
        println!("{what} key slot {id}");
        Ok(())
    }
}
