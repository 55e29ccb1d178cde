//! Command-line arguments.

use clap::builder::TypedValueParser;
use clap::{Arg, Args, Parser, Subcommand};
use std::path::PathBuf;
use std::str::FromStr;
use tessera_core::check::ReadData;
use tessera_core::chunking::ChunkerConfig;
use tessera_core::gc::{GcOptions, GcStrategy, MarkSpec, VcSpec};
use tessera_core::layout::LayoutKind;
use tessera_core::restore::CacheSpec;
use tessera_core::retention::GroupBy;
use tessera_core::rewrite::RewriteSpec;
use tessera_core::units::ByteSize;
use tessera_core::{Compression, Encryption, HashAlgo, KdfParams};
use tessera_lab::synth::SynthConfig;

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
    /// Print only errors and warnings (no summaries, no progress)
    #[arg(long, short = 'q', global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Print more detail (every path left out of a backup, every file restored)
    #[arg(long, short = 'v', global = true)]
    pub verbose: bool,
}

/// Which backups a command applies to: all given criteria must hold.
#[derive(Args, Clone, Default)]
pub struct FilterArgs {
    /// Only backups of this host (repeat for several hosts)
    #[arg(long, value_name = "HOST")]
    pub host: Vec<String>,
    /// Only backups with these tags (a comma list: all of them; repeat for alternatives)
    #[arg(long, value_name = "TAG[,TAG]")]
    pub tag: Vec<String>,
    /// Only backups that include this path (repeat: all of them)
    #[arg(long, value_name = "PATH")]
    pub path: Vec<PathBuf>,
}

/// What a directory backup leaves out, and where its list of paths comes from.
#[derive(Args, Clone, Default)]
pub struct SelectArgs {
    /// Leave out paths matching a gitignore-style PATTERN (repeatable; see the README)
    #[arg(long, short = 'e', value_name = "PATTERN")]
    pub exclude: Vec<String>,
    /// Like --exclude, ignoring case
    #[arg(long, value_name = "PATTERN")]
    pub iexclude: Vec<String>,
    /// Read exclude patterns from FILE, one a line (# comments)
    #[arg(long, value_name = "FILE")]
    pub exclude_file: Vec<PathBuf>,
    /// Like --exclude-file, ignoring case
    #[arg(long, value_name = "FILE")]
    pub iexclude_file: Vec<PathBuf>,
    /// Leave out directories holding a CACHEDIR.TAG (with its signature)
    #[arg(long)]
    pub exclude_caches: bool,
    /// Leave out directories holding an entry named NAME (repeatable)
    #[arg(long, value_name = "NAME")]
    pub exclude_if_present: Vec<String>,
    /// Do not cross file system boundaries (mount points are stored, empty)
    #[arg(long, short = 'x')]
    pub one_file_system: bool,
    /// Read the paths to back up from FILE, one a line (# comments; - for stdin)
    #[arg(long, value_name = "FILE")]
    pub files_from: Vec<PathBuf>,
}

/// What a backup records to be found by: tags and host.
#[derive(Args, Clone, Default)]
pub struct RecordArgs {
    /// Tag the backup (repeatable, or a comma list)
    #[arg(long, value_name = "TAG[,TAG]")]
    pub tag: Vec<String>,
    /// Host name to record (default: this machine's)
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
}

