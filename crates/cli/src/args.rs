//! Command-line arguments.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "tessera",
    version,
    about = "Deduplicating backup storage: back up directories and streams, restore them byte for byte",
    long_about = "Tessera stores backups as deduplicated chunks in immutable containers, with each \
                  backup's recipe kept as a Merkle tree. Every mutation publishes a new manifest \
                  generation, so a crash never loses a committed backup.\n\n\
                  Start with `tessera init --repo DIR`, then `tessera backup PATH`."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Where the repository is.
#[derive(Args, Clone)]
pub struct RepoArg {
    /// Repository directory
    #[arg(long, short = 'r', env = "TESSERA_REPO", value_name = "DIR")]
    pub repo: PathBuf,
}

#[derive(Args, Clone, Copy)]
pub struct JsonArg {
    /// Print a machine-readable JSON report on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand)]
pub enum Command {
    /// Create a repository
    Init {
        #[command(flatten)]
        repo: RepoArg,
        /// Fingerprint algorithm: blake3, sha1 or sha256
        #[arg(long, default_value = "blake3")]
        hash: String,
        /// Chunker: fastcdc[:MIN/AVG/MAX], rabin[:MIN/AVG/MAX], fixed[:SIZE], or a preset (gccdf = fastcdc 1k/4k/32k, mfdedup = fastcdc 2k/8k/64k)
        #[arg(long, default_value = "fastcdc:2k/8k/64k")]
        chunker: String,
        /// Container capacity (e.g. 4MiB)
        #[arg(long, default_value = "4MiB")]
        container_size: String,
        /// Trace mode: the repository ingests fingerprint traces and stores metadata only
        #[arg(long)]
        trace: bool,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Back up a directory, a file, or standard input
    Backup {
        #[command(flatten)]
        repo: RepoArg,
        /// Directory or file to back up (omit with --stdin-name)
        #[arg(value_name = "PATH", required_unless_present_any = ["stdin_name", "trace_file"])]
        path: Option<PathBuf>,
        /// Back up standard input as a stream with this name
        #[arg(long, value_name = "NAME", conflicts_with_all = ["path", "trace_file"])]
        stdin_name: Option<String>,
        /// Ingest a fingerprint trace (`<hex> <size>` per line) into a trace-mode repository
        #[arg(long, value_name = "FILE", conflicts_with = "path")]
        trace_file: Option<PathBuf>,
        /// Rewrite policy against fragmentation: none, capping:T, smr:T, har or har:U
        #[arg(long, value_name = "SPEC", default_value = "none")]
        rewrite: String,
        /// Chunks per rewriting decision (the ingest segment), e.g. 20MiB
        #[arg(long, value_name = "SIZE", default_value = "20MiB")]
        segment_size: String,
        #[command(flatten)]
        json: JsonArg,
    },
    /// List backups
    #[command(alias = "list")]
    Snapshots {
        #[command(flatten)]
        repo: RepoArg,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Restore a backup into a directory or to standard output
    Restore {
        #[command(flatten)]
        repo: RepoArg,
        /// Backup id, `latest`, or a prefix of its root fingerprint
        snapshot: String,
        /// Directory to restore into (created if missing)
        #[arg(
            long,
            short = 't',
            value_name = "DIR",
            required_unless_present = "stdout",
            conflicts_with = "stdout"
        )]
        target: Option<PathBuf>,
        /// Write the backup's byte stream (the tar stream for a directory) to standard output
        #[arg(long)]
        stdout: bool,
        /// Restore cache: lru:N, opt:N or faa:N (N containers; a bare N means lru:N)
        #[arg(long, default_value = "lru:32", value_name = "SPEC")]
        cache: String,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Remove backups from the catalog (space is reclaimed by garbage collection)
    Forget {
        #[command(flatten)]
        repo: RepoArg,
        /// Backup ids or root-fingerprint prefixes
        #[arg(required = true, value_name = "ID")]
        snapshots: Vec<String>,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Show repository statistics
    Stats {
        #[command(flatten)]
        repo: RepoArg,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Break the repository's writer lock (only when no other tessera process uses it)
    Unlock {
        #[command(flatten)]
        repo: RepoArg,
        #[command(flatten)]
        json: JsonArg,
    },
    /// The lab: demo and benchmarks
    Lab {
        #[command(subcommand)]
        command: LabCommand,
    },
}

#[derive(Subcommand)]
pub enum LabCommand {
    /// Generate a small synthetic version series, back it up, restore and verify every version
    Demo {
        /// Work directory (dataset, repository, restores); removed and recreated
        #[arg(long, default_value = "tessera-demo", value_name = "DIR")]
        dir: PathBuf,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Measure chunking, hashing, backup and restore throughput on a generated stream
    Bench {
        /// Work directory (generated stream, repository, restore output)
        #[arg(long, default_value = "tessera-bench", value_name = "DIR")]
        dir: PathBuf,
        /// Stream size (e.g. 1GiB)
        #[arg(long, default_value = "1GiB")]
        size: String,
        #[command(flatten)]
        json: JsonArg,
    },
}
