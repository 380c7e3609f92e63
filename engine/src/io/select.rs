//! Choosing the I/O backend: io_uring ([`super::uring::UringStorage`]) when the requested mode
//! needs it and the kernel allows it, else the plain [`StdStorage`] (sync mode) with one line on
//! stderr saying why.

use std::sync::{Arc, Once};

use super::std_backend::StdStorage;
use super::uring::UringStorage;
use super::{IoMode, Storage};

/// The storage really opened.
#[derive(Debug, Clone)]
pub struct OpenedStorage {
    pub storage: Arc<dyn Storage>,
    /// The mode really used (`Sync` after a fallback).
    pub mode: IoMode,
    /// Why the requested mode could not be had, when it could not.
    pub fallback: Option<String>,
}

/// Permission bits of files a storage creates unless told otherwise (before the umask):
/// owner-only, as log directories hold users' data.
pub(crate) const DEFAULT_FILE_MODE: u32 = 0o600;
/// Permission bits of directories a storage creates unless told otherwise (before the umask).
pub(crate) const DEFAULT_DIR_MODE: u32 = 0o700;

/// Permission bits of the files and directories a storage creates (before the umask). Owner-only
/// by default ([`DEFAULT_FILE_MODE`], [`DEFAULT_DIR_MODE`]): log directories hold users' data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Permissions {
    pub file_mode: u32,
    pub dir_mode: u32,
}

impl Default for Permissions {
    fn default() -> Self {
        Permissions { file_mode: DEFAULT_FILE_MODE, dir_mode: DEFAULT_DIR_MODE }
    }
}

/// Opens storage in `requested` mode, falling back to sync mode if io_uring is refused.
pub fn open_storage(requested: IoMode) -> OpenedStorage {
    open_storage_with(requested, false)
}

/// Like [`open_storage`], behaving as if io_uring were refused when `force_refusal` (as
/// `EngineConfig::simulate_uring_refusal` asks).
pub(crate) fn open_storage_with(requested: IoMode, force_refusal: bool) -> OpenedStorage {
    open_storage_with_permissions(requested, force_refusal, Permissions::default())
}

/// Like [`open_storage_with`], creating files and directories with `perms`.
pub(crate) fn open_storage_with_permissions(
    requested: IoMode,
    force_refusal: bool,
    perms: Permissions,
) -> OpenedStorage {
    let std = || Arc::new(StdStorage { file_mode: perms.file_mode, dir_mode: perms.dir_mode });
    if requested == IoMode::Sync {
        return OpenedStorage { storage: std(), mode: IoMode::Sync, fallback: None };
    }
    let probed = if force_refusal {
        Err("io_uring refused on purpose (simulate_uring_refusal)".to_string())
    } else {
        super::probe::uring_available()
    };
    match probed.and_then(|()| UringStorage::new(requested).map_err(|e| e.to_string())) {
        Ok(mut s) => {
            s.file_mode = perms.file_mode;
            s.dir_mode = perms.dir_mode;
            OpenedStorage { storage: Arc::new(s), mode: requested, fallback: None }
        }
        Err(reason) => {
            static LOGGED: Once = Once::new();
            LOGGED.call_once(|| {
                eprintln!(
                    "seglog: {requested} I/O mode unavailable, using sync I/O (plain pread/pwrite) instead: {reason}"
                );
            });
            OpenedStorage { storage: std(), mode: IoMode::Sync, fallback: Some(reason) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_forced_refusal() {
        let s = open_storage_with(IoMode::Sync, false);
        assert_eq!((s.mode, s.storage.mode(), s.fallback.is_none()), (IoMode::Sync, IoMode::Sync, true));
        for m in [IoMode::Direct, IoMode::Buffered] {
            let s = open_storage_with(m, false);
            assert_eq!((s.mode, s.storage.mode()), (m, m), "{:?}", s.fallback);
            assert!(s.fallback.is_none());
            let s = open_storage_with(m, true);
            assert_eq!((s.mode, s.storage.mode()), (IoMode::Sync, IoMode::Sync));
            let why = s.fallback.unwrap();
            assert!(why.contains("refused on purpose"), "{why}");
        }
        assert_eq!(open_storage(IoMode::Direct).mode, IoMode::Direct);
    }
}
