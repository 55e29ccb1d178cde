//! Online GC across processes (issue 15): backups of changing data,
//! forgets, GCs of every mark and restores run at once on one repository,
//! round after round with random timing and some SIGKILLs. Every backup a
//! process reported committed (and nobody forgot) stays listed, every
//! listed backup restores byte for byte, `tessera check` finds no problem
//! (leftovers aside), and GCs resurrected chunks that concurrent backups
//! deduplicated against.
//!
//! Each round forgets one family of versions first (its chunks die), then
//! starts at once: a GC, a backup that brings the forgotten version back
//! (deduplicating against the dead chunks), a backup of a new version, a
//! forget of an older backup, and a restore. In one round of three the
//! backup that brings the version back commits while the GC is stopped
//! between its mark and its cutoff (GC must resurrect what it
//! deduplicated), in another while it is stopped after its cutoff (the
//! backup must store its own copies); the GC's test hook
//! `TESSERA_TEST_GC_PAUSE` stops it there, so these interleavings do not
//! depend on timing. The third round is left to timing alone, which
//! rarely resurrects: here a GC's mark takes under a millisecond, and a
//! backup of this size writes its one record just before it commits.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{restored, snapshots, tessera_process as tessera, Rng};

const FAMILIES: u64 = 4;
/// Rounds of a run.
const ROUNDS: u64 = 12;

