//! The committed experiment files parse, and `demo.toml` is what the demo runs.

use std::path::Path;
use tessera_lab::approach::DEMO_APPROACHES;
use tessera_lab::demo;
use tessera_lab::experiment::{Dataset, Experiment};

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments")
}

#[test]
fn every_committed_experiment_parses() {
    let mut n = 0;
    for e in std::fs::read_dir(dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            Experiment::load(&p).unwrap_or_else(|e| panic!("{e:#}"));
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
