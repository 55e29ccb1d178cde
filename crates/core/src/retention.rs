//! Retention policies for `forget`: which backups to keep.
//!
//! Backups are taken newest first. `keep_last` keeps the newest N;
//! `keep_daily` / `keep_weekly` / `keep_monthly` keep the newest backup of
//! each of the newest N days / ISO weeks / months (UTC) that have backups.
//! A backup kept by any rule is kept. Policies never reach into the catalog:
//! they only compute the split, so a dry run is the same computation.

use crate::catalog::{BackupEntry, BackupId};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    pub keep_last: Option<usize>,
    pub keep_daily: Option<usize>,
    pub keep_weekly: Option<usize>,
    pub keep_monthly: Option<usize>,
}

/// The decision: ids to keep and to forget, both newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPlan {
    pub keep: Vec<BackupId>,
    pub forget: Vec<BackupId>,
}

const DAY: u64 = 86_400;

/// Days since 1970-01-01 → (year, month) (proleptic Gregorian).
fn year_month(days: i64) -> (i64, u32) {
    let (y, m, _) = crate::clock::civil_from_days(days);
    (y, m)
}

/// Calendar bucket of a unix time (UTC): day, week or month number.
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

impl RetentionPolicy {
    pub fn is_empty(&self) -> bool {
        self.keep_last.is_none()
            && self.keep_daily.is_none()
            && self.keep_weekly.is_none()
            && self.keep_monthly.is_none()
    }

    pub fn apply(&self, backups: &[BackupEntry]) -> RetentionPlan {
        let mut order: Vec<&BackupEntry> = backups.iter().collect();
        order.sort_by_key(|b| std::cmp::Reverse((b.time, b.id)));
        let rules: [(Option<usize>, Bucket); 3] = [
            (self.keep_daily, day),
            (self.keep_weekly, week),
            (self.keep_monthly, month),
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::SourceKind;

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
            content_bytes: None,
        }
    }

    #[test]
    fn calendar() {
        assert_eq!(year_month(0), (1970, 1));
        assert_eq!(year_month(31), (1970, 2));
        assert_eq!(year_month(365 + 365 + 59), (1972, 2)); // 1972-02-29
        assert_eq!(year_month(365 + 365 + 60), (1972, 3));
        assert_eq!(year_month(20_454), (2026, 1)); // 2026-01-01
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
}
