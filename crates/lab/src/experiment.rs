//! Experiment files (TOML): dataset, repository parameters, approaches,
//! retention and restores. Every error names the file and the line.

use crate::approach::{builtin, Approach, ApproachDef};
use crate::retention::Retention;
use crate::scale::ScaleConfig;
use crate::synth::SynthConfig;
use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use std::ops::Range;
use std::path::{Path, PathBuf};
use tessera_core::chunking::ChunkerConfig;
use tessera_core::restore::CacheSpec;
use tessera_core::units::ByteSize;
use tessera_core::HashAlgo;
use toml::Spanned;

/// Data mode ingests bytes; trace mode ingests (fingerprint, size) per chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Data,
    Trace,
}

/// Where the versions come from.
#[derive(Clone, Debug)]
pub enum Dataset {
    /// A directory of version files (tar images or traces), in name order.
    Dir(PathBuf),
    Synthetic(SynthConfig),
    Scale(ScaleConfig),
}

/// Where repositories live while an approach runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Memory,
    Local,
    /// A MinIO server the lab starts (S3 protocol, loopback).
    S3,
    /// An Azurite server the lab starts (Azure Blob protocol, loopback).
    Azure,
}

#[derive(Clone, Debug)]
pub struct RestorePlan {
    pub cache: CacheSpec,
    /// Restore every retained backup after the last version.
    pub retained_at_end: bool,
    /// Restore the newest backup right after it is made.
    pub newest_after_each: bool,
    /// Data mode: compare restored bytes with the version file.
    pub verify: bool,
    /// Data mode: restore into a file under the work directory, as the
    /// CLI restores to a target (MFDedup writes it in place instead of
    /// through a temporary file); compared with the version afterwards.
    pub to_file: bool,
    /// Sync and drop the page cache before each restore (root), and time
    /// a cold read of the version's own file beside it (`fread_mb_s`,
    /// MFDedup Fig. 13's fread()).
    pub cold: bool,
}

