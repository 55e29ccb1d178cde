//! `tessera mount`: the backups as a read-only FUSE file system (`fuser`).
//!
//! Layout: `ids/<id>/…` holds each backup's entries; `hosts/<host>/<id>`,
//! `tags/<tag>/<id>` and `latest` are symlinks into `ids/`. A backup's
//! listing is read when its directory is first looked into. A file read
//! fetches only the chunks of the bytes asked for ([`BackupStream`]: a seek
//! down the recipe tree, then the containers holding those chunks, a few
//! recently read ones kept), so reading one file of a large backup reads
//! that file's containers and nothing else.

use super::open::open_backend;
use crate::args::RepoArg;
use crate::filter::Filter;
use anyhow::{Context, Result};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, Generation, INodeNo, LockOwner, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, Request,
};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};
use tessera_core::catalog::{BackupEntry, BackupId, SourceKind};
use tessera_core::restore::BackupStream;
use tessera_core::Repository;

/// The repository does not change under a read-only mount's feet as far as
/// the mount knows: attributes may be cached.
const TTL: Duration = Duration::from_secs(60);
/// Backups kept open for reading at once (each keeps a few containers).
const OPEN_STREAMS: usize = 4;

enum Kind {
    /// Children by name; `Some(backup)` while the backup's listing is not
    /// yet read.
    Dir(BTreeMap<OsString, u64>, Option<BackupId>),
    /// A file of a backup: where its bytes start in the backup's stream
    /// (its length is the node's size).
    File(BackupId, u64),
    Symlink(Vec<u8>),
    Special(FileType),
}

struct Node {
    kind: Kind,
    size: u64,
    mode: u16,
    mtime: u64,
}

struct State {
    nodes: Vec<Node>,
}

struct TesseraFs {
    /// Lives as long as the process serves the mount.
    repo: &'static Repository,
    backups: Vec<BackupEntry>,
    state: Mutex<State>,
    /// Backups opened for reading, the most recently used last.
    streams: Mutex<Vec<(BackupId, BackupStream<'static>)>>,
    uid: u32,
    gid: u32,
}

fn dir(mode: u16, mtime: u64) -> Node {
    Node {
        kind: Kind::Dir(BTreeMap::new(), None),
        size: 0,
        mode,
        mtime,
    }
}

impl State {
    fn add(&mut self, parent: u64, name: &OsStr, node: Node) -> u64 {
        let ino = self.nodes.len() as u64 + 1;
        self.nodes.push(node);
        if let Kind::Dir(children, _) = &mut self.nodes[parent as usize - 1].kind {
            children.insert(name.to_os_string(), ino);
        }
        ino
    }

    fn child(&self, parent: u64, name: &OsStr) -> Option<u64> {
        match &self.nodes.get(parent as usize - 1)?.kind {
            Kind::Dir(children, _) => children.get(name).copied(),
            _ => None,
        }
    }

