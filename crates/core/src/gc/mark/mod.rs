//! Mark: walk the recipes of the retained backups and build what the sweep
//! needs — the VC table (valid data chunks), the valid recipe chunks, the
//! live chunks per container, the RRT (container → retained backups that
//! reference it) and, for GCCDF, one fingerprint filter per backup.
//!
//! A data chunk is stored as one or more numbered copies (rewriting adds
//! copies); a recipe names the copy it reads. A copy `(fp, n)` is live iff a
//! retained backup's recipe names it: a copy no retained backup references
//! is dead even if another copy of the same fingerprint is live.

pub mod focused;
mod liveness;
mod logical;
pub mod physical;

pub use focused::FocusedMark;
pub use liveness::{FocusStats, FpFilter, Live, Mark, MarkSpec, Marker, Phv, VcSpec};
pub use logical::LogicalMark;
pub use physical::PhysicalMark;
