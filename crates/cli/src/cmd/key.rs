//! `tessera key add|list|remove|passwd`: the key slots of an encrypted
//! repository (passwords come from `password.rs`).

use super::open::open_backend;
use super::password::{new_password, open, open_writer};
use crate::args::{KeyCommand, RepoArg};
use crate::ui;
use anyhow::{bail, Result};
use serde::Serialize;
use std::process::ExitCode;
use tessera_core::repo::IndexLoad;

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
            let mut w = open_writer(repo, backend, "tessera key add", IndexLoad::Lazy)?;
            let p = new_password(repo, new_password_file.as_deref(), false)?;
            let id = w.add_key(&p, kdf)?;
            w.close()?;
            report(json, "added", id)?;
        }
        KeyCommand::Remove { id } => {
            let mut w = open_writer(repo, backend, "tessera key remove", IndexLoad::Lazy)?;
            w.remove_key(id)?;
            w.close()?;
            report(json, "removed", id)?;
        }
        KeyCommand::Passwd {
            new_password_file,
            kdf,
        } => {
            let mut w = open_writer(repo, backend, "tessera key passwd", IndexLoad::Lazy)?;
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
