//! The simulated disk's own tests.

use super::*;

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

fn read_all(st: &SimStorage, path: &str) -> Option<Vec<u8>> {
    st.file(path)
}

#[test]
fn unsynced_data_and_entries_vanish_with_durable_only() {
    let st = SimStorage::new();
    st.create_dir_all(&p("/d")).unwrap();
    st.sync_dir(&p("/")).unwrap();
    let f = st.open(&p("/d/a"), OpenMode::CreateNew).unwrap();
    f.write_all_at(b"hello", 0).unwrap();
    f.sync_data().unwrap();
    // The entry is not durable yet: the file disappears.
    let c = st.crash_with(&mut SimRng::new(1), &CrashConfig::DURABLE_ONLY);
    assert!(c.exists(&p("/d")));
    assert!(!c.exists(&p("/d/a")));
    st.sync_dir(&p("/d")).unwrap();
    f.write_all_at(b" world", 5).unwrap();
    let c = st.crash_with(&mut SimRng::new(1), &CrashConfig::DURABLE_ONLY);
    assert_eq!(read_all(&c, "/d/a").unwrap(), b"hello");
    assert_eq!(read_all(&st, "/d/a").unwrap(), b"hello world");
}

#[test]
fn renames_revert_unless_the_directory_is_synced() {
    let st = SimStorage::new();
    st.put_file("/d/a", b"old");
    let f = st.open(&p("/d/a.tmp"), OpenMode::CreateTruncate).unwrap();
    f.write_all_at(b"new", 0).unwrap();
    f.sync_data().unwrap();
    st.rename(&p("/d/a.tmp"), &p("/d/a")).unwrap();
    assert_eq!(st.file("/d/a").unwrap(), b"new");
    let c = st.crash_with(&mut SimRng::new(1), &CrashConfig::DURABLE_ONLY);
    assert_eq!(c.file("/d/a").unwrap(), b"old");
    assert!(!c.exists(&p("/d/a.tmp")));
    st.sync_dir(&p("/d")).unwrap();
    let c = st.crash_with(&mut SimRng::new(1), &CrashConfig::DURABLE_ONLY);
    assert_eq!(c.file("/d/a").unwrap(), b"new");
}

#[test]
fn deleted_then_recreated_can_come_back_as_the_old_file() {
    let st = SimStorage::new();
    st.put_file("/d/x", b"old");
    st.remove_file(&p("/d/x")).unwrap();
    let f = st.open(&p("/d/x"), OpenMode::CreateNew).unwrap();
    f.write_all_at(b"new!", 0).unwrap();
    f.sync_data().unwrap();
    let c = st.crash_with(&mut SimRng::new(3), &CrashConfig::DURABLE_ONLY);
    assert_eq!(c.file("/d/x").unwrap(), b"old");
}

#[test]
fn crash_outcomes_are_prefixes_torn_or_zeroed() {
    let st = SimStorage::new();
    st.put_file("/f", b"");
    let f = st.open(&p("/f"), OpenMode::ReadWrite).unwrap();
    f.write_all_at(&[1u8; 600], 0).unwrap();
    f.sync_data().unwrap();
    f.write_all_at(&[2u8; 5000], 600).unwrap();
    f.write_all_at(&[3u8; 100], 5600).unwrap();
    let mut rng = SimRng::new(7);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..400 {
        let c = st.crash(&mut rng).file("/f").unwrap();
        assert!(c.len() >= 600 && c[..600].iter().all(|&b| b == 1), "durable prefix kept");
        assert!((600..=5700).contains(&c.len()), "length {}", c.len());
        // Only whole sectors of the torn write land; the rest is zeros.
        for (i, &b) in c.iter().enumerate().skip(600) {
            assert!(b == 0 || b == if i < 5600 { 2 } else { 3 });
        }
        let twos = c.iter().filter(|&&b| b == 2).count();
        let zeros = c.iter().filter(|&&b| b == 0).count();
        seen.insert((c.len(), twos == 5000, zeros > 0));
    }
    assert!(seen.len() >= 4, "{seen:?}");
}

