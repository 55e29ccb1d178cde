//! The mfdedup layout through the CLI: init --layout, backup --source and
//! --no-arrange, arrange, forget --dry-run with exact bytes, stats per
//! chain, restore, check, and gc that only deletes categories.

use crate::common::{json, ok, ok_bytes, tessera};

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn mfdedup_layout_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("r");
    ok(tessera(&repo).args([
        "init",
        "--layout",
        "mfdedup",
        "--chunker",
        "fastcdc:1k/4k/16k",
    ]));
    let mut v = data(1, 300_000);
    let mut versions = Vec::new();
    let f = dir.path().join("disk.img");
    for i in 0..4u64 {
        v[(i as usize) * 50_000..(i as usize) * 50_000 + 20_000]
            .copy_from_slice(&data(10 + i, 20_000));
        std::fs::write(&f, &v).unwrap();
        let mut cmd = tessera(&repo);
        cmd.args(["backup", "--source", "disk", "--json"]).arg(&f);
        if i == 3 {
            cmd.arg("--no-arrange");
        }
        let r = json(&ok(&mut cmd));
        assert_eq!(r["backup"]["chain"], "disk");
        assert!(r["ndf_memory_bytes"].as_u64().unwrap() > 0);
        assert_eq!(r["arranged"].is_null(), i == 3);
        versions.push(v.clone());
    }
    let stats = json(&ok(tessera(&repo).args(["stats", "--json"])));
    assert_eq!(stats["layout"], "mfdedup");
    assert_eq!(stats["chains"][0]["behind"], 1);
    let out = ok(tessera(&repo).args(["arrange"]));
    assert!(out.contains("chain disk: arranged 1 version"), "{out}");
    let stats = json(&ok(tessera(&repo).args(["stats", "--json"])));
    let chain = &stats["chains"][0];
    assert_eq!(chain["behind"], 0);
    assert_eq!(chain["volumes"].as_array().unwrap().len(), 3);
    let stored = chain["stored_bytes"].as_u64().unwrap();
    // The dry run's bytes are exactly what forgetting frees.
    let dry = json(&ok(tessera(&repo).args([
        "forget",
        "--dry-run",
        "1",
        "--json",
    ])));
    let predicted = dry["freed"]["data_bytes"].as_u64().unwrap();
    assert!(predicted > 0);
    assert_eq!(dry["freed"]["volumes_deleted"], 1);
    let text = ok(tessera(&repo).args(["forget", "1"]));
    assert!(text.contains("copying nothing"), "{text}");
    let stats = json(&ok(tessera(&repo).args(["stats", "--json"])));
    assert_eq!(
        stored - stats["chains"][0]["stored_bytes"].as_u64().unwrap(),
        predicted
    );
    for (id, want) in [("2", &versions[1]), ("4", &versions[3])] {
        assert_eq!(
            &ok_bytes(tessera(&repo).args(["restore", id, "--stdout"])),
            want
        );
    }
    let check = ok(tessera(&repo).args(["check", "--read-data"]));
    assert!(check.contains("no problems found"), "{check}");
    let gc = ok(tessera(&repo).args(["gc"]));
    assert!(gc.contains("no mark-and-sweep"), "{gc}");
    assert!(gc.contains("freed 0 B of chunks"), "{gc}");
}
