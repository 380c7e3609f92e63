//! Test setup and inspection of the simulated disk: these bypass counters, faults and
//! durability tracking.

use super::*;

impl SimStorage {
    /// Creates (or replaces) a file with `bytes`, durable at once, creating its directories.
    pub fn put_file(&self, path: impl AsRef<Path>, bytes: &[u8]) {
        self.put_sparse_file(path, bytes, bytes.len() as u64);
    }

    /// Like [`SimStorage::put_file`], but the file is `len` bytes long: `data`, then zeros
    /// (which cost no memory). For "huge file" cases.
    pub fn put_sparse_file(&self, path: impl AsRef<Path>, data: &[u8], len: u64) {
        let path = norm(path.as_ref());
        let (parent, name) = split(&path).expect("a file path");
        self.mkdirs_durable(&parent);
        let mut s = self.lock();
        let mut content = Content { data: data.to_vec(), len: len.max(data.len() as u64) };
        content.set_len(len);
        let ino = s.inodes.len();
        let mtime_ms = s.now_ms;
        s.inodes.push(Inode { volatile: content.clone(), durable: content, pending: Vec::new(), mtime_ms });
        let d = s.dirs.get_mut(&parent).expect("made above");
        d.volatile.insert(name.clone(), Entry::File(ino));
        d.durable.insert(name, Entry::File(ino));
    }

    fn mkdirs_durable(&self, dir: &Path) {
        let mut s = self.lock();
        let mut cur = PathBuf::from("/");
        for c in dir.components() {
            let Component::Normal(name) = c else { continue };
            let child = cur.join(name);
            if !s.dirs.contains_key(&child) {
                s.dirs.insert(child.clone(), DirState::default());
                let d = s.dirs.get_mut(&cur).expect("parent exists");
                let name = name.to_string_lossy().into_owned();
                d.volatile.insert(name.clone(), Entry::Dir);
                d.durable.insert(name, Entry::Dir);
            }
            cur = child;
        }
    }

    /// A directory, durable at once.
    pub fn put_dir(&self, dir: impl AsRef<Path>) {
        self.mkdirs_durable(&norm(dir.as_ref()));
    }

    /// A file's volatile content (what reads see), if it exists.
    pub fn file(&self, path: impl AsRef<Path>) -> Option<Vec<u8>> {
        let s = self.lock();
        match s.entry(&norm(path.as_ref()))? {
            Entry::File(ino) => Some(s.inodes[ino].volatile.bytes()),
            Entry::Dir => None,
        }
    }

    /// A file's volatile length, if it exists (without materialising a sparse file).
    pub fn file_len(&self, path: impl AsRef<Path>) -> Option<u64> {
        let s = self.lock();
        match s.entry(&norm(path.as_ref()))? {
            Entry::File(ino) => Some(s.inodes[ino].volatile.len),
            Entry::Dir => None,
        }
    }

    /// Removes a file at once (durably), if it exists.
    pub fn delete_file(&self, path: impl AsRef<Path>) {
        let path = norm(path.as_ref());
        let Some((parent, name)) = split(&path) else { return };
        let mut s = self.lock();
        if let Some(d) = s.dirs.get_mut(&parent) {
            d.volatile.remove(&name);
            d.durable.remove(&name);
        }
    }

    /// Every file of a directory (volatile view): name -> content. Sparse tails are materialised,
    /// so do not call it on a directory holding a huge file.
    pub fn files(&self, dir: impl AsRef<Path>) -> BTreeMap<String, Vec<u8>> {
        let s = self.lock();
        let Some(d) = s.dir(&norm(dir.as_ref())) else { return BTreeMap::new() };
        d.volatile
            .iter()
            .filter_map(|(n, e)| match e {
                Entry::File(ino) => Some((n.clone(), s.inodes[*ino].volatile.bytes())),
                Entry::Dir => None,
            })
            .collect()
    }
}
