//! The committed experiment files parse, and `demo.toml` is what the demo runs.

use std::path::Path;
use tessera_lab::approach::DEMO_APPROACHES;
use tessera_lab::demo;
use tessera_lab::experiment::{Dataset, Experiment};

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments")
}

/// Load an experiment file. A directory dataset is generated on demand
/// (`experiments/data/` is not committed): when it is absent, the file is
/// loaded from a scratch copy beside an empty directory of that name, so
/// everything else in it is still checked.
fn load_with_dataset(p: &Path) -> Experiment {
    let text = std::fs::read_to_string(p).unwrap();
    let doc: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let dir = doc
        .get("dataset")
        .and_then(|d| d.get("dir"))
        .and_then(|d| d.as_str());
    match dir {
        Some(d) if !p.parent().unwrap().join(d).exists() => {
            let scratch = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(scratch.path().join(d)).unwrap();
            let copy = scratch.path().join(p.file_name().unwrap());
            std::fs::write(&copy, &text).unwrap();
            Experiment::load(&copy).unwrap_or_else(|e| panic!("{}: {e:#}", p.display()))
        }
        _ => Experiment::load(p).unwrap_or_else(|e| panic!("{e:#}")),
    }
}

#[test]
fn every_committed_experiment_parses() {
    let mut n = 0;
    for e in std::fs::read_dir(dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            load_with_dataset(&p);
            n += 1;
        }
    }
    assert!(n >= 4, "{n} experiment files");
}

#[test]
fn demo_toml_matches_the_demo() {
    let file = Experiment::load(&dir().join("demo.toml")).unwrap();
    let code = demo::experiment(Vec::new(), Path::new("x"));
    let names: Vec<&str> = file.approaches.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, DEMO_APPROACHES);
    match (&file.dataset, &code.dataset) {
        (Dataset::Synthetic(a), Dataset::Synthetic(b)) => assert_eq!(a, b),
        d => panic!("{d:?}"),
    }
    assert_eq!(file.chunker, code.chunker);
    assert_eq!(file.hash, code.hash);
    assert_eq!(file.container_size, code.container_size);
    assert_eq!(file.retention, code.retention);
    assert_eq!(file.restore.cache, code.restore.cache);
    assert_eq!(file.mode, code.mode);
    assert_eq!(file.backend, code.backend);
}
