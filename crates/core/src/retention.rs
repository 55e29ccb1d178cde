//! Retention policies for `forget`: which backups to keep.
//!
//! Backups are taken newest first. `keep_last` keeps the newest N;
//! `keep_daily` / `keep_weekly` / `keep_monthly` / `keep_yearly` keep the
//! newest backup of each of the newest N days / ISO weeks / months / years
//! (UTC) that have backups; `keep_within` keeps every backup taken within
//! that many seconds of the newest one; `keep_tags` keeps every backup that
//! carries all the tags of one of its lists. A backup kept by any rule is
//! kept. Policies never reach into the catalog: they only compute the split,
//! so a dry run is the same computation.
//!
//! As in restic, a policy applies to each group of backups separately
//! ([`RetentionPolicy::apply_grouped`]): by default the backups of one host
//! and one set of paths form a group, so `--keep-last 3` keeps three of each.

use crate::catalog::{BackupEntry, BackupId};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    pub keep_last: Option<usize>,
    pub keep_daily: Option<usize>,
    pub keep_weekly: Option<usize>,
    pub keep_monthly: Option<usize>,
    pub keep_yearly: Option<usize>,
    /// Keep backups at most this many seconds older than the group's newest.
    pub keep_within: Option<u64>,
    /// Keep backups that carry every tag of one of these lists.
    pub keep_tags: Vec<Vec<String>>,
}

/// The decision: ids to keep and to forget, both newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RetentionPlan {
    pub keep: Vec<BackupId>,
    pub forget: Vec<BackupId>,
}

/// What backups are grouped by before a policy applies (`--group-by`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupBy {
    pub host: bool,
    pub paths: bool,
    pub tags: bool,
}

impl Default for GroupBy {
    /// host and paths, as restic.
    fn default() -> Self {
        GroupBy {
            host: true,
            paths: true,
            tags: false,
        }
    }
}

impl std::str::FromStr for GroupBy {
    type Err = String;

    /// A comma-separated subset of `host`, `paths`, `tags`; empty (or
    /// `none`) puts every backup in one group.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut g = GroupBy {
            host: false,
            paths: false,
            tags: false,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "host" => g.host = true,
                "paths" | "path" => g.paths = true,
                "tags" | "tag" => g.tags = true,
                "none" => {}
                other => {
                    return Err(format!(
                        "--group-by: unknown criterion '{other}' (host, paths, tags, or none)"
                    ))
                }
            }
        }
        Ok(g)
    }
}

/// The values a group of backups shares (only the grouped ones are set).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct GroupKey {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}

impl GroupBy {
    /// The group `b` belongs to. Paths and tags are compared as sets; a
    /// backup that recorded no paths (made before they were recorded, or of
    /// a stream) is grouped by its name.
    pub fn key(&self, b: &BackupEntry) -> GroupKey {
        let sorted = |v: &[String]| {
            let mut v = v.to_vec();
            v.sort();
            v.dedup();
            v
        };
        GroupKey {
            host: self.host.then(|| b.meta.host.clone()),
            paths: self.paths.then(|| {
                if b.meta.paths.is_empty() {
                    vec![b.name.clone()]
                } else {
                    sorted(&b.meta.paths)
                }
            }),
            tags: self.tags.then(|| sorted(&b.meta.tags)),
        }
    }
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(h) = &self.host {
            parts.push(format!("host {h}"));
        }
        if let Some(p) = &self.paths {
            parts.push(format!("paths {}", p.join(", ")));
        }
        if let Some(t) = &self.tags {
            parts.push(format!("tags [{}]", t.join(",")));
        }
        if parts.is_empty() {
            f.write_str("all backups")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// One group's share of a grouped plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GroupPlan {
    pub group: GroupKey,
    #[serde(flatten)]
    pub plan: RetentionPlan,
}

const DAY: u64 = 86_400;

/// Days since 1970-01-01 → (year, month) (proleptic Gregorian).
fn year_month(days: i64) -> (i64, u32) {
    let (y, m, _) = crate::clock::civil_from_days(days);
    (y, m)
}

/// Calendar bucket of a unix time (UTC): day, week, month or year number.
type Bucket = fn(u64) -> i64;

fn day(t: u64) -> i64 {
    (t / DAY) as i64
}
/// 1970-01-01 was a Thursday: shifted so weeks start on Monday (ISO).
fn week(t: u64) -> i64 {
    (day(t) + 3).div_euclid(7)
}
fn month(t: u64) -> i64 {
    let (y, m) = year_month(day(t));
    y * 12 + m as i64
}
fn year(t: u64) -> i64 {
    year_month(day(t)).0
}

/// Whether `b` carries every tag of `list`.
pub fn has_tags(b: &BackupEntry, list: &[String]) -> bool {
    list.iter().all(|t| b.meta.tags.contains(t))
}

impl RetentionPolicy {
    pub fn is_empty(&self) -> bool {
        self.keep_last.is_none()
            && self.keep_daily.is_none()
            && self.keep_weekly.is_none()
            && self.keep_monthly.is_none()
            && self.keep_yearly.is_none()
            && self.keep_within.is_none()
            && self.keep_tags.is_empty()
    }