#[test]
fn halt_and_faults_change_nothing() {
    let st = SimStorage::new();
    st.put_file("/f", b"abc");
    let f = st.open(&p("/f"), OpenMode::ReadWrite).unwrap();
    st.halt_after(Some(1));
    f.write_all_at(b"x", 0).unwrap();
    assert!(f.write_all_at(b"y", 1).is_err());
    assert!(f.sync_data().is_err());
    assert_eq!(st.io_count(), 1);
    assert!(st.halted());
    assert_eq!(st.file("/f").unwrap(), b"xbc");

    let st = SimStorage::new();
    st.put_file("/f", b"abc");
    st.inject(Fault::Sync(2));
    let f = st.open(&p("/f"), OpenMode::ReadWrite).unwrap();
    f.write_all_at(b"x", 0).unwrap();
    f.sync_data().unwrap();
    f.write_all_at(b"y", 1).unwrap();
    assert!(f.sync_data().is_err());
    let c = st.crash_with(&mut SimRng::new(1), &CrashConfig::DURABLE_ONLY);
    assert_eq!(c.file("/f").unwrap(), b"xbc");
}

#[test]
fn direct_files_refuse_unaligned_writes_and_sparse_files_are_cheap() {
    let st = SimStorage::with_direct_alignment(512);
    st.put_dir("/d");
    let f = st.open_log(&p("/d/l"), OpenMode::CreateNew).unwrap();
    assert!(f.write_all_at(&[1u8; 100], 0).is_err());
    let buf = crate::io::AlignedBuf::new(512, 4096);
    let mut buf = buf;
    buf.set_len(512);
    f.write_all_at(&buf, 512).unwrap();
    assert_eq!(f.len().unwrap(), 1024);
    st.put_sparse_file("/d/huge", b"xy", 1 << 40);
    assert_eq!(st.file_len("/d/huge"), Some(1 << 40));
    let h = st.open(&p("/d/huge"), OpenMode::Read).unwrap();
    let mut b = [9u8; 4];
    assert_eq!(h.read_at(&mut b, 0).unwrap(), 4);
    assert_eq!(b, [b'x', b'y', 0, 0]);
    assert!(h.write_all_at(b"z", 0).is_err(), "read-only handle");
}

fn write_op(f: &Arc<dyn IoFile>, pos: u64, bytes: &[u8], tag: u64, link_next: bool) -> IoOp {
    let mut buf = crate::io::AlignedBuf::new(bytes.len().max(1), 512);
    buf.extend_from_slice(bytes);
    IoOp { file: f.clone(), kind: IoOpKind::Write { buf: buf.into(), pos, dsync: false }, tag, link_next }
}

#[test]
fn async_batches_run_late_and_out_of_order() {
    let st = SimStorage::new();
    st.put_dir("/d");
    let f = st.open(&p("/d/f"), OpenMode::CreateNew).unwrap();
    let mut orders = std::collections::BTreeSet::new();
    for seed in 0..32 {
        st.set_async_completions(seed, 50);
        f.set_len(0).unwrap();
        let ios = st.submit_async(vec![
            vec![write_op(&f, 0, b"aa", 1, false), write_op(&f, 2, b"bb", 2, false)],
            vec![write_op(&f, 4, b"cc", 3, false)],
        ]);
        assert_eq!(st.ops_in_flight(), 3, "nothing runs at submission");
        assert!(st.file("/d/f").unwrap().is_empty());
        // What the file holds after each poll until every write has run.
        let mut order = Vec::new();
        while st.ops_in_flight() > 0 {
            st.poll_async();
            order.push(st.file("/d/f").unwrap());
        }
        assert_eq!(order.last().unwrap(), b"aabbcc");
        orders.insert(order);
        for io in ios {
            let Ok(AsyncOutcome::Done(done)) = st.claim_async(io, false) else { panic!("all ran") };
            assert!(done.iter().all(|c| c.result.is_ok()));
        }
    }
    assert!(orders.len() > 3, "completions arrive in varied orders and at varied polls: {}", orders.len());
}

