//! init, snapshots, forget, stats, unlock.

use super::open::open_backend;
use crate::args::RepoArg;
use crate::filter::Filter;
use crate::ui;
use anyhow::{Context, Result};
use serde::Serialize;
use std::process::ExitCode;
use tessera_core::backend;
use tessera_core::container::format::is_recipe_container;
use tessera_core::lock;
use tessera_core::{Compression, Encryption, InitOptions, KdfParams, Repository, SealOptions};

pub fn init(
    repo: &RepoArg,
    opts: &InitOptions,
    layout: tessera_core::layout::LayoutKind,
    index: tessera_core::index::IndexKind,
    (encryption, compression, kdf): (Encryption, Compression, KdfParams),
    json: bool,
) -> Result<ExitCode> {
    let path = std::path::Path::new(&repo.repo);
    if path.exists() && !path.is_dir() {
        anyhow::bail!("{} exists and is not a directory", repo.repo);
    }
    let seal = SealOptions {
        compression,
        encryption: match encryption {
            Encryption::None => None,
            _ => Some((super::password::new_password(repo, None, true)?, kdf)),
        },
        cipher: encryption.cipher().unwrap_or_default(),
    };
    let password = seal.encryption.as_ref().map(|(p, _)| p.clone());
    let (backend, created_bucket) = backend::create_reporting(&repo.repo, is_recipe_container)?;
    if created_bucket {
        // Said on stderr also under --json: a bucket is billed and named
        // outside the repository, so its creation is never silent.
        let made = if let Ok(l) = backend::AzureLocation::parse(&repo.repo) {
            format!("container {}", l.container)
        } else if let Ok(l) = backend::GcsLocation::parse(&repo.repo) {
            format!("bucket {}", l.bucket)
        } else {
            let bucket = backend::S3Location::parse(&repo.repo).map(|l| l.bucket);
            format!("bucket {}", bucket.unwrap_or_default())
        };
        eprintln!("created {made}");
    }
    Repository::init_with_index(backend.clone(), opts, layout, &seal, index)?;
    let r = Repository::open_with(backend, &|| {
        password
            .clone()
            .ok_or_else(|| tessera_core::Error::Key("no password".into()))
    })?;
    if !encryption.is_encrypted() {
        eprintln!(
            "WARNING: the repository at {} is NOT encrypted: anyone who can read its files can read every backup",
            repo.repo
        );
    }
    if json {
        #[derive(serde::Serialize)]
        struct Created<'a> {
            #[serde(flatten)]
            config: &'a tessera_core::catalog::RepoConfig,
            encryption: Encryption,
            compression: Compression,
            /// `init` created the bucket (Azure: container) the repository is in.
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            created_bucket: bool,
        }
        ui::print_json(&Created {
            config: r.config(),
            encryption,
            compression,
            created_bucket,
        })?;
    } else if !ui::quiet() {
        let c = r.config();
        println!(
            "created repository {} at {}\n  fingerprints {}{}, chunker {}, containers {}{}\n  encryption {}, compression {}",
            &c.repo_id[..8],
            repo.repo,
            c.hash.name(),
            if encryption.is_encrypted() { " (keyed)" } else { "" },
            c.chunker.describe(),
            ui::bytes(c.container_size as u64),
            if c.trace { ", trace mode" } else { "" },
            encryption,
            compression
        );
        if !c.layout.is_containers() {
            println!("  layout {}", c.layout);
        }
        if !c.index.is_memory() {
            println!("  index {}", c.index);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `tessera arrange`: catch up arranging on the mfdedup layout.
pub fn arrange(repo: &RepoArg, max: Option<usize>, json: bool) -> Result<ExitCode> {
    let mut r = super::open::open_writer(repo, open_backend(repo)?, "tessera arrange")?;
    let reports = r.arrange(max.map(|m| m as u32))?;
    r.close()?;
    if json {
        ui::print_json(&reports)?;
        return Ok(ExitCode::SUCCESS);
    }
    if reports.is_empty() {
        println!("every chain is arranged");
    }
    for a in &reports {
        println!(
            "chain {}: arranged {} version(s): read {} of active categories, kept {}, archived {} into {} volume(s), {:.2} s ({:.1} MB/s)",
            a.chain,
            a.steps,
            ui::bytes(a.read_bytes),
            ui::bytes(a.kept_bytes),
            ui::bytes(a.archived_bytes),
            a.volumes_written,
            a.seconds,
            tessera_core::metrics::mb_per_s(a.read_bytes, a.seconds)
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn snapshots(repo: &RepoArg, filter: &Filter, json: bool) -> Result<ExitCode> {
    let r = super::open::open_repo(repo, open_backend(repo)?)?;
    let chosen = filter.select(r.backups());
    if json {
        ui::print_json(&chosen)?;
        return Ok(ExitCode::SUCCESS);
    }
    if chosen.is_empty() {
        println!("no backups");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:>5}  {:<19}  {:<12}  {:<6}  {:>10}  {:>10}  {:<12}  {:<12}  NAME",
        "ID", "TIME (UTC)", "HOST", "SOURCE", "SIZE", "NEW", "ROOT", "TAGS"
    );
    for b in chosen {
        println!(
            "{:>5}  {:<19}  {:<12}  {:<6}  {:>10}  {:>10}  {:<12}  {:<12}  {}",
            b.id,
            ui::time(b.time),
            b.meta.host,
            format!("{:?}", b.source).to_lowercase(),
            ui::bytes(b.logical_bytes),
            ui::bytes(b.new_bytes),
            &b.root[..12],
            b.meta.tags.join(","),
            b.name
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct ForgetReport {
    forgotten: Vec<tessera_core::catalog::BackupEntry>,
    remaining: usize,
}

pub fn forget(repo: &RepoArg, specs: &[String], json: bool) -> Result<ExitCode> {
    if !super::open::open_repo(repo, open_backend(repo)?)?
        .config()
        .layout
        .is_containers()
    {
        // MFDedup frees space at forget: report it as a dry run would.
        let how = super::gc::ForgetBy {
            policy: tessera_core::retention::RetentionPolicy::default(),
            group_by: Default::default(),
            filter: Default::default(),
            dry_run: false,
        };
        return super::gc::forget(repo, specs, how, json);
    }
    let mut r = super::open::open_writer_lazy(repo, open_backend(repo)?, "tessera forget")?;
    let mut ids = Vec::new();
    for s in specs {
        let id = r.resolve(s)?.id;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let forgotten = r.forget(&ids)?;
    let report = ForgetReport {
        forgotten,
        remaining: r.backups().len(),
    };
    r.close()?;
    if json {
        ui::print_json(&report)?;
    } else if !ui::quiet() {
        for b in &report.forgotten {
            println!(
                "forgot backup {} ({}, {})",
                b.id,
                b.name,
                ui::bytes(b.logical_bytes)
            );
        }
        println!(
            "{} backups remain; run garbage collection to reclaim space",
            report.remaining
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn stats(repo: &RepoArg, index: bool, json: bool) -> Result<ExitCode> {
    let r = super::open::open_repo(repo, open_backend(repo)?)?;
    if index {
        r.index()?;
    }
    let s = r.stats();
    if json {
        ui::print_json(&s)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "repository        {} (generation {})",
        s.location, s.generation
    );
    println!(
        "configuration     {} fingerprints, {}, {} containers{}",
        s.hash.name(),
        s.chunker,
        ui::bytes(s.container_size as u64),
        if s.trace { ", trace mode" } else { "" }
    );
    println!(
        "backups           {} ({} logical)",
        s.backups,
        ui::bytes(s.logical_bytes)
    );
    println!(
        "containers        {} data ({}), {} recipe ({}), {} on disk",
        s.data_containers,
        ui::bytes(s.stored_data_bytes),
        s.recipe_containers,
        ui::bytes(s.stored_recipe_bytes),
        ui::bytes(s.container_object_bytes)
    );
    println!(
        "dedup ratio       {:.2}x (retained logical / stored data)",
        s.dedup_ratio
    );
    println!(
        "chunks            {} data copies, {} recipe chunks stored",
        s.data_chunks, s.recipe_chunks
    );
    match &s.index {
        Some(i) => println!(
            "index             {} data + {} recipe entries in {} segments, {} in memory ({:.1} bytes/entry)",
            i.data_entries,
            i.recipe_entries,
            s.index_segments,
            ui::bytes(i.memory_bytes as u64),
            i.bytes_per_entry
        ),
        None => println!(
            "index             {} segments (not loaded; `stats --index` loads it)",
            s.index_segments
        ),
    }
    if !s.layout.is_containers() {
        println!("layout            {}", s.layout);
    }
    for c in &s.chains {
        println!(
            "chain {}: {} versions (newest {}, arranged {}{}), {} stored",
            c.name,
            c.versions,
            c.newest_version,
            c.arranged,
            if c.behind > 0 {
                format!(", {} behind", c.behind)
            } else {
                String::new()
            },
            ui::bytes(c.stored_bytes)
        );
        println!(
            "  active categories {} ({}), pending {}; NDF tables {} ({} fingerprints)",
            c.active_categories,
            ui::bytes(c.active_bytes),
            ui::bytes(c.pending_bytes),
            c.ndf_tables,
            c.ndf_fingerprints
        );
        let vols: Vec<String> = c
            .volumes
            .iter()
            .map(|(v, b, n)| format!("{v}:{}/{n}", ui::bytes(*b)))
            .collect();
        println!(
            "  volumes (version:size/categories) {}",
            if vols.is_empty() {
                "none".to_string()
            } else {
                vols.join(" ")
            }
        );
        println!(
            "  trend: the next backup should store about {} new (mean of the newest volumes)",
            ui::bytes(c.next_unique_estimate)
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct UnlockReport {
    removed: Option<lock::LockInfo>,
}

pub fn unlock(repo: &RepoArg, json: bool) -> Result<ExitCode> {
    let backend = open_backend(repo)?;
    let removed = lock::break_lock(&*backend).context("cannot remove the lock")?;
    if json {
        ui::print_json(&UnlockReport { removed })?;
    } else {
        match removed {
            Some(i) => println!(
                "removed the lock of {} (pid {} on {}, `{}`)",
                i.owner, i.pid, i.host, i.command
            ),
            None => println!("the repository was not locked"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