    /// The directory at `parent`/`name`, created if missing.
    fn subdir(&mut self, parent: u64, name: &OsStr, mtime: u64) -> u64 {
        match self.child(parent, name) {
            Some(ino) => ino,
            None => self.add(parent, name, dir(0o755, mtime)),
        }
    }
}

impl TesseraFs {
    fn new(repo: &'static Repository, backups: Vec<BackupEntry>) -> Result<TesseraFs> {
        let mut st = State {
            nodes: vec![dir(0o555, 0)],
        };
        let ids = st.add(1, OsStr::new("ids"), dir(0o555, 0));
        let hosts = st.add(1, OsStr::new("hosts"), dir(0o555, 0));
        let tags = st.add(1, OsStr::new("tags"), dir(0o555, 0));
        for b in &backups {
            let name = OsString::from(b.id.to_string());
            let mut root = dir(0o555, b.time);
            root.kind = Kind::Dir(BTreeMap::new(), Some(b.id));
            st.add(ids, &name, root);
            let link = |depth: usize| Node {
                kind: Kind::Symlink(format!("{}ids/{}", "../".repeat(depth), b.id).into_bytes()),
                size: 0,
                mode: 0o777,
                mtime: b.time,
            };
            let host = if b.meta.host.is_empty() {
                "unknown"
            } else {
                &b.meta.host
            };
            let h = st.subdir(hosts, OsStr::new(host), b.time);
            st.add(h, &name, link(2));
            for t in &b.meta.tags {
                let d = st.subdir(tags, OsStr::new(t), b.time);
                st.add(d, &name, link(2));
            }
        }
        if let Some(latest) = backups.iter().max_by_key(|b| b.id) {
            let link = Node {
                kind: Kind::Symlink(format!("ids/{}", latest.id).into_bytes()),
                size: 0,
                mode: 0o777,
                mtime: latest.time,
            };
            st.add(1, OsStr::new("latest"), link);
        }
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc_getuid(), libc_getgid()) };
        Ok(TesseraFs {
            repo,
            backups,
            state: Mutex::new(st),
            streams: Mutex::new(Vec::new()),
            uid,
            gid,
        })
    }

    fn backup(&self, id: BackupId) -> Option<&BackupEntry> {
        self.backups.iter().find(|b| b.id == id)
    }

    /// Read a lazily listed backup's entries into the tree under `ino`.
    fn load(&self, st: &mut State, ino: u64) -> Result<(), Errno> {
        let id = match &st.nodes[ino as usize - 1].kind {
            Kind::Dir(_, Some(id)) => *id,
            _ => return Ok(()),
        };
        let entries = self
            .with_stream(id, |s| s.entries())
            .map_err(|_| Errno::EIO)?;
        if let Kind::Dir(_, lazy) = &mut st.nodes[ino as usize - 1].kind {
            *lazy = None;
        }
        for entry in entries {
            let e = entry.listed;
            let rel = e.path.trim_end_matches('/');
            let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
            let Some((last, dirs)) = parts.split_last() else {
                continue;
            };
            let mut parent = ino;
            for d in dirs {
                parent = st.subdir(parent, OsStr::new(d), e.mtime);
            }
            let mode = (e.mode & 0o7777) as u16;
            let kind = match e.kind {
                "dir" => {
                    let at = st.subdir(parent, OsStr::new(last), e.mtime);
                    let n = &mut st.nodes[at as usize - 1];
                    n.mode = mode;
                    n.mtime = e.mtime;
                    continue;
                }
                // A hard link whose first path is missing has no bytes.
                "file" | "hardlink" => Kind::File(id, entry.content.map_or(0, |c| c.0)),
                "symlink" => Kind::Symlink(e.link.clone().unwrap_or_default().into_bytes()),
                "fifo" => Kind::Special(FileType::NamedPipe),
                "chardev" => Kind::Special(FileType::CharDevice),
                "blockdev" => Kind::Special(FileType::BlockDevice),
                _ => continue,
            };
            let size = match &kind {
                Kind::Symlink(t) => t.len() as u64,
                _ => entry.content.map_or(0, |c| c.1),
            };
            st.add(
                parent,
                OsStr::new(last),
                Node {
                    kind,
                    size,
                    mode,
                    mtime: e.mtime,
                },
            );
        }
        Ok(())
    }

    fn attr(&self, ino: u64, n: &Node) -> FileAttr {
        let kind = match &n.kind {
            Kind::Dir(..) => FileType::Directory,
            Kind::File(..) => FileType::RegularFile,
            Kind::Symlink(_) => FileType::Symlink,
            Kind::Special(t) => *t,
        };
        let t = UNIX_EPOCH + Duration::from_secs(n.mtime);
        FileAttr {
            ino: INodeNo(ino),
            size: n.size,
            blocks: n.size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm: n.mode,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            flags: 0,
            blksize: 4096,
        }
    }

    /// Run `f` on the backup's open stream, opening it first if needed
    /// (and closing the least recently used one beyond [`OPEN_STREAMS`]).
    fn with_stream<T>(
        &self,
        id: BackupId,
        f: impl FnOnce(&mut BackupStream<'static>) -> tessera_core::Result<T>,
    ) -> Result<T, Errno> {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let i = match streams.iter().position(|(b, _)| *b == id) {
            Some(i) => i,
            None => {
                let b = self.backup(id).ok_or(Errno::ENOENT)?;
                let s = BackupStream::open(self.repo, b).map_err(|_| Errno::EIO)?;
                if streams.len() == OPEN_STREAMS {
                    streams.remove(0);
                }
                streams.push((id, s));
                streams.len() - 1
            }
        };
        let s = streams.remove(i);
        streams.push(s);
        let last = streams.len() - 1;
        f(&mut streams[last].1).map_err(|_| Errno::EIO)
    }
}

