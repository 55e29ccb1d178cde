//! One function per command; each returns its exit status.

mod backup;
mod bench;
mod check;
mod gc;
mod inspect;
mod key;
mod lab;
mod manage;
mod mount;
mod open;
mod password;
mod restore;

use crate::args::{Cli, Command};
use crate::filter::Filter;
use anyhow::Result;
use std::process::ExitCode;
use tessera_core::check::ReadData;

pub fn run(cli: Cli) -> Result<ExitCode> {
    crate::ui::set_verbosity(cli.quiet, cli.verbose);
    match cli.command {
        Command::Init {
            repo,
            hash,
            chunker,
            container_size,
            frame_size,
            trace,
            encryption,
            compression,
            kdf,
            layout,
            index,
            json,
        } => {
            let opts = tessera_core::InitOptions {
                hash,
                chunker,
                container_size,
                frame_size,
                trace,
            };
            manage::init(
                &repo,
                &opts,
                layout,
                index,
                (encryption, compression, kdf),
                json.json,
            )
        }
        Command::Backup {
            repo,
            stdin_name,
            json,
            clone: Some(spec),
            ..
        } => backup::clone(&repo, &spec, stdin_name.as_deref(), json.json),
        Command::Backup {
            repo,
            paths,
            stdin_name,
            trace_file,
            rewrite,
            rewrite_segment,
            select,
            record,
            source,
            no_arrange,
            force_read,
            compression,
            json,
            clone: None,
        } => backup::backup(
            &repo,
            backup::Source {
                paths,
                stdin_name,
                trace_file,
            },
            (rewrite, rewrite_segment, compression),
            &select,
            &record,
            (source, !no_arrange),
            force_read,
            json.json,
        ),
        Command::Arrange { repo, max, json } => manage::arrange(&repo, max, json.json),
        Command::Snapshots { repo, filter, json } => {
            manage::snapshots(&repo, &Filter::new(&filter), json.json)
        }
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
            memory,
            skip_damaged,
            include,
            filter,
            json,
        } => {
            let filter = Filter::new(&filter);
            if skip_damaged {
                restore::restore_damaged(&repo, &snapshot, &filter, target, stdout, json.json)
            } else {
                let to = restore::To { target, stdout };
                let opts = tessera_core::RestoreOptions { cache, memory };
                restore::restore(&repo, &snapshot, &filter, to, &include, opts, json.json)
            }
        }
        Command::Forget {
            repo,
            snapshots,
            keep_last,
            keep_daily,
            keep_weekly,
            keep_monthly,
            keep_yearly,
            keep_within,
            keep_tag,
            group_by,
            filter,
            dry_run,
            json,
        } => {
            let policy = tessera_core::retention::RetentionPolicy {
                keep_last,
                keep_daily,
                keep_weekly,
                keep_monthly,
                keep_yearly,
                keep_within,
                keep_tags: crate::filter::tag_lists(&keep_tag),
            };
            let filter = Filter::new(&filter);
            if policy.is_empty() && !dry_run && !snapshots.is_empty() && filter.is_empty() {
                manage::forget(&repo, &snapshots, json.json)
            } else {
                let how = gc::ForgetBy {
                    policy,
                    group_by,
                    filter,
                    dry_run,
                };
                gc::forget(&repo, &snapshots, how, json.json)
            }
        }
        Command::Gc { repo, args, json } => gc::gc(&repo, &args, json.json),
        Command::Stats { repo, index, json } => manage::stats(&repo, index, json.json),
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
        Command::Key {
            repo,
            command,
            json,
        } => key::run(&repo, command, json),
        Command::Diff {
            repo,
            from,
            to,
            json,
        } => inspect::diff(&repo, &from, &to, json.json),
        Command::Find {
            repo,
            patterns,
            snapshot,
            ignore_case,
            filter,
            json,
        } => inspect::find(
            &repo,
            &patterns,
            &snapshot,
            &Filter::new(&filter),
            ignore_case,
            json.json,
        ),
        Command::Dump {
            repo,
            snapshot,
            entry,
            filter,
        } => inspect::dump(&repo, &snapshot, &entry, &Filter::new(&filter)),
        Command::Mount {
            repo,
            mountpoint,
            filter,
        } => mount::mount(&repo, &mountpoint, &Filter::new(&filter)),
        Command::Completion { shell } => {
            use clap::CommandFactory;
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "tessera", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            use clap::CommandFactory;
            clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Lab { command } => lab::run(command),
    }
}