    /// The policy over `backups` as one group.
    pub fn apply(&self, backups: &[BackupEntry]) -> RetentionPlan {
        let mut order: Vec<&BackupEntry> = backups.iter().collect();
        order.sort_by_key(|b| std::cmp::Reverse((b.time, b.id)));
        let rules: [(Option<usize>, Bucket); 4] = [
            (self.keep_daily, day),
            (self.keep_weekly, week),
            (self.keep_monthly, month),
            (self.keep_yearly, year),
        ];
        let mut keep = vec![false; order.len()];
        if let Some(n) = self.keep_last {
            keep.iter_mut().take(n).for_each(|k| *k = true);
        }
        for (n, bucket) in rules {
            let Some(n) = n else { continue };
            let mut last = None;
            let mut taken = 0;
            for (i, b) in order.iter().enumerate() {
                let k = bucket(b.time);
                if last != Some(k) && taken < n {
                    keep[i] = true;
                    taken += 1;
                }
                last = Some(k);
            }
        }
        if let (Some(within), Some(newest)) = (self.keep_within, order.first()) {
            let since = newest.time.saturating_sub(within);
            for (i, b) in order.iter().enumerate() {
                keep[i] |= b.time >= since;
            }
        }
        for (i, b) in order.iter().enumerate() {
            keep[i] |= self.keep_tags.iter().any(|list| has_tags(b, list));
        }
        let mut plan = RetentionPlan::default();
        for (b, k) in order.iter().zip(keep) {
            if k {
                plan.keep.push(b.id);
            } else {
                plan.forget.push(b.id);
            }
        }
        plan
    }

