//! Fingerprint traces: one chunk per line, `<hex fingerprint> <size>`.
//!
//! Blank lines and lines starting with `#` are ignored. Fingerprints of up to
//! 32 bytes are accepted (shorter ones, such as FSL's 6-byte hashes or SHA-1's
//! 20, are zero-padded). Every error names the file and the line.

use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use std::io::BufRead;

/// Largest chunk size a trace line may declare (guards against garbage).
pub const MAX_TRACE_CHUNK: u32 = 64 << 20;

/// Parse one trace line; `None` for blank and comment lines.
pub fn parse_line(line: &str, name: &str, lineno: usize) -> Result<Option<(Fingerprint, u32)>> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        return Ok(None);
    }
    let bad = |why: String| Error::invalid(format!("{name}:{lineno}: {why}"));
    let mut parts = t.split_whitespace();
    let (Some(h), Some(s), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad(format!(
            "expected '<hex fingerprint> <size>', got '{}'",
            truncate(t)
        )));
    };
    let fp = Fingerprint::from_hex(h).ok_or_else(|| {
        bad(format!(
            "'{}' is not a hex fingerprint of at most 64 digits",
            truncate(h)
        ))
    })?;
    let size: u32 = s
        .parse()
        .map_err(|_| bad(format!("'{}' is not a chunk size", truncate(s))))?;
    if size == 0 || size > MAX_TRACE_CHUNK {
        return Err(bad(format!(
            "chunk size {size} is out of range 1..={MAX_TRACE_CHUNK}"
        )));
    }
    Ok(Some((fp, size)))
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Iterate over the chunks of a trace stream.
pub fn read_trace<R: BufRead>(
    reader: R,
    name: String,
) -> impl Iterator<Item = Result<(Fingerprint, u32)>> {
    reader
        .lines()
        .enumerate()
        .filter_map(move |(i, line)| match line {
            Err(e) => Some(Err(Error::io(format!("{name}:{}", i + 1), e))),
            Ok(l) => parse_line(&l, &name, i + 1).transpose(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_reports_line_numbers() {
        let text = "# comment\n\naabbcc 4096\nda39a3ee5e6b4b0d3255bfef95601890afd80709 8192\n";
        let v: Vec<_> = read_trace(text.as_bytes(), "t.trace".into())
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].1, 4096);
        assert_eq!(&v[0].0 .0[..3], &[0xaa, 0xbb, 0xcc]);
        for (bad, what) in [
            ("zz 1", "hex"),
            ("aa", "expected"),
            ("aa 0", "range"),
            ("aa 1 2", "expected"),
            ("aa -5", "size"),
        ] {
            let err = read_trace(format!("aa 1\n{bad}\n").as_bytes(), "t.trace".into())
                .collect::<Result<Vec<_>>>()
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("t.trace:2:") && err.contains(what), "{err}");
        }
    }
}
