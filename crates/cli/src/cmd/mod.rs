//! One function per command; each returns its exit status.

mod backup;
mod bench;
mod check;
mod gc;
mod lab;
mod manage;
mod restore;

use crate::args::{Cli, Command, RepoArg};
use anyhow::Result;
use std::process::ExitCode;
use std::sync::Arc;
use tessera_core::backend::{self, CountingStore, ObjectStore};
use tessera_core::check::ReadData;

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Init {
            repo,
            hash,
            chunker,
            container_size,
            trace,
            json,
        } => {
            let opts = tessera_core::InitOptions {
                hash,
                chunker,
                container_size,
                trace,
            };
            manage::init(&repo, &opts, json.json)
        }
        Command::Backup {
            repo,
            path,
            stdin_name,
            trace_file,
            rewrite,
            segment_size,
            json,
        } => backup::backup(
            &repo,
            path,
            stdin_name,
            trace_file,
            (rewrite, segment_size),
            json.json,
        ),
        Command::Snapshots { repo, json } => manage::snapshots(&repo, json.json),
        Command::Ls {
            repo,
            snapshot,
            long,
            json,
        } => restore::ls(&repo, &snapshot, long, json.json),
        Command::Restore {
            repo,
            snapshot,
            target,
            stdout,
            cache,
            skip_damaged,
            include,
            json,
        } => {
            if skip_damaged {
                restore::restore_damaged(&repo, &snapshot, target, stdout, json.json)
            } else {
                let to = restore::To { target, stdout };
                restore::restore(&repo, &snapshot, to, &include, cache, json.json)
            }
        }
        Command::Forget {
            repo,
            snapshots,
            keep_last,
            keep_daily,
            keep_weekly,
            keep_monthly,
            dry_run,
            json,
        } => {
            let policy = tessera_core::retention::RetentionPolicy {
                keep_last,
                keep_daily,
                keep_weekly,
                keep_monthly,
            };
            if policy.is_empty() && !dry_run && !snapshots.is_empty() {
                manage::forget(&repo, &snapshots, json.json)
            } else {
                gc::forget(&repo, &snapshots, policy, dry_run, json.json)
            }
        }
        Command::Gc { repo, args, json } => gc::gc(&repo, &args, json.json),
        Command::Stats { repo, json } => manage::stats(&repo, json.json),
        Command::Unlock { repo, json } => manage::unlock(&repo, json.json),
        Command::Check {
            repo,
            read_data,
            read_data_subset,
            repair_leftovers,
            rebuild_refgraph,
            fgc_granularity,
            json,
        } => {
            if rebuild_refgraph {
                check::rebuild_refgraph(&repo, fgc_granularity.map_or(0, |g| g.0), json.json)?;
            }
            let read_data = match (read_data, read_data_subset) {
                (_, Some(subset)) => subset,
                (true, None) => ReadData::All,
                (false, None) => ReadData::None,
            };
            check::check(&repo, read_data, repair_leftovers, json.json)
        }
        Command::Lab { command } => lab::run(command),
    }
}

/// A repository's store, counted so `--json` reports can say what a
/// command cost in backend requests and bytes.
pub type Counted = Arc<CountingStore<Arc<dyn ObjectStore>>>;

/// The store of an existing repository.
pub fn open_backend(repo: &RepoArg) -> Result<Counted> {
    Ok(Arc::new(CountingStore::new(backend::open(&repo.repo)?)))
}
