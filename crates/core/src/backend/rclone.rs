//! A repository on any rclone remote: `rclone:REMOTE:PATH` starts `rclone
//! serve sftp --stdio REMOTE:PATH` and speaks SFTP to it over its stdin
//! and stdout, so every remote rclone reaches (its configuration, its
//! credentials) works, with the SFTP store's transfers, retries and
//! errors. Like restic's rclone backend, one rclone process per repository
//! handle, ended when the handle is dropped.
//!
//! rclone's SFTP server has no hard links (it answers `hardlink@openssh.com`
//! with OK and links nothing), so `put_if_absent` is a check
//! then a rename: exclusive within one Tessera process, not between two
//! writing the same remote at once (the repository lock is advisory there).

use super::cloud::TransferOptions;
use super::sftp::{env_words, SftpStore, Transport};
use crate::error::{Error, Result};

/// The rclone command for a remote: `rclone [TESSERA_RCLONE_ARGS] serve
/// sftp --stdio REMOTE:PATH` (rclone itself is `$TESSERA_RCLONE` or
/// `rclone` on `PATH`; its configuration is rclone's, `RCLONE_CONFIG`
/// included).
pub fn transport(remote: &str) -> Transport {
    let mut args = env_words("TESSERA_RCLONE_ARGS");
    args.extend(["serve", "sftp", "--stdio", "--log-level", "ERROR"].map(String::from));
    args.push(remote.to_string());
    Transport {
        program: std::env::var("TESSERA_RCLONE").unwrap_or_else(|_| "rclone".into()),
        args,
        service: "rclone",
        credentials_hint: "the remote in rclone's configuration (`rclone config`)",
        hard_links: false,
    }
}

/// The `REMOTE:PATH` of an `rclone:` location.
pub fn remote(location: &str) -> Result<&str> {
    let bad = |why: &str| {
        Error::invalid(format!(
            "bad rclone location '{location}': {why} (expected rclone:REMOTE:PATH)"
        ))
    };
    let remote = location
        .strip_prefix("rclone:")
        .ok_or_else(|| bad("no rclone: scheme"))?;
    if remote.is_empty() || remote.starts_with('-') {
        return Err(bad("no remote"));
    }
    if !remote.contains(':') {
        return Err(bad("no remote name before ':'"));
    }
    Ok(remote)
}

/// Open the repository on an rclone remote (with `create`, making its
/// folder: rclone creates folders on demand).
pub fn open(location: &str, transfer: TransferOptions, create: bool) -> Result<SftpStore> {
    let remote = remote(location)?;
    SftpStore::with_transport(transport(remote), String::new(), location, transfer, create)
}

#[cfg(test)]
mod tests {
    #[test]
    fn locations_parse() {
        assert_eq!(
            super::remote("rclone:b2:bucket/repo").unwrap(),
            "b2:bucket/repo"
        );
        assert_eq!(
            super::remote("rclone::local:/tmp/x").unwrap(),
            ":local:/tmp/x"
        );
        for bad in ["rclone:", "rclone:nocolon", "rclone:--config=x:y"] {
            let e = super::remote(bad).unwrap_err().to_string();
            assert!(e.contains("bad rclone location"), "{bad}: {e}");
        }
        let t = super::transport("r:p");
        assert_eq!(t.args.last().map(String::as_str), Some("r:p"));
    }
}