#[derive(Clone, Debug)]
pub struct Experiment {
    pub name: String,
    pub file: PathBuf,
    pub mode: Mode,
    pub dataset: Dataset,
    pub chunker: ChunkerConfig,
    pub hash: HashAlgo,
    pub container_size: u32,
    /// Plain bytes per compressed frame (`[repo] frame_size`).
    pub frame_size: u32,
    pub backend: BackendKind,
    /// The repositories' data index (`[repo] index = "disk"`); memory unless set.
    pub index: tessera_core::index::IndexKind,
    pub approaches: Vec<Approach>,
    pub retention: Option<Retention>,
    pub restore: RestorePlan,
    /// Backups ingested together, round-robin into shared containers (the
    /// GCCDF artifact's baseline ingest); 1 = one backup at a time.
    pub interleave: usize,
    /// After the last version: this many fastcopy doublings
    /// (physical-gc-fast17.md §5.3, Fig. 7a): each clones every retained
    /// backup (`Writer::clone_backups`, no data read or written), so the
    /// total compression doubles at a constant physical size, then runs
    /// the approach's GC (cold with `retention.cold_gc`) and records a GC
    /// row. 0: none.
    pub fastcopy_doublings: usize,
    /// Default compression of the repositories (`[repo] compression`;
    /// off unless given, so layout results stay comparable).
    pub compression: tessera_core::Compression,
    /// Whether the repositories are encrypted (`[repo] encrypted`; a fixed
    /// lab password with the cheapest key derivation).
    pub encrypted: bool,
    /// Worker threads for backup and restore (`[repo] threads`; 0, the
    /// default: every core). Layout results do not depend on it.
    pub threads: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDef {
    name: Option<String>,
    mode: Option<Spanned<String>>,
    dataset: Spanned<DatasetDef>,
    #[serde(default)]
    repo: RepoDef,
    #[serde(default)]
    approaches: Vec<Spanned<String>>,
    #[serde(default)]
    approach: Vec<Spanned<ApproachDef>>,
    retention: Option<Spanned<Retention>>,
    #[serde(default)]
    restore: RestoreDef,
    interleave: Option<Spanned<usize>>,
    #[serde(default)]
    fastcopy_doublings: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DatasetDef {
    dir: Option<Spanned<String>>,
    synthetic: Option<Spanned<SynthConfig>>,
    scale: Option<Spanned<ScaleConfig>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RepoDef {
    chunker: Spanned<String>,
    hash: Spanned<String>,
    container_size: Spanned<ByteSize>,
    frame_size: Option<ByteSize>,
    backend: Option<BackendKind>,
    index: Option<tessera_core::index::IndexKind>,
    compression: Option<Spanned<String>>,
    encrypted: bool,
    threads: usize,
}

impl Default for RepoDef {
    fn default() -> Self {
        RepoDef {
            chunker: Spanned::new(0..0, "fastcdc:2k/8k/64k".into()),
            hash: Spanned::new(0..0, "blake3".into()),
            container_size: Spanned::new(0..0, ByteSize(4 << 20)),
            frame_size: None,
            backend: None,
            index: None,
            compression: None,
            encrypted: false,
            threads: 0,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RestoreDef {
    cache: Spanned<String>,
    retained_at_end: bool,
    newest_after_each: bool,
    verify: bool,
    to_file: bool,
    cold: bool,
}

impl Default for RestoreDef {
    fn default() -> Self {
        RestoreDef {
            cache: Spanned::new(0..0, "lru:32".into()),
            retained_at_end: true,
            newest_after_each: false,
            verify: true,
            to_file: false,
            cold: false,
        }
    }
}

/// `file:line:column` of a byte span of `text`.
fn at(file: &Path, text: &str, span: Range<usize>) -> String {
    let start = span.start.min(text.len());
    let before = &text[..start];
    let line = before.matches('\n').count() + 1;
    let col = start - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("{}:{line}:{col}", file.display())
}

impl Experiment {
    pub fn load(path: &Path) -> Result<Experiment> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read experiment file {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, path, base)
    }

    /// Parse an experiment; relative dataset paths are relative to `base`.
    pub fn parse(text: &str, file: &Path, base: &Path) -> Result<Experiment> {
        let def: FileDef = toml::from_str(text).map_err(|e| {
            let msg = e.message().trim().to_string();
            match e.span() {
                Some(s) => anyhow!("{}: {msg}", at(file, text, s)),
                None => anyhow!("{}: {msg}", file.display()),
            }
        })?;
        let err = |span: Range<usize>, msg: String| anyhow!("{}: {msg}", at(file, text, span));

        let mode = match def.mode.as_ref().map(|m| (m.span(), m.get_ref().as_str())) {
            None | Some((_, "data")) => Mode::Data,
            Some((_, "trace")) => Mode::Trace,
            Some((s, m)) => {
                return Err(err(
                    s,
                    format!("unknown mode '{m}' (expected data or trace)"),
                ))
            }
        };
        let interleave = match &def.interleave {
            None => 1,
            Some(i) if *i.get_ref() >= 1 => *i.get_ref(),
            Some(i) => {
                return Err(err(
                    i.span(),
                    "interleave must be at least 1 (1 = one backup at a time)".into(),
                ))
            }
        };

        let ds = def.dataset.get_ref();
        let given =
            ds.dir.is_some() as u8 + ds.synthetic.is_some() as u8 + ds.scale.is_some() as u8;
        if given != 1 {
            return Err(err(
                def.dataset.span(),
                "[dataset] needs exactly one of dir, synthetic or scale".into(),
            ));
        }
        let dataset = if let Some(d) = &ds.dir {
            let p = base.join(d.get_ref());
            if !p.is_dir() {
                return Err(err(
                    d.span(),
                    format!("dataset directory {} does not exist", p.display()),
                ));
            }
            Dataset::Dir(p)
        } else if let Some(s) = &ds.synthetic {
            s.get_ref().validate().map_err(|e| err(s.span(), e))?;
            Dataset::Synthetic(s.get_ref().clone())
        } else {
            let s = ds.scale.as_ref().expect("one given");
            if mode != Mode::Trace {
                return Err(err(
                    s.span(),
                    "a scale dataset has no bytes: set mode = \"trace\"".into(),
                ));
            }
            Dataset::Scale(s.get_ref().clone())
        };

        let r = &def.repo;
        let chunker =
            ChunkerConfig::parse(r.chunker.get_ref()).map_err(|e| err(r.chunker.span(), e))?;
        let hash: HashAlgo = r
            .hash
            .get_ref()
            .parse()
            .map_err(|e| err(r.hash.span(), e))?;
        let cs = r.container_size.get_ref().0;
        if !(4096..=u32::MAX as u64).contains(&cs) {
            return Err(err(
                r.container_size.span(),
                format!("container size {cs} is out of range 4KiB..4GiB"),
            ));
        }

        let mut approaches = Vec::new();
        for a in &def.approaches {
            let d = builtin(a.get_ref()).map_err(|e| err(a.span(), e))?;
            approaches.push(d.resolve().map_err(|e| err(a.span(), e))?);
        }
        for a in &def.approach {
            approaches.push(a.get_ref().resolve().map_err(|e| err(a.span(), e))?);
        }
        if approaches.is_empty() {
            return Err(anyhow!(
                "{}: no approaches: add approaches = [\"naive\", ...] or [[approach]] tables",
                file.display()
            ));
        }
        for (i, a) in approaches.iter().enumerate() {
            if approaches[..i].iter().any(|b| b.name == a.name) {
                bail!("{}: approach '{}' is listed twice", file.display(), a.name);
            }
        }

        let retention = match &def.retention {
            None => None,
            Some(r) => {
                r.get_ref().validate().map_err(|e| err(r.span(), e))?;
                Some(r.get_ref().clone())
            }
        };
        let rd = &def.restore;
        let cache = CacheSpec::parse(rd.cache.get_ref()).map_err(|e| err(rd.cache.span(), e))?;
        let name = def.name.clone().unwrap_or_else(|| {
            file.file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_else(|| "experiment".into())
        });
        let compression = match &r.compression {
            None => tessera_core::Compression::Off,
            Some(c) => c.get_ref().parse().map_err(|e| err(c.span(), e))?,
        };
        Ok(Experiment {
            compression,
            encrypted: r.encrypted,
            threads: r.threads,
            name,
            file: file.to_path_buf(),
            mode,
            dataset,
            chunker,
            hash,
            container_size: cs as u32,
            frame_size: r
                .frame_size
                .map_or(tessera_core::catalog::DEFAULT_FRAME_SIZE, |b| b.0 as u32),
            backend: r.backend.unwrap_or(BackendKind::Memory),
            index: r.index.unwrap_or_default(),
            approaches,
            retention,
            restore: RestorePlan {
                cache,
                retained_at_end: rd.retained_at_end,
                newest_after_each: rd.newest_after_each,
                verify: rd.verify,
                to_file: rd.to_file,
                cold: rd.cold,
            },
            interleave,
            fastcopy_doublings: def.fastcopy_doublings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Experiment> {
        Experiment::parse(text, Path::new("exp.toml"), Path::new("."))
    }

    const OK: &str = r#"
name = "t"
mode = "trace"
approaches = ["naive", "capping:10"]

[dataset.synthetic]
seed = 3
sources = 2
versions = 3
file_size_max = "64KiB"

[repo]
chunker = "fastcdc:1k/4k/32k"
container_size = "1MiB"

[retention]
retain = 4
delete = 2

[[approach]]
name = "mine"
rewrite = "har:0.6"
gc = "gccdf"
"#;

    #[test]
    fn parses_a_full_experiment() {
        let e = parse(OK).unwrap();
        assert_eq!(e.mode, Mode::Trace);
        assert_eq!(e.container_size, 1 << 20);
        assert_eq!(e.approaches.len(), 3);
        assert_eq!(e.approaches[2].name, "mine");
        assert_eq!(e.retention.as_ref().unwrap().delete, 2);
        match &e.dataset {
            Dataset::Synthetic(s) => {
                assert_eq!((s.sources, s.file_size_max), (2, ByteSize(64 << 10)))
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn errors_name_file_and_line() {
        let cases = [
            (OK.replace("\"capping:10\"", "\"fancy\""), "exp.toml:4:", "unknown approach 'fancy'"),
            (OK.replace("retain = 4", "retain = four"), "exp.toml:17:", ""),
            (OK.replace("seed = 3", "seeds = 3"), "exp.toml:7:", "seeds"),
            (OK.replace("rewrite = \"har:0.6\"", "rewrite = \"zip\""), "exp.toml:20:", "mine"),
            (
                OK.replace("[dataset.synthetic]\nseed = 3\nsources = 2\nversions = 3\nfile_size_max = \"64KiB\"", "[dataset]\ndir = \"no/such/dir\""),
                "exp.toml:7:",
                "does not exist",
            ),
            (OK.replace("chunker = \"fastcdc:1k/4k/32k\"", "chunker = \"cdc\""), "exp.toml:13:", "bad chunker"),
        ];
        for (text, loc, what) in cases {
            let e = format!("{:#}", parse(&text).unwrap_err());
            assert!(
                e.starts_with(loc) && e.contains(what),
                "expected {loc} … {what}: {e}"
            );
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }
}