#[test]
fn a_linked_operation_waits_for_and_is_cancelled_by_its_predecessor() {
    let st = SimStorage::new();
    st.put_dir("/d");
    let f = st.open(&p("/d/f"), OpenMode::CreateNew).unwrap();
    st.set_async_completions(7, 100);
    let io = st
        .submit_async(vec![vec![
            write_op(&f, 0, b"one", 1, true),
            IoOp { file: f.clone(), kind: IoOpKind::SyncData, tag: 2, link_next: false },
        ]])
        .pop()
        .unwrap();
    // One poll at 100 %: the write runs, its fdatasync only at the next poll.
    st.poll_async();
    assert_eq!(st.ops_in_flight(), 1);
    assert_eq!(st.counters().syncs, 0);
    let Ok(AsyncOutcome::Done(done)) = st.claim_async(io, true) else { panic!("waited") };
    assert_eq!(done.len(), 2);
    assert_eq!(st.counters().syncs, 1);

    // A failed write cancels the fdatasync linked to it.
    st.inject(Fault::Write(st.counters().writes + 1));
    let io = st
        .submit_async(vec![vec![
            write_op(&f, 3, b"two", 3, true),
            IoOp { file: f.clone(), kind: IoOpKind::SyncData, tag: 4, link_next: false },
        ]])
        .pop()
        .unwrap();
    let Ok(AsyncOutcome::Done(done)) = st.claim_async(io, true) else { panic!("waited") };
    assert!(done[0].result.is_err());
    let Err(Error::Io { source, .. }) = &done[1].result else { panic!("{:?}", done[1].result) };
    assert_eq!(source.raw_os_error(), Some(Errno::ECANCELED as i32));
    assert_eq!(st.counters().syncs, 1, "the cancelled fdatasync never ran");
    // A batch this storage never made is lost, not done.
    assert!(matches!(st.claim_async(AsyncIo::Queued(999), true), Ok(AsyncOutcome::Lost)));
}

#[test]
fn a_crash_lands_writes_in_flight_whole_torn_or_not_at_all() {
    let st = SimStorage::new();
    st.put_dir("/d");
    let f = st.open(&p("/d/f"), OpenMode::CreateNew).unwrap();
    f.write_all_at(&[1u8; 8192], 0).unwrap();
    f.sync_data().unwrap();
    st.sync_dir(&p("/d")).unwrap();
    let _io = st.submit_async(vec![vec![write_op(&f, 0, &[2u8; 8192], 1, false)]]);
    assert_eq!(st.ops_in_flight(), 1);
    let (mut none, mut whole, mut torn) = (0, 0, 0);
    let mut rng = SimRng::new(3);
    for _ in 0..200 {
        let c = st.crash(&mut rng).file("/d/f").unwrap();
        let twos = c.iter().filter(|&&b| b == 2).count();
        match twos {
            0 => none += 1,
            8192 => whole += 1,
            _ => torn += 1,
        }
        assert!(c.iter().all(|&b| b == 1 || b == 2));
    }
    assert!(none > 0 && whole > 0 && torn > 0, "none {none}, whole {whole}, torn {torn}");
    // Only the durable state survives with DURABLE_ONLY.
    let c = st.crash_with(&mut rng, &CrashConfig::DURABLE_ONLY).file("/d/f").unwrap();
    assert_eq!(c, vec![1u8; 8192]);
}

#[test]
fn sync_filesystem_makes_every_file_and_entry_durable_and_honours_faults() {
    let st = SimStorage::new();
    st.create_dir_all(&p("/d/e")).unwrap();
    let a = st.open(&p("/d/a"), OpenMode::CreateNew).unwrap();
    let b = st.open(&p("/d/e/b"), OpenMode::CreateNew).unwrap();
    a.write_all_at(b"aa", 0).unwrap();
    b.write_all_at(b"bb", 0).unwrap();
    assert!(st.sync_filesystem(&p("/missing")).is_err());
    st.sync_filesystem(&p("/d")).unwrap();
    // Both files and every entry above them survive; a later write does not.
    a.write_all_at(b"x", 2).unwrap();
    let c = st.crash_with(&mut SimRng::new(1), &CrashConfig::DURABLE_ONLY);
    assert_eq!(c.file("/d/a").unwrap(), b"aa");
    assert_eq!(c.file("/d/e/b").unwrap(), b"bb");

    // Counted as a sync: the injected fault fails it and nothing becomes durable.
    let syncs = st.counters().syncs;
    st.inject(Fault::Sync(syncs + 1));
    assert!(st.sync_filesystem(&p("/d")).is_err());
    let c = st.crash_with(&mut SimRng::new(1), &CrashConfig::DURABLE_ONLY);
    assert_eq!(c.file("/d/a").unwrap(), b"aa");
    st.sync_filesystem(&p("/d")).unwrap();
    let c = st.crash_with(&mut SimRng::new(1), &CrashConfig::DURABLE_ONLY);
    assert_eq!(c.file("/d/a").unwrap(), b"aax");
}