extern "C" {
    #[link_name = "getuid"]
    fn libc_getuid() -> u32;
    #[link_name = "getgid"]
    fn libc_getgid() -> u32;
}

impl Filesystem for TesseraFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = self.load(&mut st, parent.0) {
            return reply.error(e);
        }
        match st.child(parent.0, name) {
            Some(ino) => {
                let attr = self.attr(ino, &st.nodes[ino as usize - 1]);
                reply.entry(&TTL, &attr, Generation(0));
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match st.nodes.get((ino.0 as usize).wrapping_sub(1)) {
            Some(n) => reply.attr(&TTL, &self.attr(ino.0, n)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match st
            .nodes
            .get((ino.0 as usize).wrapping_sub(1))
            .map(|n| &n.kind)
        {
            Some(Kind::Symlink(t)) => reply.data(t),
            _ => reply.error(Errno::EINVAL),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (id, start, len) = match st.nodes.get((ino.0 as usize).wrapping_sub(1)) {
            Some(Node {
                kind: Kind::File(id, start),
                size: len,
                ..
            }) => (*id, *start, *len),
            _ => return reply.error(Errno::EINVAL),
        };
        drop(st);
        let want = (size as u64).min(len.saturating_sub(offset));
        if want == 0 {
            return reply.data(&[]);
        }
        match self.with_stream(id, |s| s.read_range(start + offset, start + offset + want)) {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = self.load(&mut st, ino.0) {
            return reply.error(e);
        }
        let children = match st
            .nodes
            .get((ino.0 as usize).wrapping_sub(1))
            .map(|n| &n.kind)
        {
            Some(Kind::Dir(children, _)) => children.clone(),
            _ => return reply.error(Errno::ENOTDIR),
        };
        let mut all = vec![
            (ino.0, FileType::Directory, OsString::from(".")),
            (ino.0, FileType::Directory, OsString::from("..")),
        ];
        for (name, child) in children {
            let kind = self.attr(child, &st.nodes[child as usize - 1]).kind;
            all.push((child, kind, name));
        }
        for (i, (child, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }
}

/// Mount the (filtered) backups at `mountpoint` and serve them until it is
/// unmounted (`fusermount3 -u MOUNTPOINT` or `umount`).
pub fn mount(repo: &RepoArg, mountpoint: &Path, filter: &Filter) -> Result<ExitCode> {
    if !Path::new("/dev/fuse").exists() {
        anyhow::bail!("FUSE is not available here (no /dev/fuse)");
    }
    let meta = std::fs::metadata(mountpoint)
        .with_context(|| format!("cannot use {} as a mount point", mountpoint.display()))?;
    if !meta.is_dir() {
        anyhow::bail!("{} is not a directory", mountpoint.display());
    }
    let r = super::open::open_repo(repo, open_backend(repo)?)?;
    let backups: Vec<BackupEntry> = filter
        .select(r.backups())
        .into_iter()
        .filter(|b| b.source != SourceKind::Trace)
        .cloned()
        .collect();
    let n = backups.len();
    // Served until unmounted, then the process ends: the repository is
    // never dropped, so the open streams may borrow it for good.
    let fs = TesseraFs::new(Box::leak(Box::new(r)), backups)?;
    let mut config = fuser::Config::default();
    config.mount_options.extend([
        fuser::MountOption::RO,
        fuser::MountOption::FSName("tessera".into()),
        fuser::MountOption::Subtype("tessera".into()),
    ]);
    if !crate::ui::quiet() {
        eprintln!(
            "serving {n} backups at {} (read-only); unmount with `fusermount3 -u {}`",
            mountpoint.display(),
            mountpoint.display()
        );
    }
    fuser::mount(fs, mountpoint, &config)
        .with_context(|| format!("cannot mount at {}", mountpoint.display()))?;
    Ok(ExitCode::SUCCESS)
}