    /// The policy applied to each group of `backups` separately, groups in
    /// key order.
    pub fn apply_grouped(&self, backups: &[BackupEntry], by: GroupBy) -> Vec<GroupPlan> {
        let mut groups: BTreeMap<GroupKey, Vec<BackupEntry>> = BTreeMap::new();
        for b in backups {
            groups.entry(by.key(b)).or_default().push(b.clone());
        }
        groups
            .into_iter()
            .map(|(group, members)| GroupPlan {
                group,
                plan: self.apply(&members),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{SnapshotMeta, SourceKind};

    fn b(id: u64, time: u64) -> BackupEntry {
        BackupEntry {
            id: BackupId(id),
            root: "00".repeat(32),
            root_level: 1,
            name: "x".into(),
            source: SourceKind::Stream,
            time,
            logical_bytes: 0,
            chunks: 0,
            new_bytes: 0,
            new_chunks: 0,
            meta: SnapshotMeta::default(),
            chain: None,
            content_bytes: None,
        }
    }

    fn on(host: &str, paths: &[&str], tags: &[&str], mut e: BackupEntry) -> BackupEntry {
        e.meta.host = host.into();
        e.meta.paths = paths.iter().map(|s| s.to_string()).collect();
        e.meta.tags = tags.iter().map(|s| s.to_string()).collect();
        e
    }

    #[test]
    fn calendar() {
        assert_eq!(year_month(0), (1970, 1));
        assert_eq!(year_month(31), (1970, 2));
        assert_eq!(year_month(365 + 365 + 59), (1972, 2)); // 1972-02-29
        assert_eq!(year_month(365 + 365 + 60), (1972, 3));
        assert_eq!(year_month(20_454), (2026, 1)); // 2026-01-01
        assert_eq!(year(20_454 * DAY - 1), 2025);
        assert_eq!(year(20_454 * DAY), 2026);
    }

    #[test]
    fn keep_last_keeps_the_newest() {
        let bs: Vec<_> = (1..=5).map(|i| b(i, 1000 * i)).collect();
        let p = RetentionPolicy {
            keep_last: Some(2),
            ..Default::default()
        };
        let plan = p.apply(&bs);
        assert_eq!(plan.keep, vec![5, 4]);
        assert_eq!(plan.forget, vec![3, 2, 1]);
        let all = RetentionPolicy {
            keep_last: Some(10),
            ..Default::default()
        };
        assert!(all.apply(&bs).forget.is_empty());
        let none = RetentionPolicy {
            keep_last: Some(0),
            ..Default::default()
        };
        assert_eq!(none.apply(&bs).keep, Vec::<u64>::new());
    }

    #[test]
    fn daily_weekly_monthly_keep_the_newest_per_bucket() {
        // 2026-01-01 (Thursday) is day 20454. Two backups a day for 40 days.
        let base = 20_454 * DAY;
        let bs: Vec<_> = (0..80u64)
            .map(|i| b(i + 1, base + (i / 2) * DAY + (i % 2) * 3600))
            .collect();
        let daily = RetentionPolicy {
            keep_daily: Some(3),
            ..Default::default()
        };
        // Newest of each of the last three days: days 39, 38, 37.
        assert_eq!(daily.apply(&bs).keep, vec![80, 78, 76]);
        let weekly = RetentionPolicy {
            keep_weekly: Some(2),
            ..Default::default()
        };
        // Day 39 = 2026-02-09 (Monday): its own week, then the week
        // 2026-02-02..08 whose newest backup is on day 38 (Sunday).
        assert_eq!(weekly.apply(&bs).keep, vec![80, 78]);
        let monthly = RetentionPolicy {
            keep_monthly: Some(5),
            ..Default::default()
        };
        // February (newest), then January's newest: day 30 = 2026-01-31.
        assert_eq!(monthly.apply(&bs).keep, vec![80, 62]);
        // Rules combine by union.
        let both = RetentionPolicy {
            keep_last: Some(1),
            keep_monthly: Some(2),
            ..Default::default()
        };
        assert_eq!(both.apply(&bs).keep, vec![80, 62]);
        let plan = both.apply(&bs);
        assert_eq!(plan.keep.len() + plan.forget.len(), 80);
        assert!(RetentionPolicy::default().is_empty() && !both.is_empty());
    }

    #[test]
    fn yearly_keeps_the_newest_of_each_year() {
        // One backup on 1 July of 2021..=2026 (days computed by hand:
        // 2021-07-01 = day 18809; leap year 2024), plus one on 2026-01-01.
        let july1 = [18_809u64, 19_174, 19_539, 19_905, 20_270, 20_635];
        let mut bs: Vec<_> = july1
            .iter()
            .enumerate()
            .map(|(i, d)| b(i as u64 + 1, d * DAY))
            .collect();
        bs.push(b(7, 20_454 * DAY));
        assert_eq!(year(20_635 * DAY), 2026);
        assert_eq!(year(19_905 * DAY), 2024);
        let p = RetentionPolicy {
            keep_yearly: Some(3),
            ..Default::default()
        };
        // 2026's newest is id 6 (July); then 2025 (5) and 2024 (4).
        let plan = p.apply(&bs);
        assert_eq!(plan.keep, vec![6, 5, 4]);
        assert_eq!(plan.forget, vec![7, 3, 2, 1]);
    }

    #[test]
    fn keep_within_counts_back_from_the_newest_backup() {
        // Hourly backups; the newest at hour 10.
        let bs: Vec<_> = (0..=10).map(|h| b(h + 1, 1_000_000 + h * 3600)).collect();
        let p = RetentionPolicy {
            keep_within: Some(3 * 3600),
            ..Default::default()
        };
        // Hours 10, 9, 8 and 7 (exactly 3 h before the newest) are kept.
        assert_eq!(p.apply(&bs).keep, vec![11, 10, 9, 8]);
        assert!(RetentionPolicy {
            keep_within: Some(0),
            ..Default::default()
        }
        .apply(&[])
        .keep
        .is_empty());
    }

    #[test]
    fn keep_tag_keeps_backups_with_all_tags_of_a_list() {
        let bs = vec![
            on("h", &["/a"], &["monthly"], b(1, 100)),
            on("h", &["/a"], &["monthly", "audit"], b(2, 200)),
            on("h", &["/a"], &["audit"], b(3, 300)),
            on("h", &["/a"], &[], b(4, 400)),
        ];
        let tags = |lists: &[&[&str]]| {
            lists
                .iter()
                .map(|l| l.iter().map(|s| s.to_string()).collect())
                .collect()
        };
        let p = RetentionPolicy {
            keep_tags: tags(&[&["monthly", "audit"]]),
            ..Default::default()
        };
        assert_eq!(p.apply(&bs).keep, vec![2]);
        let p = RetentionPolicy {
            keep_last: Some(1),
            keep_tags: tags(&[&["monthly"], &["audit"]]),
            ..Default::default()
        };
        assert_eq!(p.apply(&bs).keep, vec![4, 3, 2, 1]);
        assert!(!p.is_empty());
    }

    #[test]
    fn policies_apply_per_group() {
        let bs = vec![
            on("alpha", &["/home"], &["x"], b(1, 100)),
            on("alpha", &["/home"], &[], b(2, 200)),
            on("alpha", &["/etc"], &[], b(3, 300)),
            on("beta", &["/home"], &[], b(4, 400)),
            on("beta", &["/home"], &["x"], b(5, 500)),
            on("alpha", &["/home"], &[], b(6, 600)),
            on("beta", &["/home"], &[], b(7, 700)),
        ];
        let last1 = RetentionPolicy {
            keep_last: Some(1),
            ..Default::default()
        };
        let plans = last1.apply_grouped(&bs, GroupBy::default());
        let summary: Vec<(String, Vec<BackupId>, Vec<BackupId>)> = plans
            .iter()
            .map(|g| {
                (
                    g.group.to_string(),
                    g.plan.keep.clone(),
                    g.plan.forget.clone(),
                )
            })
            .collect();
        let ids = |v: &[u64]| v.iter().map(|&i| BackupId(i)).collect::<Vec<_>>();
        assert_eq!(
            summary,
            vec![
                ("host alpha, paths /etc".into(), ids(&[3]), ids(&[])),
                ("host alpha, paths /home".into(), ids(&[6]), ids(&[2, 1])),
                ("host beta, paths /home".into(), ids(&[7]), ids(&[5, 4])),
            ]
        );
        // By host only: one backup per host survives.
        let by_host: GroupBy = "host".parse().unwrap();
        let keep: Vec<Vec<BackupId>> = last1
            .apply_grouped(&bs, by_host)
            .into_iter()
            .map(|g| g.plan.keep)
            .collect();
        assert_eq!(keep, vec![ids(&[6]), ids(&[7])]);
        // By host and tags: the tagged backups form groups of their own.
        let by: GroupBy = "host,tags".parse().unwrap();
        let keep: Vec<Vec<BackupId>> = last1
            .apply_grouped(&bs, by)
            .into_iter()
            .map(|g| g.plan.keep)
            .collect();
        assert_eq!(keep, vec![ids(&[6]), ids(&[1]), ids(&[7]), ids(&[5])]);
        // No grouping: the newest of all.
        let none: GroupBy = "".parse().unwrap();
        let plans = last1.apply_grouped(&bs, none);
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].group.to_string(), "all backups");
        assert_eq!(plans[0].plan.keep, ids(&[7]));
        assert!("host,colour".parse::<GroupBy>().is_err());
    }

    #[test]
    fn backups_without_paths_group_by_name() {
        let mut old = b(1, 100);
        old.name = "/srv".into();
        let mut new = on("", &["/srv"], &[], b(2, 200));
        new.name = "/srv".into();
        let k = GroupBy::default();
        assert_eq!(k.key(&old), k.key(&new));
    }
}