/// Where the repository is.
#[derive(Args, Clone)]
pub struct RepoArg {
    /// Repository location: a directory, s3:URL/BUCKET[/PREFIX], azure:ACCOUNT/CONTAINER[/PREFIX], gs:BUCKET[/PREFIX], sftp:[USER@]HOST[:PORT]/PATH or rclone:REMOTE:PATH
    #[arg(long, short = 'r', env = "TESSERA_REPO", value_name = "LOCATION")]
    pub repo: String,
    /// Read the repository's password from the first line of this file (else --password-command, TESSERA_PASSWORD, or a prompt on a terminal)
    #[arg(
        long,
        env = "TESSERA_PASSWORD_FILE",
        value_name = "FILE",
        global = true
    )]
    pub password_file: Option<PathBuf>,
    /// Run this shell command and take the first line it prints as the repository's password
    #[arg(
        long,
        env = "TESSERA_PASSWORD_COMMAND",
        value_name = "CMD",
        global = true,
        conflicts_with = "password_file"
    )]
    pub password_command: Option<String>,
    /// Worker threads for backup and restore (0: every core); layouts do not depend on it
    #[arg(
        long,
        env = "TESSERA_THREADS",
        value_name = "N",
        default_value_t = 0,
        global = true
    )]
    pub threads: usize,
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
    ///
    /// The location (--repo or TESSERA_REPO) is a directory (created if
    /// missing) or one of: s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX] (AWS_*
    /// credentials); azure:ACCOUNT/CONTAINER[/PREFIX] (AZURE_STORAGE_*);
    /// gs:BUCKET[/PREFIX] (GOOGLE_APPLICATION_CREDENTIALS);
    /// sftp:[USER@]HOST[:PORT]/PATH, through the system ssh with the user's
    /// ~/.ssh/config, agent and keys (PATH is absolute; /~/PATH is under the
    /// login directory; TESSERA_SSH_ARGS adds ssh options); rclone:REMOTE:PATH,
    /// any remote of rclone's configuration, through `rclone serve sftp
    /// --stdio` (TESSERA_RCLONE_ARGS adds rclone options). A missing bucket or
    /// container is created, and init says so; a missing directory is created.
    Init {
        #[command(flatten)]
        repo: RepoArg,
        /// Fingerprint algorithm: blake3, sha1 or sha256
        #[arg(long, default_value = "blake3", value_parser = Checked(plain::<HashAlgo>))]
        hash: HashAlgo,
        /// Chunker: fastcdc[:MIN/AVG/MAX], rabin[:MIN/AVG/MAX], fixed[:SIZE], or a preset (gccdf = fastcdc 1k/4k/32k, mfdedup = fastcdc 2k/8k/64k)
        #[arg(long, default_value = "fastcdc:2k/8k/64k", value_parser = Checked(plain::<ChunkerConfig>))]
        chunker: ChunkerConfig,
        /// Container capacity (e.g. 4MiB)
        #[arg(long, default_value = "4MiB", value_parser = Checked(size32))]
        container_size: u32,
        /// Compressed frame size: consecutive chunks of a container are compressed and sealed together in frames of about this many bytes (0: each chunk on its own)
        #[arg(long, default_value = "256KiB", value_parser = Checked(size32))]
        frame_size: u32,
        /// Trace mode: the repository ingests fingerprint traces and stores metadata only
        #[arg(long)]
        trace: bool,
        /// Encryption of every stored object under a random master key wrapped by an Argon2id key from the password: xaes-256-gcm (AES-256-GCM with 24-byte nonces; fastest with hardware AES), xchacha20-poly1305 (for CPUs without AES instructions), or none (anyone who can read the repository reads every backup)
        #[arg(long, default_value = "xaes-256-gcm", value_name = "NAME", value_parser = Checked(prefixed::<Encryption>))]
        encryption: Encryption,
        /// Default compression of chunks and metadata: off, auto (zstd 1 over 256 KiB frames, skipping frames that do not compress), fastest (1), better (9), max (19), or zstd:1..22
        #[arg(long, default_value = "auto", value_name = "LEVEL", value_parser = Checked(prefixed::<Compression>))]
        compression: Compression,
        /// Argon2id cost of the first key slot: m=KiB,t=PASSES,p=LANES
        #[arg(long, env = "TESSERA_KDF", default_value = "m=65536,t=3,p=4", value_name = "PARAMS", value_parser = Checked(prefixed::<KdfParams>))]
        kdf: KdfParams,
        /// Layout: containers (fixed-size containers in stream order) or mfdedup (lifecycle categories and volumes, NDF + AVAR)
        #[arg(long, default_value = "containers", value_parser = Checked(plain::<LayoutKind>))]
        layout: LayoutKind,
        /// Data index: memory (every entry in RAM) or disk (sorted runs on local disk under $TESSERA_INDEX_DIR or the cache directory, with a Bloom filter and a locality cache in RAM: a few bytes of RAM per chunk)
        #[arg(long, default_value = "memory", value_parser = Checked(plain::<tessera_core::index::IndexKind>))]
        index: tessera_core::index::IndexKind,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Back up a directory, a file, or standard input
    Backup {
        #[command(flatten)]
        repo: RepoArg,
        /// Directories or files to back up (omit with --stdin-name, --trace-file or --files-from)
        #[arg(value_name = "PATH", required_unless_present_any = ["stdin_name", "trace_file", "files_from", "clone"])]
        paths: Vec<PathBuf>,
        /// Fastcopy: a new backup sharing this backup's recipe root (id, `latest` or a root prefix), made without reading or writing data; named --stdin-name if given, else as the source
        #[arg(long, value_name = "ID", conflicts_with_all = ["paths", "trace_file", "files_from", "tag", "host"])]
        clone: Option<String>,
        /// Back up standard input as a stream with this name
        #[arg(long, value_name = "NAME", conflicts_with_all = ["paths", "trace_file", "files_from"])]
        stdin_name: Option<String>,
        /// Ingest a fingerprint trace (`<hex> <size>` per line) into a trace-mode repository
        #[arg(long, value_name = "FILE", conflicts_with_all = ["paths", "files_from"])]
        trace_file: Option<PathBuf>,
        /// Rewrite policy against fragmentation: none, capping:T, smr:T, ned:T, har, har:U or har:U:L (T: containers kept per segment, or for NED the utilization below which a container's duplicates are rewritten; U: sparse below this utilization, default 0.5; L: sparse list capped at this share of the bytes referenced, default 0.05)
        #[arg(long, value_name = "SPEC", default_value = "none", value_parser = Checked(prefixed::<RewriteSpec>))]
        rewrite: RewriteSpec,
        /// Chunks per rewriting decision (the ingest segment), e.g. 20MiB; default 5 containers of data (20 MiB at 4 MiB containers), so that a level keeps the SMR paper's meaning (containers per 5 containers of data) at any container size
        #[arg(long, visible_alias = "segment-size", value_name = "SIZE", value_parser = Checked(segment_size))]
        rewrite_segment: Option<u64>,
        /// Compression of this backup's chunks (default: the repository's, chosen at init): off, auto, fastest, better, max or zstd:1..22
        #[arg(long, value_name = "LEVEL", value_parser = Checked(prefixed::<Compression>))]
        compression: Option<Compression>,
        /// Read every file of a directory, trusting nothing in the files cache (which otherwise skips files whose size, times and inode are unchanged; it lives in $TESSERA_CACHE_DIR, $XDG_CACHE_HOME/tessera or ~/.cache/tessera)
        #[arg(long)]
        force_read: bool,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        record: RecordArgs,
        /// The version chain this backup continues (default: the backup's name: its absolute path or the stdin name); the mfdedup layout deduplicates against the chain's previous version only
        #[arg(long, value_name = "NAME")]
        source: Option<String>,
        /// mfdedup layout: skip arranging after the backup (catch up later with `tessera arrange`)
        #[arg(long)]
        no_arrange: bool,
        #[command(flatten)]
        json: JsonArg,
    },
    /// mfdedup layout: arrange the chains that fell behind (AVAR), archiving what the newest versions no longer reference into volumes
    Arrange {
        #[command(flatten)]
        repo: RepoArg,
        /// Arrange at most N versions of each chain
        #[arg(long, value_name = "N", value_parser = Checked(whole))]
        max: Option<usize>,
        #[command(flatten)]
        json: JsonArg,
    },
    /// List backups
    #[command(alias = "list")]
    Snapshots {
        #[command(flatten)]
        repo: RepoArg,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        json: JsonArg,
    },
    /// List the files of a backup (a directory backup's entries, in stream order)
    Ls {
        #[command(flatten)]
        repo: RepoArg,
        /// Backup id, `latest`, or a prefix of its root fingerprint
        snapshot: String,
        /// Also show type and permissions, size and modification time (UTC)
        #[arg(long, short = 'l')]
        long: bool,
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
        #[arg(long, default_value = "lru:32", value_name = "SPEC", value_parser = Checked(prefixed::<CacheSpec>))]
        cache: CacheSpec,
        /// Memory ceiling for the containers the restore holds (as stored: cached and read ahead) and the frames it opens, e.g. 64MiB (the default keeps a restore of a 2.2 GB system tree below restic's memory). When the cache's containers would exceed it, the least recently used are freed and read again if needed; below one container, a container at a time
        #[arg(long, default_value = "48MiB", value_name = "SIZE", value_parser = Checked(memory_size))]
        memory: u64,
        /// Restore everything that is intact: damaged chunks are written as zeros and listed, with the files they fall in (exit status 3)
        #[arg(long)]
        skip_damaged: bool,
        /// Restore only this path of a directory backup (a file, or a directory with everything below it); repeat for several. Paths as `tessera ls` prints them
        #[arg(long, value_name = "PATH", conflicts_with_all = ["stdout", "skip_damaged"])]
        include: Vec<String>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Remove backups from the catalog (space is reclaimed by garbage collection)
    Forget {
        #[command(flatten)]
        repo: RepoArg,
        /// Backup ids or root-fingerprint prefixes (or give a retention policy)
        #[arg(value_name = "ID")]
        snapshots: Vec<String>,
        /// Policy: keep the N newest backups
        #[arg(long, value_name = "N", value_parser = Checked(whole))]
        keep_last: Option<usize>,
        /// Policy: keep the newest backup of each of the N newest days (UTC)
        #[arg(long, value_name = "N", value_parser = Checked(whole))]
        keep_daily: Option<usize>,
        /// Policy: keep the newest backup of each of the N newest weeks
        #[arg(long, value_name = "N", value_parser = Checked(whole))]
        keep_weekly: Option<usize>,
        /// Policy: keep the newest backup of each of the N newest months
        #[arg(long, value_name = "N", value_parser = Checked(whole))]
        keep_monthly: Option<usize>,
        /// Policy: keep the newest backup of each of the N newest years
        #[arg(long, value_name = "N", value_parser = Checked(whole))]
        keep_yearly: Option<usize>,
        /// Policy: keep every backup taken within DURATION of the group's newest (e.g. 7d, 2weeks, 1y)
        #[arg(long, value_name = "DURATION", value_parser = Checked(duration))]
        keep_within: Option<u64>,
        /// Policy: keep every backup with these tags (a comma list: all of them; repeatable)
        #[arg(long, value_name = "TAG[,TAG]")]
        keep_tag: Vec<String>,
        /// Apply the policy to each group of backups sharing these (host, paths, tags; comma list, or none)
        #[arg(long, value_name = "LIST", default_value = "host,paths", value_parser = Checked(plain::<GroupBy>))]
        group_by: GroupBy,
        #[command(flatten)]
        filter: FilterArgs,
        /// Show what would be forgotten without changing the repository
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Reclaim the space of forgotten backups (garbage collection)
    Gc {
        #[command(flatten)]
        repo: RepoArg,
        #[command(flatten)]
        args: GcArgs,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Show repository statistics (from the manifest: fast at any size)
    Stats {
        #[command(flatten)]
        repo: RepoArg,
        /// Also load the fingerprint index and report its entries and
        /// memory (costs what opening it for a backup costs)
        #[arg(long)]
        index: bool,
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
    /// Verify the repository: manifest, recipes, index, containers (and with --read-data every chunk)
    Check {
        #[command(flatten)]
        repo: RepoArg,
        /// Also read every data container, verify its checksums and recompute every chunk's fingerprint
        #[arg(long)]
        read_data: bool,
        /// Read only part N of M of the data containers (e.g. 1/10); run N = 1..M to cover all
        #[arg(long, value_name = "N/M", conflicts_with = "read_data", value_parser = Checked(plain::<ReadData>))]
        read_data_subset: Option<ReadData>,
        /// Remove objects no manifest lists (leftovers of an interrupted mutation); takes the writer lock
        #[arg(long)]
        repair_leftovers: bool,
        /// Rebuild FGC's reference graph from every recipe (and record it from now on); takes the writer lock
        #[arg(long)]
        rebuild_refgraph: bool,
        /// With --rebuild-refgraph: virtual files of at most this size (0: whole backups)
        #[arg(long, value_name = "SIZE", requires = "rebuild_refgraph", value_parser = Checked(plain::<ByteSize>))]
        fgc_granularity: Option<ByteSize>,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Manage the passwords of an encrypted repository (key slots)
    Key {
        #[command(flatten)]
        repo: RepoArg,
        #[command(subcommand)]
        command: KeyCommand,
        /// Print a machine-readable JSON report on stdout
        #[arg(long, global = true)]
        json: bool,
    },
    /// Show what changed between two backups: added, removed and changed entries and bytes
    Diff {
        #[command(flatten)]
        repo: RepoArg,
        /// The older backup (id, `latest`, or a root prefix)
        from: String,
        /// The newer backup
        to: String,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Find entries matching a gitignore-style pattern in backups (newest first; status 1 if none)
    Find {
        #[command(flatten)]
        repo: RepoArg,
        /// Pattern, as for --exclude (`*.conf`, `etc/**/passwd`); several: any of them
        #[arg(value_name = "PATTERN", required = true)]
        patterns: Vec<String>,
        /// Search only this backup (repeatable; default: all that match the filters)
        #[arg(long, short = 's', value_name = "SNAPSHOT")]
        snapshot: Vec<String>,
        /// Match ignoring case
        #[arg(long, short = 'i')]
        ignore_case: bool,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Write a file of a backup to standard output (a directory as a tar stream)
    Dump {
        #[command(flatten)]
        repo: RepoArg,
        /// Backup id, `latest`, or a prefix of its root fingerprint
        snapshot: String,
        /// Path as `tessera ls` prints it (`/` for the whole backup)
        #[arg(value_name = "PATH")]
        entry: String,
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// Browse backups as a read-only file system (FUSE): ids/, hosts/, tags/, latest
    Mount {
        #[command(flatten)]
        repo: RepoArg,
        /// An existing directory; unmount with `fusermount3 -u DIR`
        #[arg(value_name = "DIR")]
        mountpoint: PathBuf,
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completion {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff; view with `tessera man | man -l -`)
    Man,
    /// The lab: demo and benchmarks
    Lab {
        #[command(subcommand)]
        command: LabCommand,
    },
}

#[derive(Subcommand)]
pub enum KeyCommand {
    /// List the key slots (* marks the one the given password opens)
    List,
    /// Add a key slot: another password that opens the repository
    Add {
        /// Read the new password from this file (else TESSERA_NEW_PASSWORD, or typed twice on a terminal)
        #[arg(long, value_name = "FILE")]
        new_password_file: Option<PathBuf>,
        /// Argon2id cost of the new slot: m=KiB,t=PASSES,p=LANES
        #[arg(long, env = "TESSERA_KDF", default_value = "m=65536,t=3,p=4", value_name = "PARAMS", value_parser = Checked(prefixed::<KdfParams>))]
        kdf: KdfParams,
    },
    /// Remove a key slot (not the last one, nor the one the given password opens)
    Remove {
        /// The slot's id, as `tessera key list` shows it
        id: u64,
    },
    /// Change the password: a new slot replaces the one the given password opens
    Passwd {
        /// Read the new password from this file (else TESSERA_NEW_PASSWORD, or typed twice on a terminal)
        #[arg(long, value_name = "FILE")]
        new_password_file: Option<PathBuf>,
        /// Argon2id cost of the new slot: m=KiB,t=PASSES,p=LANES
        #[arg(long, env = "TESSERA_KDF", default_value = "m=65536,t=3,p=4", value_name = "PARAMS", value_parser = Checked(prefixed::<KdfParams>))]
        kdf: KdfParams,
    },
}

#[derive(Subcommand)]
pub enum LabCommand {
    /// Generate a small multi-source synthetic series, run every demo approach on it, write the report
    Demo {
        /// Output directory (dataset, results, report.html); must be new, empty, or an earlier demo's
        #[arg(long, default_value = "tessera-demo", value_name = "DIR")]
        dir: PathBuf,
        /// Approaches to compare, comma-separated (built-in names)
        #[arg(long, value_name = "LIST", default_value_t = tessera_lab::approach::DEMO_APPROACHES.join(","))]
        approaches: String,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Measure chunking, hashing, backup and restore throughput on a generated stream
    /// (with --trace: the trace-mode ingest rate and memory per stored chunk)
    Bench {
        /// Work directory (generated stream, repository, restore output)
        #[arg(long, default_value = "tessera-bench", value_name = "DIR")]
        dir: PathBuf,
        /// Stream size (e.g. 1GiB); with --trace, each version's size [default: 1GiB, with --trace 10GiB]
        #[arg(long, value_parser = Checked(plain::<ByteSize>))]
        size: Option<ByteSize>,
        /// Trace mode: ingest the scale generator's series (experiments/scale.toml), report
        /// chunk references per second and peak memory per stored chunk
        #[arg(long)]
        trace: bool,
        /// With --trace: versions in the series
        #[arg(long, default_value_t = 100, value_name = "N", requires = "trace", value_parser = clap::value_parser!(u32).range(1..))]
        versions: u32,
        /// With --trace: the data index, memory or disk
        #[arg(long, default_value = "memory", requires = "trace", value_parser = Checked(plain::<tessera_core::index::IndexKind>))]
        index: tessera_core::index::IndexKind,
        /// With --trace: keep the repository in DIR (a local directory) instead of in memory
        #[arg(long, requires = "trace")]
        local: bool,
        /// How many times to repeat the measurements (medians are reported)
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
        /// Restore cache: lru:N, opt:N or faa:N (as for `restore --cache`)
        #[arg(long, value_name = "SPEC", default_value_t = CacheSpec::default(), value_parser = Checked(prefixed::<CacheSpec>))]
        cache: CacheSpec,
        /// Restore memory ceiling (as for `restore --memory`; the default is restore's). A ceiling below what the cache's containers take frees and re-reads some of them: give a large one (e.g. 1GiB) to measure the cache policy alone
        #[arg(long, default_value = "48MiB", value_name = "SIZE", value_parser = Checked(memory_size))]
        memory: u64,
        /// Compression of the benchmark repository (as for `init --compression`)
        #[arg(long, default_value = "off", value_name = "LEVEL", value_parser = Checked(prefixed::<Compression>))]
        compression: Compression,
        /// Encryption of the benchmark repository (as for `init --encryption`)
        #[arg(long, default_value = "none", value_name = "NAME", value_parser = Checked(prefixed::<Encryption>))]
        encryption: Encryption,
        /// Make the stream's fresh bytes text-like (compressible) instead of random
        #[arg(long)]
        compressible: bool,
        /// Worker threads for backup and restore (0: every core)
        #[arg(long, default_value_t = 0, value_name = "N")]
        threads: usize,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Tessera side by side with restic and borg on one tree: backups, restore (beside cp -a), forget + gc
    Peers {
        /// Tree to back up, best a real system's with binaries and libraries (docs/LAB.md); copied once into the work directory, never modified
        #[arg(value_name = "TREE")]
        source: PathBuf,
        /// Work directory (source copy, repositories, restore targets); must be new, empty, or an earlier run's
        #[arg(long, default_value = "tessera-peers", value_name = "DIR")]
        work: PathBuf,
        /// Runs of every step (medians are reported)
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
        /// Every tool uncompressed (the other table); default: every tool at its default compression (tessera auto, restic auto, borg lz4), what users get
        #[arg(long)]
        no_compression: bool,
        /// Time steps warm (sync, input read right before each step, restores into the work directory) instead of settled (as root: page cache dropped and the step's input read back before each step, every restore and cp -a into a fresh ext4 on a loop image); without root the comparison is warm anyway and says so
        #[arg(long)]
        no_settle: bool,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Generate a dataset: a synthetic version series, a git tag series, or traces of tar images
    Gen {
        #[command(subcommand)]
        command: GenCommand,
    },
    /// Run every experiment docs/REPRODUCTION.md cites and regenerate it (see docs/LAB.md)
    Reproduce {
        /// Reduced scale (versions, files, retention ×--scale; datasets over --max-dataset skipped), about 3 minutes on 2 cores; writes under lab-results/reproduce-quick unless --out
        #[arg(long)]
        quick: bool,
        /// Results in DIR/results/NAME and the document in DIR/REPRODUCTION.md (default: experiments/results and docs/REPRODUCTION.md; with --quick, lab-results/reproduce-quick)
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Do not run anything: regenerate the document from the results there are
        #[arg(long)]
        no_run: bool,
        /// With --quick: the factor on versions, files per source and retention counts
        #[arg(long, default_value_t = 0.25, value_name = "F", requires = "quick")]
        scale: f64,
        /// With --quick: skip directory datasets larger than this
        #[arg(long, default_value = "4GiB", value_name = "SIZE", requires = "quick", value_parser = Checked(plain::<ByteSize>))]
        max_dataset: ByteSize,
        /// The checkout (holding experiments/REPRODUCTION.md.in); default: the current directory or the nearest one above it
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Run an experiment file (see docs/LAB.md): results.csv, results.jsonl, report.html
    Run {
        /// Experiment file (TOML)
        #[arg(value_name = "EXPERIMENT")]
        experiment: PathBuf,
        /// Output directory (default: lab-results/<experiment name>)
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        #[command(flatten)]
        json: JsonArg,
    },
}

#[derive(Subcommand)]
pub enum GenCommand {
    /// Synthetic version series (file creations, deletions, modifications), as tar images or traces
    Synth {
        /// Output directory
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        #[command(flatten)]
        series: SynthArgs,
        /// Write fingerprint traces of the chunks instead of tar images
        #[arg(long)]
        trace: bool,
        /// Chunker for --trace
        #[arg(long, default_value = "fastcdc:2k/8k/64k", value_parser = Checked(plain::<ChunkerConfig>))]
        chunker: ChunkerConfig,
        /// Fingerprint algorithm for --trace
        #[arg(long, default_value = "blake3", value_parser = Checked(plain::<HashAlgo>))]
        hash: HashAlgo,
    },
    /// One `git archive` tarball per tag matching GLOB, in version order
    Git {
        /// Local git repository
        #[arg(long, value_name = "PATH")]
        repo: PathBuf,
        /// Tag pattern, e.g. 'v*'
        #[arg(long, value_name = "GLOB")]
        tags: String,
        /// Output directory
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Fingerprint traces of every version file of a directory (same chunks as data mode)
    Trace {
        /// Directory of version files (tar images), in name order
        #[arg(value_name = "DIR")]
        input: PathBuf,
        /// Output directory
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        #[arg(long, default_value = "fastcdc:2k/8k/64k", value_parser = Checked(plain::<ChunkerConfig>))]
        chunker: ChunkerConfig,
        #[arg(long, default_value = "blake3", value_parser = Checked(plain::<HashAlgo>))]
        hash: HashAlgo,
    },
}

/// The generated series' shape (`lab gen synth`), as [`SynthConfig`] has it.
#[derive(Args)]
pub struct SynthArgs {
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Independent sources interleaved into one backup sequence (MIX)
    #[arg(long, default_value_t = 1)]
    pub sources: usize,
    /// Versions per source
    #[arg(long, default_value_t = 10)]
    pub versions: usize,
    /// Files in each source's first version
    #[arg(long, default_value_t = 64)]
    pub files: usize,
    /// Largest file (sizes are log-uniform from 4 KiB)
    #[arg(long, default_value = "256KiB", value_parser = Checked(plain::<ByteSize>))]
    pub file_size_max: ByteSize,
    /// New files per version, relative to the file count
    #[arg(long, default_value_t = 0.02)]
    pub create_rate: f64,
    /// Probability that a file is deleted in a version
    #[arg(long, default_value_t = 0.01)]
    pub delete_rate: f64,
    /// Probability that a file is modified in a version
    #[arg(long, default_value_t = 0.10)]
    pub modify_rate: f64,
}

impl SynthArgs {
    pub fn config(&self) -> SynthConfig {
        SynthConfig {
            seed: self.seed,
            sources: self.sources,
            versions: self.versions,
            files: self.files,
            file_size_max: self.file_size_max,
            create_rate: self.create_rate,
            delete_rate: self.delete_rate,
            modify_rate: self.modify_rate,
            ..SynthConfig::default()
        }
    }
}

/// `tessera gc`'s parameters, each checked (with the flag named) as it is
/// parsed, by the same rules as [`GcOptions::validate`].
#[derive(Args)]
pub struct GcArgs {
    /// naive (copy live chunks forward in their old order), gccdf (regroup them by ownership) or cma (delete only containers with no live chunk, copy nothing: Destor's container-marker GC)
    #[arg(long, default_value = "naive", value_parser = Checked(plain::<GcStrategy>))]
    pub strategy: GcStrategy,
    /// GCCDF: GC-involved containers analyzed together (memory grows with it)
    #[arg(long, default_value = "100", value_name = "S", value_parser = Checked(segment_containers))]
    pub segment_containers: usize,
    /// Clean only containers whose liveness (live bytes / bytes) is below X; 1 cleans every container holding garbage
    #[arg(long, default_value = "1", value_name = "X", value_parser = Checked(liveness_threshold))]
    pub liveness_threshold: f64,
    /// GCCDF: split a cluster by a backup only if at least N of its chunks are referenced by it (0 = 200/512 of the chunks per container, the paper's ratio)
    #[arg(long, default_value = "0", value_name = "N", value_parser = Checked(whole))]
    pub split_threshold: usize,
    /// False-positive rate of the valid-chunk table's Bloom filter (0 = exact set; false positives only keep garbage)
    #[arg(long, default_value = "0", value_name = "P", value_parser = Checked(vc_fp_rate))]
    pub vc_fp_rate: f64,
    /// Valid-chunk table as a perfect-hash vector over the index's fingerprints (about 4 bits per stored chunk, exact for them; physical GC, FAST'17)
    #[arg(long, conflicts_with = "vc_fp_rate")]
    pub vc_phv: bool,
    /// Valid-chunk table as a Bloom filter of exactly B bits per stored chunk and the optimal number of hashes (FAST'17's live vector: 6)
    #[arg(long, value_name = "B", conflicts_with_all = ["vc_fp_rate", "vc_phv"], value_parser = Checked(vc_bloom_bits))]
    pub vc_bloom_bits: Option<f64>,
    /// GCCDF: false-positive rate of the per-backup ownership Bloom filters (0 = exact sets)
    #[arg(long, default_value = "0.01", value_name = "P", value_parser = Checked(ownership_fp_rate))]
    pub ownership_fp_rate: f64,
    /// GCCDF: cluster packing, recency (the paper's) or random (its Fig. 15 ablation: the same clusters in a random order)
    #[arg(long, default_value = "recency", value_name = "PACKING", value_parser = Checked(plain::<tessera_core::gc::Packing>))]
    pub packing: tessera_core::gc::Packing,
    /// Show what would be reclaimed without changing the repository
    #[arg(long)]
    pub dry_run: bool,
    /// Mark phase: logical (depth-first recipe walk), physical, physical+ or focused
    #[arg(long, default_value = "logical", value_name = "MARK")]
    pub mark: MarkSpec,
    /// Focused mark: split backups into virtual files of at most this size
    /// (e.g. 64MiB) in the reference graph; another size than the recorded
    /// one rebuilds the graph from every recipe
    #[arg(long, value_name = "SIZE", value_parser = Checked(plain::<ByteSize>))]
    pub fgc_granularity: Option<ByteSize>,
    /// Physical marks: memory for the live vector of data chunks (e.g. 64MiB); when it would not fit, mark a sample first and clean the most dead containers in a second pass
    #[arg(long, value_name = "BYTES", value_parser = Checked(positive_bytes))]
    pub memory_limit: Option<ByteSize>,
    /// Copy phase: read at most this many container bytes per second (e.g. 50MiB)
    #[arg(long, value_name = "BYTES", value_parser = Checked(positive_bytes))]
    pub max_read_rate: Option<ByteSize>,
    /// Copy phase: write at most this many container bytes per second (e.g. 50MiB)
    #[arg(long, value_name = "BYTES", value_parser = Checked(positive_bytes))]
    pub max_write_rate: Option<ByteSize>,
    /// Logical mark: walk recipe subtrees shared by several backups again for each (the physical-GC paper's LGC) instead of skipping those already marked
    #[arg(long)]
    pub walk_shared_subtrees: bool,
    /// Focused mark: run it even when its focus (deleted and correlative backups) covers most of what the full mark reads, instead of running the full mark
    #[arg(long)]
    pub no_focus_fallback: bool,
}

impl GcArgs {
    pub fn options(&self) -> GcOptions {
        GcOptions {
            strategy: self.strategy,
            mark: self.mark,
            segment_containers: self.segment_containers,
            liveness_threshold: self.liveness_threshold,
            split_threshold: self.split_threshold,
            vc: if self.vc_phv {
                VcSpec::Phv
            } else if let Some(bits) = self.vc_bloom_bits {
                VcSpec::BloomBits { bits }
            } else {
                VcSpec::from_fp_rate(self.vc_fp_rate)
            },
            ownership_fp_rate: self.ownership_fp_rate,
            packing: self.packing,
            dry_run: self.dry_run,
            fgc_granularity: self.fgc_granularity.map(|b| b.0),
            memory_limit: self.memory_limit.map(|b| b.0),
            max_read_rate: self.max_read_rate.map(|b| b.0),
            max_write_rate: self.max_write_rate.map(|b| b.0),
            walk_shared_subtrees: self.walk_shared_subtrees,
            focus_fallback: !self.no_focus_fallback,
        }
    }
}

/// A bad option value, in the words the commands used when they parsed
/// options themselves: `main` prints it as the usual one `error:` line with
/// status 1, not as clap's usage error.
#[derive(Debug)]
pub struct BadValue(pub String);

impl std::fmt::Display for BadValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadValue {}

/// Our message for a clap error that is a [`BadValue`].
pub fn bad_value(e: &clap::Error) -> Option<&BadValue> {
    use std::error::Error as _;
    e.source()?.downcast_ref::<BadValue>()
}

/// A clap value parser from a function of (flag name, value), so a message
/// can name its flag.
#[derive(Clone)]
pub struct Checked<T>(fn(&str, &str) -> Result<T, String>);

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Checked<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let flag = arg.and_then(|a| a.get_long()).unwrap_or_default();
        let text = value.to_string_lossy();
        (self.0)(flag, &text).or_else(|msg| {
            // clap's own error, carrying ours as its source.
            let fail = move |_: &str| Err::<T, BadValue>(BadValue(msg.clone()));
            fail.parse_ref(cmd, arg, value)
        })
    }
}

/// `FromStr`, its message as is.
fn plain<T: FromStr<Err = String>>(_flag: &str, v: &str) -> Result<T, String> {
    v.parse()
}

/// `FromStr`, its message after the flag: `--rewrite: bad smr level '0'`.
fn prefixed<T: FromStr<Err = String>>(flag: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|e| format!("--{flag}: {e}"))
}

/// A chunk or container size (fits 32 bits).
fn size32(_flag: &str, v: &str) -> Result<u32, String> {
    tessera_core::chunking::parse_size(v)
}

/// A memory ceiling in bytes (`64MiB`), positive.
fn memory_size(flag: &str, v: &str) -> Result<u64, String> {
    match tessera_core::chunking::parse_bytes(v) {
        Ok(0) => Err(format!("--{flag} must be positive")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("--{flag}: {e}")),
    }
}

fn segment_size(flag: &str, v: &str) -> Result<u64, String> {
    match size32(flag, v) {
        Ok(0) => Err(format!("--{flag} must be positive")),
        Ok(n) => Ok(n as u64),
        Err(e) => Err(format!("--{flag}: {e}")),
    }
}

/// A duration (`7d`, `36h`, `2weeks`, `1y`) in seconds.
fn duration(flag: &str, v: &str) -> Result<u64, String> {
    humantime::parse_duration(v.trim())
        .map(|d| d.as_secs())
        .map_err(|e| format!("--{flag}: bad duration '{v}' ({e}; e.g. 7d, 36h, 2weeks, 1y)"))
}

fn whole(flag: &str, v: &str) -> Result<usize, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("--{flag} expects a whole number (got '{v}')"))
}

fn number(flag: &str, v: &str, what: &str) -> Result<f64, String> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("--{flag} expects {what} (got '{v}')"))
}

/// GC options with one field set, checked by core's own rules.
fn gc_rule<T>(value: T, set: impl FnOnce(&mut GcOptions, T)) -> Result<T, String>
where
    T: Copy,
{
    let mut o = GcOptions::default();
    set(&mut o, value);
    o.validate().map(|()| value)
}

fn segment_containers(flag: &str, v: &str) -> Result<usize, String> {
    gc_rule(whole(flag, v)?, |o, x| o.segment_containers = x)
}

fn liveness_threshold(flag: &str, v: &str) -> Result<f64, String> {
    let x = number(flag, v, "a number between 0 and 1")?;
    gc_rule(x, |o, x| o.liveness_threshold = x)
}

fn vc_bloom_bits(flag: &str, v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(b) if (2.0..=64.0).contains(&b) => Ok(b),
        _ => Err(format!(
            "--{flag} expects bits per chunk from 2 to 64 (got '{v}')"
        )),
    }
}

fn vc_fp_rate(flag: &str, v: &str) -> Result<f64, String> {
    gc_rule(number(flag, v, "a rate in [0, 0.5)")?, |o, x| {
        o.vc = VcSpec::from_fp_rate(x)
    })
}

/// A byte count above zero (limits and rates).
fn positive_bytes(flag: &str, v: &str) -> Result<ByteSize, String> {
    match v.parse::<ByteSize>() {
        Ok(b) if b.0 > 0 => Ok(b),
        Ok(_) => Err(format!("--{flag} must be above 0")),
        Err(e) => Err(format!("--{flag}: {e}")),
    }
}

fn ownership_fp_rate(flag: &str, v: &str) -> Result<f64, String> {
    let x = number(flag, v, "a rate in [0, 0.5)")?;
    gc_rule(x, |o, x| o.ownership_fp_rate = x)
}
