//! `tessera backup --rewrite` and `tessera restore --cache`.

use crate::common::{fails, json, ok, tessera};

fn data(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn rewrite_and_cache_specs_work_end_to_end() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    ok(tessera(&repo).args(["init", "--container-size", "64KiB"]));
    let v1 = data(1, 600_000);
    let mut v2 = v1.clone();
    v2[100_000..110_000].copy_from_slice(&data(2, 10_000));
    v2.splice(300_000..300_000, data(3, 50_000));
    let f = t.path().join("f.bin");
    for (v, spec) in [
        (&v1, "smr:20"),
        (&v2, "smr:20"),
        (&v1, "capping:2"),
        (&v2, "har"),
    ] {
        std::fs::write(&f, v).unwrap();
        let r = json(&ok(tessera(&repo).args([
            "backup",
            f.to_str().unwrap(),
            "--rewrite",
            spec,
            "--json",
        ])));
        assert!(r["rewritten_bytes"].as_u64().is_some(), "{r}");
        assert!(r["segments"].as_u64().unwrap() >= 1, "{r}");
    }
    let human = ok(tessera(&repo).args([
        "backup",
        f.to_str().unwrap(),
        "--rewrite",
        "capping:1",
        "--segment-size",
        "128KiB",
    ]));
    assert!(human.contains("rewrite capping:1:"), "{human}");
    for (id, want) in [(1, &v1), (2, &v2), (4, &v2)] {
        for cache in ["opt:30", "faa:4", "lru:8", "16"] {
            let out = tessera(&repo)
                .args(["restore", &id.to_string(), "--stdout", "--cache", cache])
                .output()
                .unwrap();
            assert!(out.status.success(), "{cache}");
            assert!(out.stdout == *want, "backup {id} under {cache}");
        }
    }
    let r = json(&ok(tessera(&repo).args([
        "restore",
        "2",
        "-t",
        t.path().join("out").to_str().unwrap(),
        "--cache",
        "opt:30",
        "--json",
    ])));
    assert!(r["data_containers_read"].as_u64().unwrap() > 0);
    assert_eq!(r["cache_containers"], 30);
}

#[test]
fn bad_specs_give_one_clear_error_line() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    ok(tessera(&repo).arg("init"));
    let f = t.path().join("f.bin");
    std::fs::write(&f, b"hello").unwrap();
    let p = f.to_str().unwrap();
    fails(
        tessera(&repo).args(["backup", p, "--rewrite", "smr:0"]),
        "--rewrite: bad smr level '0'",
    );
    fails(
        tessera(&repo).args(["backup", p, "--rewrite", "capping"]),
        "capping needs a level",
    );
    fails(
        tessera(&repo).args(["backup", p, "--rewrite", "har:1.5"]),
        "bad har threshold",
    );
    fails(
        tessera(&repo).args(["backup", p, "--rewrite", "lru:3"]),
        "unknown rewrite policy",
    );
    fails(
        tessera(&repo).args([
            "backup",
            p,
            "--rewrite",
            "smr:4",
            "--rewrite-segment",
            "lots",
        ]),
        "--rewrite-segment",
    );
    ok(tessera(&repo).args(["backup", p]));
    fails(
        tessera(&repo).args(["restore", "1", "--stdout", "--cache", "opt:0"]),
        "--cache: bad cache size",
    );
    fails(
        tessera(&repo).args(["restore", "1", "--stdout", "--cache", "mru:3"]),
        "unknown restore cache",
    );
    fails(
        tessera(&repo).args(["restore", "1", "--stdout", "--cache", "x"]),
        "bad cache size",
    );
}