/// Version `edit` of family `fam`: the family's own bytes with a few
/// edits, so versions of a family deduplicate against each other and
/// families do not.
fn version(fam: u64, edit: u64) -> Vec<u8> {
    let mut r = Rng((fam + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut v: Vec<u8> = (0..1_200_000).map(|_| r.next() as u8).collect();
    let mut e = Rng(edit.wrapping_mul(0x1234_5678_9ABC_DEF1) | 1);
    for _ in 0..2 {
        let at = e.below(v.len() as u64 - 40_000) as usize;
        for b in &mut v[at..at + 30_000] {
            *b = e.next() as u8;
        }
    }
    v
}

/// What a backup name (its file's absolute path) holds.
type Names = BTreeMap<String, (u64, u64)>;

fn listed(repo: &Path, names: &Names) -> BTreeMap<u64, String> {
    snapshots(repo)
        .into_iter()
        .map(|(id, name)| {
            assert!(names.contains_key(&name), "unknown backup {name}");
            (id, name)
        })
        .collect()
}

/// Wait until the paused GC `gc` created `dir/step` (or ended: then the
/// round reports its failure).
fn wait_for_pause(gc: &mut Child, dir: &Path, step: &str) {
    while !dir.join(step).exists() {
        if gc.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Let the paused GC go on past `step`.
fn release(dir: &Path, step: &str) {
    std::fs::write(dir.join(format!("{step}.go")), b"").unwrap();
}

/// A process of the round, perhaps to be killed at `kill_at`.
struct Job {
    what: String,
    child: Child,
    kill_at: Option<Duration>,
    killed: bool,
    /// A backup's name.
    name: Option<String>,
    /// A forget's ids.
    forgets: Vec<u64>,
    gc: bool,
}

#[test]
fn backups_forgets_gcs_and_restores_at_once() {
    let seed = std::env::var("TESSERA_ONLINE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_0015u64);
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("repo");
    let dir = t.path().to_path_buf();
    assert!(tessera(&repo)
        .args([
            "init",
            "--container-size",
            "64KiB",
            "--chunker",
            "fastcdc:1k/4k/16k"
        ])
        .status()
        .unwrap()
        .success());
    let mut r = Rng(seed | 1);
    let mut names: Names = BTreeMap::new();
    let mut file_no = 0u64;
    let mut write = |fam: u64, edit: u64, names: &mut Names| -> PathBuf {
        file_no += 1;
        let p = dir.join(format!("f{fam}-e{edit}-{file_no}.bin"));
        std::fs::write(&p, version(fam, edit)).unwrap();
        let abs = std::path::absolute(&p).unwrap();
        names.insert(abs.display().to_string(), (fam, edit));
        abs
    };
    // Backups a process reported done that no forget targeted: must stay.
    let mut committed: BTreeSet<String> = BTreeSet::new();
    // Names a forget targeted (perhaps forgotten).
    let mut targeted: BTreeSet<String> = BTreeSet::new();
    // Every family starts with one backup.
    for fam in 0..FAMILIES {
        let p = write(fam, 0, &mut names);
        assert!(tessera(&repo)
            .arg("backup")
            .arg(&p)
            .status()
            .unwrap()
            .success());
        committed.insert(p.display().to_string());
    }
    let marks = ["logical", "physical", "physical+"];
    let (mut resurrections, mut gcs_done, mut kills, mut restores) = (0u64, 0, 0, 0);
    let mut paused_rounds = 0u64;
    let mut round = 0u64;
    while round < ROUNDS {
        round += 1;
        // Where the GC stops while the forgotten version comes back.
        let pause = match round % 3 {
            1 => Some("planned"),
            2 => Some("cut"),
            _ => None,
        };
        let pause_dir = dir.join(format!("pause-{round}"));
        let now = listed(&repo, &names);
        // Forget one family whole: its chunks are dead until a GC.
        let fam_dead = round % FAMILIES;
        let dead: Vec<(u64, String)> = now
            .iter()
            .filter(|(_, n)| names[*n].0 == fam_dead)
            .map(|(i, n)| (*i, n.clone()))
            .collect();
        let revive = dead.last().map(|(_, n)| names[n]);
        if !dead.is_empty() {
            let mut c = tessera(&repo);
            c.arg("forget");
            for (id, n) in &dead {
                c.arg(id.to_string());
                targeted.insert(n.clone());
                committed.remove(n);
            }
            let out = c.output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: forget failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut jobs: Vec<Job> = Vec::new();
        let spawn = |what: String, mut c: Command, killable: bool, r: &mut Rng| -> Job {
            std::thread::sleep(Duration::from_millis(r.below(40)));
            let kill_at =
                (killable && r.below(6) == 0).then(|| Duration::from_millis(5 + r.below(150)));
            let child = c
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            Job {
                what,
                child,
                kill_at,
                killed: false,
                name: None,
                forgets: Vec::new(),
                gc: false,
            }
        };
        // The GC, of each mark in turn, each pause seeing every mark
        // (GCCDF's sweep every fourth round).
        let mark = marks[((round / 3) % 3) as usize];
        let strategy = if round.is_multiple_of(4) {
            "gccdf"
        } else {
            "naive"
        };
        let mut c = tessera(&repo);
        c.args(["gc", "--json", "--mark", mark, "--strategy", strategy]);
        if pause.is_some() {
            std::fs::create_dir(&pause_dir).unwrap();
            c.env("TESSERA_TEST_GC_PAUSE", &pause_dir);
        }
        let mut j = spawn(
            format!("gc --mark {mark} --strategy {strategy}"),
            c,
            pause.is_none(),
            &mut r,
        );
        j.gc = true;
        jobs.push(j);
        // The forgotten version again: deduplicates against dead chunks.
        let revive = revive.map(|(fam, edit)| write(fam, edit, &mut names));
        if let (Some(p), None) = (&revive, pause) {
            let mut c = tessera(&repo);
            c.arg("backup").arg(p);
            let mut j = spawn(format!("backup {}", p.display()), c, true, &mut r);
            j.name = Some(p.display().to_string());
            jobs.push(j);
        }
        // A new version of another family.
        let fam_new = (round + 2) % FAMILIES;
        let p = write(fam_new, round, &mut names);
        let mut c = tessera(&repo);
        c.arg("backup").arg(&p);
        let mut j = spawn(format!("backup {}", p.display()), c, true, &mut r);
        j.name = Some(p.display().to_string());
        jobs.push(j);
        // A forget of an older backup of a third family, now and then.
        let fam_old = (round + 1) % FAMILIES;
        if round.is_multiple_of(2) {
            if let Some((id, n)) = now
                .iter()
                .find(|(_, n)| names[*n].0 == fam_old && !targeted.contains(*n))
            {
                targeted.insert(n.clone());
                committed.remove(n);
                let mut c = tessera(&repo);
                c.args(["forget", &id.to_string()]);
                let mut j = spawn(format!("forget {id}"), c, true, &mut r);
                j.forgets.push(*id);
                jobs.push(j);
            }
        }
        // A restore of a backup that must stay, checked byte for byte.
        let safe: Vec<(u64, String)> = now
            .iter()
            .filter(|(_, n)| committed.contains(*n))
            .map(|(i, n)| (*i, n.clone()))
            .collect();
        let restore = (!safe.is_empty()).then(|| safe[r.below(safe.len() as u64) as usize].clone());
        // Read its output as it comes: a GC waits for the reader to end.
        let restore_job = restore.map(|(id, n)| {
            let mut c = tessera(&repo);
            c.args(["restore", &id.to_string(), "--stdout"]);
            let job = spawn(format!("restore {id}"), c, false, &mut r);
            let what = job.what.clone();
            (
                std::thread::spawn(move || job.child.wait_with_output()),
                what,
                n,
            )
        });
        // With the GC stopped at `step`, the forgotten version comes back
        // in a backup run to its end; then the GC goes on.
        if let Some(step) = pause {
            let (first, then) = match step {
                "planned" => ("planned", "cut"),
                _ => ("cut", "planned"),
            };
            release(&pause_dir, then);
            wait_for_pause(&mut jobs[0].child, &pause_dir, first);
            let gc_paused = pause_dir.join(first).exists();
            let out = revive
                .as_ref()
                .map(|p| tessera(&repo).arg("backup").arg(p).output().unwrap());
            release(&pause_dir, first);
            if let (Some(p), Some(out)) = (&revive, out) {
                assert!(
                    out.status.success(),
                    "round {round}: backup {} with the GC stopped at {step} failed: {}",
                    p.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                committed.insert(p.display().to_string());
                if gc_paused {
                    paused_rounds += 1;
                }
            }
        }
        // Run them out, killing the chosen ones.
        let t0 = Instant::now();
        for j in &mut jobs {
            loop {
                if j.child.try_wait().unwrap().is_some() {
                    break;
                }
                if j.kill_at.is_some_and(|k| t0.elapsed() >= k) {
                    let _ = j.child.kill();
                    j.killed = true;
                    kills += 1;
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        for j in jobs {
            let out = j.child.wait_with_output().unwrap();
            if j.killed && !out.status.success() {
                continue; // perhaps committed: checked when listed
            }
            assert!(
                out.status.success(),
                "round {round}: {} failed: {}",
                j.what,
                String::from_utf8_lossy(&out.stderr)
            );
            if let Some(n) = j.name {
                committed.insert(n);
            }
            if j.gc {
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                resurrections += v["resurrections"].as_u64().unwrap();
                gcs_done += 1;
            }
        }
        if let Some((job, what, n)) = restore_job {
            let out = job.join().unwrap().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {what} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let (fam, edit) = names[&n];
            assert!(
                out.stdout == version(fam, edit),
                "round {round}: {what} restored wrong bytes"
            );
            restores += 1;
        }
        // Nothing reported committed (and not forgotten) is lost.
        let now: BTreeSet<String> = listed(&repo, &names).into_values().collect();
        for n in &committed {
            assert!(now.contains(n), "round {round}: committed backup {n} lost");
        }
    }
    // Every listed backup restores byte for byte; check finds no problem.
    let all = listed(&repo, &names);
    for (id, n) in &all {
        let (fam, edit) = names[n];
        assert!(
            restored(&repo, *id) == version(fam, edit),
            "backup {id} ({n}) restored wrong bytes"
        );
    }
    let out = tessera(&repo).args(["check", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["problems"].as_array().unwrap().is_empty(),
        "check: {v}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "online: {round} rounds ({paused_rounds} with a backup inside a stopped GC), \
         {gcs_done} GCs done, {kills} kills, {restores} restores, \
         {resurrections} resurrections, {} backups listed",
        all.len()
    );
    assert!(gcs_done > 0 && restores > 0);
    assert!(paused_rounds > 0, "no backup ran inside a stopped GC");
    assert!(
        resurrections > 0,
        "no GC resurrected a chunk that a backup deduplicated between its mark and its cutoff"
    );
}
