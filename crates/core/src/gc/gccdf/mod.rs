//! GCCDF: the sweep reorders the valid chunks of each segment of S involved
//! containers by ownership before writing them (preprocess → analyze → plan).

pub mod analyze;
pub mod plan;
pub mod preprocess;
