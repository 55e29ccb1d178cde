//! Synthetic version series after Tarasov et al. (ATC '12): a file tree
//! evolves from version to version by file creations, deletions and
//! modifications (in-place overwrites, insertions and deletions of byte
//! ranges). Everything derives from one seed, so a series is reproducible
//! byte for byte; `sources > 1` interleaves independent lineages into one
//! backup sequence (the papers' MIX case).

use crate::tar;
use anyhow::{Context, Result};
use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tessera_core::units::ByteSize;

/// Generator parameters; rates are per version, relative to the number of
/// files of the previous version.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SynthConfig {
    pub seed: u64,
    /// Independent lineages interleaved into one backup sequence.
    pub sources: usize,
    /// Versions per source.
    pub versions: usize,
    /// Files in a source's first version.
    pub files: usize,
    /// File sizes are log-uniform in [min, max].
    pub file_size_min: ByteSize,
    pub file_size_max: ByteSize,
    /// Expected new files per version / files.
    pub create_rate: f64,
    /// Probability that a file is deleted in a version.
    pub delete_rate: f64,
    /// Probability that a surviving file is modified in a version.
    pub modify_rate: f64,
    /// Mean number of edits in a modified file.
    pub edits_per_file: f64,
    /// Edit lengths are log-uniform in [min, max].
    pub edit_size_min: ByteSize,
    pub edit_size_max: ByteSize,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            seed: 1,
            sources: 1,
            versions: 10,
            files: 64,
            file_size_min: ByteSize(4 << 10),
            file_size_max: ByteSize(256 << 10),
            create_rate: 0.02,
            delete_rate: 0.01,
            modify_rate: 0.10,
            edits_per_file: 2.0,
            edit_size_min: ByteSize(64),
            edit_size_max: ByteSize(16 << 10),
        }
    }
}

impl SynthConfig {
    pub fn validate(&self) -> std::result::Result<(), String> {
        let rate = |n: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(format!("{n} must be in 0..1 (got {v})"))
            }
        };
        rate("create_rate", self.create_rate)?;
        rate("delete_rate", self.delete_rate)?;
        rate("modify_rate", self.modify_rate)?;
        if self.sources == 0 || self.versions == 0 || self.files == 0 {
            return Err("sources, versions and files must be at least 1".into());
        }
        if self.file_size_min.0 == 0 || self.file_size_min.0 > self.file_size_max.0 {
            return Err("need 0 < file_size_min <= file_size_max".into());
        }
        if self.edit_size_min.0 == 0 || self.edit_size_min.0 > self.edit_size_max.0 {
            return Err("need 0 < edit_size_min <= edit_size_max".into());
        }
        if self.edits_per_file.is_nan() || self.edits_per_file < 1.0 {
            return Err("edits_per_file must be at least 1".into());
        }
        Ok(())
    }
}

