//! The repository format version, one number for every object kind.

/// The repository format version: written in the unsealed `config` object
/// (checked first at open), in every manifest and in every container
/// header; a repository of another version is refused with a message naming
/// both. One bump per format change (docs/FORMAT.md): 1 = the first format;
/// 2 = directory backups as file-aligned contents plus a metadata section
/// (issue 19); 3 = the MFDedup layout's volume and NDF objects (issue 14);
/// 4 = recipe leaves and index entries name a chunk copy (issue 11);
/// 5 = compressed and sealed objects, key slots, keyed fingerprints, the
/// unsealed `config` object (issue 12); 6 = FGC's reference graph
/// (`refgraph/` segments and the manifest's `refgraph` field, issue 16);
/// 7 = extended attributes and ACLs in a directory stream's metadata
/// (issue 13); 8 = XAES-256-GCM, the new default object cipher, named in
/// the config's `encryption` (issue 12); 9 = frames: consecutive chunks of
/// a container compressed and sealed together, the config's `frame_size`
/// (issue 33).
pub const VERSION: u32 = 9;
