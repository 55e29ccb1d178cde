//! The recipe-chunk table: recipe fingerprint → container. In memory; or,
//! for an on-disk index taken up from a kept run set (issue 36), the set's
//! sorted recipe file ([`SortedFile`], searched in place, its blocks
//! verified on first touch) with the changes made since in memory. An
//! opening that decoded the whole table into memory paid for every recipe
//! chunk of the repository (2.7 M at 305 M data chunks) to add one.

use super::disk::{DiskTable, KeptData, SortedFile, TableFile};
use crate::error::Result;
use crate::fingerprint::Fingerprint;
use crate::fptable::FpTable;
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Default)]
pub struct Recipes {
    /// Entries inserted since the file was taken up (all of them without
    /// a file).
    table: FpTable,
    /// The kept file.
    file: Option<SortedFile>,
    /// Keys of the file removed or replaced since (values unused).
    hidden: FpTable,
}

impl Recipes {
    /// A table over an in-memory one.
    pub fn of(table: FpTable) -> Self {
        Recipes {
            table,
            ..Recipes::default()
        }
    }

    /// A table over a kept file.
    pub fn over(file: SortedFile) -> Self {
        Recipes {
            file: Some(file),
            ..Recipes::default()
        }
    }

    /// The whole table in memory (`None` over a kept file).
    pub fn in_memory(&self) -> Option<&FpTable> {
        self.file.is_none().then_some(&self.table)
    }

    /// The file's value of `fp`, unless removed or replaced since.
    fn in_file(&self, fp: &Fingerprint) -> Option<u64> {
        let f = self.file.as_ref()?;
        if self.hidden.contains(fp) {
            return None;
        }
        f.get(fp)
    }

    pub fn get(&self, fp: &Fingerprint) -> Option<u64> {
        self.table.get(fp).or_else(|| self.in_file(fp))
    }

    pub fn contains(&self, fp: &Fingerprint) -> bool {
        self.get(fp).is_some()
    }

    pub fn prefetch(&self, fp: &Fingerprint) {
        self.table.prefetch(fp);
    }

    pub fn insert(&mut self, fp: Fingerprint, v: u64) {
        if self.table.get(&fp).is_none() && self.in_file(&fp).is_some() {
            self.hidden.insert(fp, 0);
        }
        self.table.insert(fp, v);
    }

    pub fn remove(&mut self, fp: &Fingerprint) {
        if self.in_file(fp).is_some() {
            self.hidden.insert(*fp, 0);
        }
        self.table.remove(fp);
    }

    pub fn len(&self) -> usize {
        let file = self.file.as_ref().map_or(0, SortedFile::len);
        self.table.len() + file - self.hidden.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn memory_bytes(&self) -> usize {
        let file = self.file.as_ref().map_or(0, SortedFile::memory_bytes);
        self.table.memory_bytes() + self.hidden.memory_bytes() + file
    }

    pub fn reserve(&mut self, additional: usize) {
        self.table.reserve(additional);
    }

    pub(crate) fn spare(&self) -> Vec<crate::zerobuf::Spare> {
        self.table.spare()
    }

    /// Every entry: the in-memory ones, then the file's still current.
    pub fn iter(&self) -> impl Iterator<Item = (Fingerprint, u64)> + '_ {
        let file = self.file.iter().flat_map(|f| f.iter());
        self.table
            .iter()
            .chain(file.filter(|(k, _)| !self.hidden.contains(k) && self.table.get(k).is_none()))
    }

    /// The table as one sorted file for a save (`None` when empty): the
    /// kept file if nothing changed since, else a new file in `table`'s
    /// private directory holding every entry, which this table then
    /// stands on (changes cleared).
    pub fn for_save(
        &mut self,
        table: &mut DiskTable,
        still_kept: impl Fn(&KeptData) -> bool,
    ) -> Result<Option<TableFile>> {
        let unchanged = self.table.is_empty() && self.hidden.is_empty();
        if !(unchanged && self.file.is_some()) {
            if self.is_empty() {
                *self = Recipes::default();
                return Ok(None);
            }
            let mut all: Vec<(Fingerprint, u64)> = self.iter().collect();
            all.sort_unstable_by_key(|a| a.0 .0);
            let file = SortedFile::write(table, all.into_iter())?;
            *self = Recipes::over(file);
        }
        Ok(self.file.as_ref().map(|f| f.describe(still_kept)))
    }

    /// Note the file's description in the kept run set.
    pub fn kept_as(&self, names: &HashMap<PathBuf, KeptData>) {
        if let Some(f) = &self.file {
            f.kept_as(names);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::disk::DiskConfig;

    fn fp(i: u64) -> Fingerprint {
        crate::HashAlgo::Blake3.hash(&i.to_le_bytes())
    }

    /// Over a file, with inserts, replacements and removals (of file keys,
    /// of new keys, a file key removed then inserted again), it answers as
    /// a map does; a save's file holds exactly the map, and a table over
    /// it answers the same.
    #[test]
    fn matches_a_map_over_a_file_and_after_a_save() {
        let dir = tempfile::tempdir().unwrap();
        let mut disk = DiskTable::create(dir.path(), DiskConfig::default()).unwrap();
        let mut m: HashMap<Fingerprint, u64> = HashMap::new();
        let mut r = Recipes::default();
        for i in 0..5000 {
            r.insert(fp(i), i);
            m.insert(fp(i), i);
        }
        let f = r.for_save(&mut disk, |_| false).unwrap().unwrap();
        assert_eq!(f.len, 5000 * 40);
        assert!(r.in_memory().is_none(), "now over its file");
        let check = |r: &Recipes, m: &HashMap<Fingerprint, u64>| {
            assert_eq!(r.len(), m.len());
            for i in 0..7000 {
                assert_eq!(r.get(&fp(i)), m.get(&fp(i)).copied(), "{i}");
            }
            let mut all: Vec<_> = r.iter().collect();
            all.sort();
            let mut want: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
            want.sort();
            assert_eq!(all, want);
        };
        check(&r, &m);
        for i in (0..5000).step_by(7) {
            r.remove(&fp(i));
            m.remove(&fp(i));
        }
        for i in (0..5000).step_by(11) {
            r.insert(fp(i), i + 100_000);
            m.insert(fp(i), i + 100_000);
        }
        for i in 5000..6000 {
            r.insert(fp(i), i);
            m.insert(fp(i), i);
        }
        for i in (5000..6000).step_by(3) {
            r.remove(&fp(i));
            m.remove(&fp(i));
        }
        // Removing twice, and an absent key, changes nothing.
        r.remove(&fp(7));
        r.remove(&fp(999_999));
        check(&r, &m);
        let f2 = r.for_save(&mut disk, |_| false).unwrap().unwrap();
        assert_ne!(f2.path, f.path, "a new file");
        assert_eq!(f2.len, m.len() as u64 * 40);
        check(&r, &m);
        // Unchanged since: the same file.
        let f3 = r.for_save(&mut disk, |_| false).unwrap().unwrap();
        assert_eq!(f3.path, f2.path);
        // Emptied: no file.
        for k in m.keys() {
            r.remove(k);
        }
        assert!(r.is_empty());
        assert!(r.for_save(&mut disk, |_| false).unwrap().is_none());
    }
}