/// Log-uniform integer in [lo, hi]: small edits and files are common, big ones rare.
fn log_uniform(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> u64 {
    if lo >= hi {
        return lo;
    }
    let (a, b) = ((lo as f64).ln(), ((hi + 1) as f64).ln());
    let v = rng.random_range(a..b).exp() as u64;
    v.clamp(lo, hi)
}

fn random_bytes(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

/// One source: a file tree and the random stream that evolves it.
pub struct Lineage {
    cfg: SynthConfig,
    rng: ChaCha8Rng,
    files: BTreeMap<String, Vec<u8>>,
    next_file: u64,
}

impl Lineage {
    /// Version 0 of source `source`.
    pub fn new(cfg: &SynthConfig, source: usize) -> Self {
        let seed = cfg
            .seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(source as u64);
        let mut l = Lineage {
            cfg: cfg.clone(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            files: BTreeMap::new(),
            next_file: 0,
        };
        for _ in 0..cfg.files {
            l.create_file();
        }
        l
    }

    pub fn files(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.files
    }

    fn create_file(&mut self) {
        let n = self.next_file;
        self.next_file += 1;
        let size = log_uniform(
            &mut self.rng,
            self.cfg.file_size_min.0,
            self.cfg.file_size_max.0,
        );
        let dir = self
            .rng
            .random_range(0..(self.cfg.files as u64 / 16).max(1));
        let path = format!("d{dir:03}/f{n:06}.dat");
        let data = random_bytes(&mut self.rng, size as usize);
        self.files.insert(path, data);
    }

    fn modify(rng: &mut ChaCha8Rng, cfg: &SynthConfig, data: &mut Vec<u8>) {
        // Uniform in 1..=2m-1 has mean m.
        let max_edits = (2.0 * cfg.edits_per_file - 1.0).round().max(1.0) as u64;
        let edits = rng.random_range(1..=max_edits);
        for _ in 0..edits {
            let len = log_uniform(rng, cfg.edit_size_min.0, cfg.edit_size_max.0) as usize;
            let pos = rng.random_range(0..=data.len());
            match rng.random_range(0..3u8) {
                0 => {
                    let end = (pos + len).min(data.len());
                    let fresh = random_bytes(rng, end - pos);
                    data[pos..end].copy_from_slice(&fresh);
                }
                1 => {
                    let fresh = random_bytes(rng, len);
                    data.splice(pos..pos, fresh);
                }
                _ => {
                    // Never empty a file: an empty file is a deletion in disguise.
                    let end = (pos + len).min(data.len());
                    if data.len() - (end - pos) >= 1 {
                        data.drain(pos..end);
                    }
                }
            }
        }
    }

    /// Evolve to the next version.
    pub fn advance(&mut self) {
        let before = self.files.len();
        let names: Vec<String> = self.files.keys().cloned().collect();
        for name in names {
            if self.rng.random::<f64>() < self.cfg.delete_rate {
                self.files.remove(&name);
            } else if self.rng.random::<f64>() < self.cfg.modify_rate {
                let data = self.files.get_mut(&name).expect("listed");
                Self::modify(&mut self.rng, &self.cfg, data);
            }
        }
        // Stochastic rounding keeps the expected count exact for small trees.
        let want = before as f64 * self.cfg.create_rate;
        let mut create = want.floor() as usize;
        if self.rng.random::<f64>() < want.fract() {
            create += 1;
        }
        for _ in 0..create {
            self.create_file();
        }
    }

    /// The version as a deterministic tar image.
    pub fn tar_image(&self) -> Vec<u8> {
        tar::image(self.files.iter().map(|(p, d)| (p.as_str(), d.as_slice())))
    }
}

/// One backup of the generated sequence.
#[derive(Clone, Debug)]
pub struct SeriesVersion {
    pub source: usize,
    pub version: usize,
    pub name: String,
}

/// The backup order: version-major, sources round-robin.
pub fn sequence(cfg: &SynthConfig) -> Vec<SeriesVersion> {
    let mut v = Vec::new();
    for version in 0..cfg.versions {
        for source in 0..cfg.sources {
            let i = v.len();
            v.push(SeriesVersion {
                source,
                version,
                name: format!("{i:05}-s{source}-v{version:04}"),
            });
        }
    }
    v
}

/// Generate the series: call `emit(version, tar image)` in backup order.
pub fn for_each_image(
    cfg: &SynthConfig,
    mut emit: impl FnMut(&SeriesVersion, &[u8]) -> Result<()>,
) -> Result<()> {
    cfg.validate().map_err(anyhow::Error::msg)?;
    let mut lineages: Vec<Lineage> = (0..cfg.sources).map(|s| Lineage::new(cfg, s)).collect();
    for sv in sequence(cfg) {
        let l = &mut lineages[sv.source];
        if sv.version > 0 {
            l.advance();
        }
        emit(&sv, &l.tar_image())?;
    }
    Ok(())
}

/// Write the series as `<name>.tar` files into `dir`; returns their paths.
pub fn write_images(cfg: &SynthConfig, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut out = Vec::new();
    for_each_image(cfg, |sv, img| {
        let p = dir.join(format!("{}.tar", sv.name));
        std::fs::write(&p, img).with_context(|| format!("cannot write {}", p.display()))?;
        out.push(p);
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SynthConfig {
        SynthConfig {
            seed: 7,
            sources: 2,
            versions: 4,
            files: 20,
            file_size_max: ByteSize(32 << 10),
            ..Default::default()
        }
    }

    fn images(c: &SynthConfig) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        for_each_image(c, |_, img| {
            v.push(img.to_vec());
            Ok(())
        })
        .unwrap();
        v
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let a = images(&cfg());
        assert_eq!(a.len(), 8);
        assert_eq!(a, images(&cfg()));
        let b = images(&SynthConfig { seed: 8, ..cfg() });
        assert_ne!(a[0], b[0]);
        // Sources are independent lineages, not copies.
        assert_ne!(a[0], a[1]);
    }

    #[test]
    fn measured_change_rates_match_configuration() {
        let c = SynthConfig {
            files: 400,
            file_size_min: ByteSize(512),
            file_size_max: ByteSize(4096),
            edit_size_max: ByteSize(256),
            create_rate: 0.05,
            delete_rate: 0.03,
            modify_rate: 0.2,
            ..cfg()
        };
        let mut l = Lineage::new(&c, 0);
        let (mut prev_total, mut created, mut deleted, mut modified, mut survivors) =
            (0usize, 0usize, 0usize, 0usize, 0usize);
        for _ in 0..30 {
            let before = l.files().clone();
            l.advance();
            let after = l.files();
            prev_total += before.len();
            created += after.keys().filter(|k| !before.contains_key(*k)).count();
            deleted += before.keys().filter(|k| !after.contains_key(*k)).count();
            for (k, v) in &before {
                if let Some(w) = after.get(k) {
                    survivors += 1;
                    if v != w {
                        modified += 1;
                    }
                }
            }
        }
        let close = |what: &str, got: f64, want: f64| {
            assert!(
                (got - want).abs() <= want * 0.15,
                "{what}: measured {got:.4}, configured {want}"
            );
        };
        close("create", created as f64 / prev_total as f64, c.create_rate);
        close("delete", deleted as f64 / prev_total as f64, c.delete_rate);
        // An edit can (rarely) leave a file unchanged, so allow a little slack below.
        close("modify", modified as f64 / survivors as f64, c.modify_rate);
    }

    #[test]
    fn images_are_tar_with_every_file() {
        let c = cfg();
        let l = Lineage::new(&c, 0);
        let img = l.tar_image();
        assert_eq!(img.len() % 512, 0);
        let listed = tar::list(&img);
        let want: Vec<(String, usize)> = l
            .files()
            .iter()
            .map(|(k, v)| (k.clone(), v.len()))
            .collect();
        assert_eq!(listed, want);
    }
}
