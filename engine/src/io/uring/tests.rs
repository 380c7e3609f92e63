use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::*;
use crate::io::{thread_stats, IoStats};

/// A temporary directory on a real disk: `SEGLOG_TEST_DIR`, else /var/tmp (not /tmp, which
/// may be tmpfs, where unaligned O_DIRECT is accepted and alignment bugs go unseen).
pub(crate) fn test_dir() -> tempfile::TempDir {
    let base = std::env::var_os("SEGLOG_TEST_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/tmp"));
    tempfile::Builder::new().prefix("seglog-io-").tempdir_in(base).expect("temp dir")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed).collect()
}

fn aligned(data: &[u8], align: usize) -> AlignedBuf {
    let mut b = AlignedBuf::new(data.len(), align);
    b.extend_from_slice(data);
    b
}

fn delta(before: IoStats) -> IoStats {
    let now = thread_stats();
    IoStats {
        ops: now.ops - before.ops,
        enters: now.enters - before.enters,
        bytes_read: now.bytes_read - before.bytes_read,
        bytes_written: now.bytes_written - before.bytes_written,
        fsyncs: now.fsyncs - before.fsyncs,
        writes: now.writes - before.writes,
        bounced_reads: now.bounced_reads - before.bounced_reads,
    }
}

fn misaligned_of(e: &Error) -> Option<Misaligned> {
    match e {
        Error::Io { source, .. } => source.get_ref().and_then(|i| i.downcast_ref::<Misaligned>()).cloned(),
        _ => None,
    }
}

fn on_tmpfs(path: &Path) -> bool {
    use nix::sys::statfs::{statfs, TMPFS_MAGIC};
    statfs(path).is_ok_and(|st| st.filesystem_type() == TMPFS_MAGIC)
}

#[test]
fn round_trip_direct_and_buffered() {
    for mode in [IoMode::Direct, IoMode::Buffered] {
        let dir = test_dir();
        let s = UringStorage::new(mode).unwrap();
        assert_eq!(s.mode(), mode);
        let sub = dir.path().join("topic-0");
        s.create_dir_all(&sub).unwrap();
        let log = sub.join("00000000000000000000.log");
        let f = s.open_log(&log, OpenMode::CreateNew).unwrap();
        let a = f.direct_alignment();
        assert_eq!(a.is_some(), mode == IoMode::Direct, "{mode}");
        let data = pattern(3 * 4096, 7);
        let buf = aligned(&data, 4096);
        let before = thread_stats();
        f.write_all_at(&buf, 0).unwrap();
        f.write_all_at(&buf, 3 * 4096).unwrap();
        f.sync_data().unwrap();
        let d = delta(before);
        assert_eq!(d.bytes_written, 6 * 4096);
        assert_eq!(d.fsyncs, 1);
        assert_eq!(d.enters, 3, "{d:?}");
        f.allocate(1 << 20).unwrap();
        assert_eq!(f.len().unwrap(), 6 * 4096, "allocate keeps the size");
        let mut back = AlignedBuf::new(6 * 4096, 4096);
        back.set_len(6 * 4096);
        assert_eq!(f.read_at(&mut back, 0).unwrap(), 6 * 4096);
        assert_eq!(&back[..3 * 4096], &data[..]);
        assert_eq!(&back[3 * 4096..], &data[..]);
        // Past the end: short, then nothing.
        let mut v = vec![0u8; 10_000];
        assert_eq!(f.read_at(&mut v, 5 * 4096 + 100).unwrap(), 4096 - 100);
        assert_eq!(&v[..4096 - 100], &data[2 * 4096 + 100..]);
        assert_eq!(f.read_at(&mut v, 6 * 4096).unwrap(), 0);
        assert_eq!(f.read_at(&mut v, 1 << 30).unwrap(), 0);
        f.set_len(4096 + 17).unwrap();
        assert_eq!(f.len().unwrap(), 4096 + 17);
        let mut tail = vec![0u8; 100];
        assert_eq!(f.read_at(&mut tail, 4096).unwrap(), 17);
        assert_eq!(&tail[..17], &data[4096..4096 + 17]);
        assert!(f.modified_ms().unwrap() > 1_600_000_000_000);
        assert_eq!(std::fs::read(&log).unwrap(), &data[..4096 + 17]);
        drop(f);

        // Index files are never O_DIRECT: unaligned writes are fine.
        let idx = s.open(&sub.join("00000000000000000000.index"), OpenMode::CreateTruncate).unwrap();
        assert!(idx.direct_alignment().is_none());
        idx.write_all_at(b"hello index", 3).unwrap();
        idx.sync_data().unwrap();
        let mut h = [0u8; 14];
        idx.read_exact_at(&mut h, 0).unwrap();
        assert_eq!(&h, b"\0\0\0hello index");
        drop(idx);

        // Directory operations.
        s.write_file_atomic(&sub.join("leader-epoch-checkpoint"), b"0\n1\n0 0\n").unwrap();
        assert_eq!(s.read_small_file(&sub.join("leader-epoch-checkpoint"), 100).unwrap(), b"0\n1\n0 0\n");
        s.rename(&log, &sub.join("00000000000000000000.log.deleted")).unwrap();
        s.sync_dir(&sub).unwrap();
        let mut names = s.list_dir(&sub).unwrap();
        names.sort();
        assert_eq!(
            names,
            ["00000000000000000000.index", "00000000000000000000.log.deleted", "leader-epoch-checkpoint"]
        );
        s.remove_file(&sub.join("00000000000000000000.log.deleted")).unwrap();
        assert!(!s.exists(&sub.join("00000000000000000000.log.deleted")));
        let e = s.remove_file(&sub.join("nope")).unwrap_err();
        assert_eq!(error_errno(&e), Some(libc::ENOENT), "{e}");
        assert!(e.to_string().contains("nope"), "{e}");
        assert!(s.is_dir(&sub));
        let e = s.open_log(&sub.join("missing.log"), OpenMode::Read).unwrap_err();
        assert_eq!(error_errno(&e), Some(libc::ENOENT));
    }
}

#[test]
fn unaligned_direct_writes_are_refused_with_einval() {
    let dir = test_dir();
    let s = UringStorage::new(IoMode::Direct).unwrap();
    let path = dir.path().join("0.log");
    let f = s.open_log(&path, OpenMode::CreateNew).unwrap();
    let a = f.direct_alignment().unwrap();
    assert!(a.offset >= 512 && a.offset.is_power_of_two() && a.mem.is_power_of_two(), "{a:?}");
    let buf = aligned(&pattern(8192, 1), 4096);
    let cases: [(&[u8], u64, &str); 3] =
        [(&buf[..4096], 100, "offset"), (&buf[..100], 0, "length"), (&buf[1..1 + a.offset], 0, "memory address")];
    for (b, pos, what) in cases {
        let before = thread_stats();
        let e = f.write_all_at(b, pos).unwrap_err();
        assert_eq!(delta(before).enters, 0, "refused before reaching the kernel");
        assert_eq!(error_errno(&e), Some(libc::EINVAL), "{e}");
        let m = misaligned_of(&e).unwrap_or_else(|| panic!("not a Misaligned: {e}"));
        assert_eq!(m.what, what);
        let msg = e.to_string();
        assert!(msg.contains("EINVAL") && msg.contains(what) && msg.contains("0.log"), "{msg}");
        match &e {
            Error::Io { source, .. } => assert_eq!(source.kind(), io::ErrorKind::InvalidInput),
            other => panic!("{other}"),
        }
    }
    assert_eq!(f.len().unwrap(), 0);
    // The kernel would refuse it too on this filesystem (tmpfs would not: skip there).
    if !on_tmpfs(dir.path()) {
        let again = std::fs::OpenOptions::new().write(true).custom_flags(OFlag::O_DIRECT.bits()).open(&path).unwrap();
        assert_eq!(nix::sys::uio::pwrite(&again, &buf[..4096], 100), Err(Errno::EINVAL));
    }
    f.write_all_at(&buf[..a.offset], a.offset as u64).unwrap();
    assert_eq!(f.len().unwrap(), 2 * a.offset as u64);
}

#[test]
fn unaligned_reads_on_a_direct_file() {
    let dir = test_dir();
    let s = UringStorage::new(IoMode::Direct).unwrap();
    let path = dir.path().join("0.log");
    let f = s.open_log(&path, OpenMode::CreateNew).unwrap();
    let size = 5 * 1024 * 1024 + 3 * 4096; // more than one bounce buffer
    let data = pattern(size, 42);
    f.write_all_at(&aligned(&data, 4096), 0).unwrap();
    let end = size as u64 - 1234;
    f.set_len(end).unwrap(); // an unaligned end of file
    let data = &data[..end as usize];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    let mut cases: Vec<(u64, usize)> = vec![(0, 1), (1, 1), (511, 2), (4095, 4098), (end - 1, 10), (end - 100, 100)];
    cases.push((3, 4 * 1024 * 1024 + 1000)); // crosses the bounce size
    cases.push((end - 5_000_000, 6_000_000)); // long, past the end
    for _ in 0..200 {
        cases.push((next(end + 100), next(70_000) as usize + 1));
    }
    for (pos, len) in cases {
        let mut v = vec![0xAAu8; len + 1];
        let slice = &mut v[1..]; // an unaligned address
        let before = thread_stats().bounced_reads;
        let n = f.read_at(slice, pos).unwrap();
        assert_eq!(thread_stats().bounced_reads, before + 1, "read of {len} at {pos}: counted as bounced");
        let expect = (end.saturating_sub(pos) as usize).min(len);
        assert_eq!(n, expect, "read of {len} at {pos}");
        assert_eq!(&slice[..n], &data[pos as usize..pos as usize + n], "read of {len} at {pos}");
    }
    let mut exact = vec![0u8; 777];
    f.read_exact_at(&mut exact, 12_345).unwrap();
    assert_eq!(&exact[..], &data[12_345..12_345 + 777]);
    assert!(f.read_exact_at(&mut exact, end - 10).is_err());
}

fn write_op(file: &Arc<dyn IoFile>, data: &[u8], pos: u64, tag: u64, link_next: bool) -> IoOp {
    IoOp {
        file: file.clone(),
        kind: IoOpKind::Write { buf: aligned(data, 4096).into(), pos, dsync: false },
        tag,
        link_next,
    }
}

#[test]
fn async_batches_complete_later_and_survive_synchronous_io() {
    use crate::io::{AsyncIo, AsyncOutcome};
    for mode in [IoMode::Direct, IoMode::Buffered] {
        let dir = test_dir();
        let s = UringStorage::new(mode).unwrap();
        let a = s.open_log(&dir.path().join("a.log"), OpenMode::CreateNew).unwrap();
        let b = s.open_log(&dir.path().join("b.log"), OpenMode::CreateNew).unwrap();
        let (ca, cb) = (pattern(3 * 4096, 1), pattern(4096, 2));
        let batch_a = vec![
            write_op(&a, &ca, 0, 1, true),
            IoOp { file: a.clone(), kind: IoOpKind::SyncData, tag: 2, link_next: false },
        ];
        let batch_b = vec![write_op(&b, &cb, 0, 3, false)];
        let before = thread_stats();
        let mut pending: Vec<AsyncIo> = s.submit_async(vec![batch_a, batch_b]);
        assert_eq!(delta(before).enters, 1, "{mode}: both batches go in one io_uring_enter");
        assert!(pending.iter().all(|p| matches!(p, AsyncIo::Ring(_))), "{mode}: {pending:?}");
        // Synchronous I/O on the same ring meanwhile: its reaping must keep the other
        // batches' completions for them.
        let c = s.open(&dir.path().join("c"), OpenMode::CreateNew).unwrap();
        c.write_all_at(b"sync", 0).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !pending.is_empty() {
            assert!(Instant::now() < deadline, "{mode}: async batches never completed");
            s.poll_async();
            let mut still = Vec::new();
            for p in pending {
                match s.claim_async(p, false) {
                    Ok(AsyncOutcome::Done(done)) => got.push(done),
                    Ok(AsyncOutcome::Lost) => panic!("{mode}: the ring lost a batch"),
                    Err(p) => still.push(p),
                }
            }
            pending = still;
        }
        got.sort_by_key(|d| d[0].op.tag);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len(), 2);
        assert_eq!(*got[0][0].result.as_ref().unwrap(), ca.len());
        assert_eq!(*got[0][1].result.as_ref().unwrap(), 0);
        assert_eq!(*got[1][0].result.as_ref().unwrap(), cb.len());
        assert_eq!(std::fs::read(dir.path().join("a.log")).unwrap(), ca);
        assert_eq!(std::fs::read(dir.path().join("b.log")).unwrap(), cb);
        assert_eq!(std::fs::read(dir.path().join("c")).unwrap(), b"sync");
    }
}

#[test]
fn a_finished_async_write_is_seen_without_a_system_call() {
    let dir = test_dir();
    let s = UringStorage::new(IoMode::Direct).unwrap();
    let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
    let data = pattern(16384, 5);
    for _ in 0..3 {
        let io = s.submit_async(vec![vec![write_op(&f, &data, 0, 1, false)]]).pop().unwrap();
        let before = thread_stats();
        let t = Instant::now();
        while !s.completions_waiting() && t.elapsed() < Duration::from_secs(2) {
            std::hint::spin_loop();
        }
        assert!(s.completions_waiting(), "the ring never showed the completion waiting");
        assert_eq!(delta(before).enters, 0, "seeing the completion took no io_uring_enter");
        s.poll_async();
        assert!(s.claim_async(io, false).is_ok(), "the write completed");
    }
}

#[test]
fn async_batch_waited_for_and_failures_reported() {
    use crate::io::AsyncOutcome;
    let dir = test_dir();
    let s = UringStorage::new(IoMode::Direct).unwrap();
    let log = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
    let good = pattern(4096, 7);
    // A misaligned O_DIRECT write fails before submission; its linked fdatasync is cancelled;
    // the batch still completes as a whole.
    let bad = pattern(100, 8);
    let ops = vec![
        write_op(&log, &good, 0, 1, false),
        write_op(&log, &bad, 4096 + 3, 2, true),
        IoOp { file: log.clone(), kind: IoOpKind::SyncData, tag: 3, link_next: false },
    ];
    let io = s.submit_async(vec![ops]).pop().unwrap();
    let Ok(AsyncOutcome::Done(done)) = s.claim_async(io, true) else { panic!("waited, and not lost") };
    assert_eq!(done.len(), 3);
    assert!(done[0].result.is_ok());
    assert!(done[1].result.is_err());
    assert!(done[2].result.is_err(), "the fdatasync linked after a failed write is cancelled");
    assert_eq!(std::fs::read(dir.path().join("0.log")).unwrap(), good);
}

#[test]
fn a_batch_the_ring_does_not_know_is_lost_not_empty() {
    use crate::io::{AsyncIo, AsyncOutcome, RingTicket};
    // Make sure the thread ring exists, so the id is looked up on it.
    with_thread_ring(|_| ()).unwrap();
    let s = UringStorage::new(IoMode::Buffered).unwrap();
    let claim_async = |io, wait| s.claim_async(io, wait);
    let unknown = || AsyncIo::Ring(RingTicket::new(u32::MAX - 3));
    assert!(matches!(claim_async(unknown(), false), Ok(AsyncOutcome::Lost)));
    assert!(matches!(claim_async(unknown(), true), Ok(AsyncOutcome::Lost)));
    // A batch that is done already is never lost, even with no operations.
    assert!(matches!(claim_async(AsyncIo::Ready(Vec::new()), false), Ok(AsyncOutcome::Done(v)) if v.is_empty()));
}

#[test]
fn a_second_doorbell_or_a_refused_poll_falls_back_to_the_plain_wait() {
    let (a, b) = (crate::io::eventfd::EventFd::new().unwrap(), crate::io::eventfd::EventFd::new().unwrap());
    let mut ring = Ring::new(16).unwrap();
    assert!(ring.arm_doorbell(a.raw()));
    assert!(ring.arm_doorbell(a.raw()), "the same doorbell again keeps its poll");
    assert!(!ring.arm_doorbell(b.raw()), "another eventfd must not be taken for the armed one");
    // A poll the kernel refuses (a file descriptor that is not open) fails the doorbell for
    // good: no re-arming in a loop.
    let mut ring = Ring::new(16).unwrap();
    assert!(ring.arm_doorbell(1 << 20));
    ring.submit_queued().unwrap();
    let t = Instant::now();
    while ring.doorbell != Doorbell::Failed {
        assert!(t.elapsed() < Duration::from_secs(5), "the refused poll never completed: {:?}", ring.doorbell);
        let _ = ring.get_events(1, Some(Duration::from_millis(10)));
    }
    assert!(!ring.arm_doorbell(a.raw()));
}

fn thread_doorbell() -> Doorbell {
    with_thread_ring(|r| r.doorbell).unwrap()
}

#[test]
fn doorbell_poll_is_armed_once_and_cleared_when_it_fires() {
    let bell = crate::io::eventfd::EventFd::new().unwrap();
    if !with_thread_ring(|r| r.ext_arg).unwrap() {
        eprintln!("no IORING_FEAT_EXT_ARG: the doorbell poll is not used");
        return;
    }
    assert_eq!(thread_doorbell(), Doorbell::Idle);
    assert!(wait_doorbell_or_io(bell.raw(), Duration::from_millis(5)));
    assert!(matches!(thread_doorbell(), Doorbell::Armed { .. }), "{:?}", thread_doorbell());
    // Timed-out waits keep the same poll (arming again would queue a second one).
    assert!(wait_doorbell_or_io(bell.raw(), Duration::from_millis(5)));
    assert!(matches!(thread_doorbell(), Doorbell::Armed { .. }));
    let queued = with_thread_ring(|r| {
        let before = r.ring.submission().len();
        assert!(r.arm_doorbell(bell.raw()));
        r.ring.submission().len() - before
    })
    .unwrap();
    assert_eq!(queued, 0, "arming an armed doorbell queued another poll");
    // Fired while a synchronous operation reaps the ring: the completion is kept for the
    // doorbell, and the next wait returns at once and clears the eventfd.
    bell.notify();
    let t = Instant::now();
    while !matches!(thread_doorbell(), Doorbell::Fired { .. }) {
        assert!(t.elapsed() < Duration::from_secs(5), "the doorbell poll never completed");
        // SAFETY: a NOP points to no memory.
        let r = with_thread_ring(|ring| unsafe { ring.run(&[opcode::Nop::new().build()]) }).unwrap();
        assert_eq!(r, vec![0]);
    }
    let t = Instant::now();
    assert!(wait_doorbell_or_io(bell.raw(), Duration::from_secs(5)));
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(thread_doorbell(), Doorbell::Idle);
    assert_eq!(bell.drain(), 0, "the wait cleared the doorbell");
    // Re-armed by the next wait.
    assert!(wait_doorbell_or_io(bell.raw(), Duration::from_millis(5)));
    assert!(matches!(thread_doorbell(), Doorbell::Armed { .. }));
}

#[test]
fn a_doorbell_poll_never_submitted_is_counted_among_the_failed_entries() {
    let bell = crate::io::eventfd::EventFd::new().unwrap();
    let nops = || AsyncOps { ops: Vec::new(), fds: Vec::new(), idx: Vec::new(), results: Vec::new() };
    let nop = opcode::Nop::new().build();
    // Poll, then a two-entry batch, all still queued: failing the last three takes the poll;
    // failing the last two leaves it armed.
    for (left, poll_failed) in [(3, true), (2, false)] {
        let mut ring = Ring::new(16).unwrap();
        assert!(ring.arm_doorbell(bell.raw()));
        // SAFETY: NOPs point to no memory; nothing is submitted before the ring is dropped.
        let id = unsafe { ring.queue_async(&[nop.clone(), nop.clone()], nops()) }.ok().unwrap();
        assert_eq!(ring.doorbell, Doorbell::Armed { fd: bell.raw(), queued_after: 2 });
        ring.fail_unsubmitted(left, libc::EIO);
        let gone = ring.doorbell == Doorbell::Idle;
        assert_eq!(gone, poll_failed, "left {left}: {:?}", ring.doorbell);
        let b = &ring.async_batches[&id];
        assert_eq!(b.left, 0, "left {left}");
        assert!(b.raw.iter().all(|r| *r == Some(-libc::EIO)));
    }
    // Queued behind a batch, the poll is the last entry: failing one entry takes it alone.
    let mut ring = Ring::new(16).unwrap();
    // SAFETY: as above.
    let id = unsafe { ring.queue_async(std::slice::from_ref(&nop), nops()) }.ok().unwrap();
    assert!(ring.arm_doorbell(bell.raw()));
    ring.fail_unsubmitted(1, libc::EIO);
    assert_eq!(ring.doorbell, Doorbell::Idle);
    assert_eq!(ring.async_batches[&id].left, 1);
    // Retiring a ring drops its poll with it.
    assert!(ring.arm_doorbell(bell.raw()));
    ring.async_batches.clear();
    ring.retire(libc::EIO);
    assert_eq!(ring.doorbell, Doorbell::Idle);
}

#[test]
fn doorbell_or_io_wakes_on_either() {
    let bell = crate::io::eventfd::EventFd::new().unwrap();
    // Times out with nothing happening.
    let t = Instant::now();
    assert!(wait_doorbell_or_io(bell.raw(), Duration::from_millis(30)));
    assert!(t.elapsed() >= Duration::from_millis(20), "{:?}", t.elapsed());
    // Rung before the wait: returns at once, and the counter is cleared.
    bell.notify();
    let t = Instant::now();
    assert!(wait_doorbell_or_io(bell.raw(), Duration::from_secs(5)));
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(bell.drain(), 0, "the wait cleared the doorbell");
    // A write completing wakes it too.
    let dir = test_dir();
    let s = UringStorage::new(IoMode::Buffered).unwrap();
    let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
    let data = pattern(4096, 3);
    let io = s.submit_async(vec![vec![write_op(&f, &data, 0, 1, false)]]).pop().unwrap();
    let t = Instant::now();
    let mut io = Some(io);
    while let Some(p) = io.take() {
        assert!(t.elapsed() < Duration::from_secs(5), "the write completion never woke the wait");
        assert!(wait_doorbell_or_io(bell.raw(), Duration::from_secs(5)));
        if let Err(p) = s.claim_async(p, false) {
            io = Some(p);
        }
    }
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

#[test]
fn submit_batch_is_one_enter_and_in_order() {
    for mode in [IoMode::Direct, IoMode::Buffered] {
        let dir = test_dir();
        let s = UringStorage::new(mode).unwrap();
        let log = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
        let idx = s.open(&dir.path().join("0.index"), OpenMode::CreateNew).unwrap();
        let chunks: Vec<Vec<u8>> = (0..4).map(|i| pattern(8192, i as u8)).collect();
        let mut ops: Vec<IoOp> = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| write_op(&log, c, i as u64 * 8192, 100 + i as u64, i == 3))
            .collect();
        ops.push(IoOp { file: log.clone(), kind: IoOpKind::SyncData, tag: 104, link_next: false });
        ops.push(write_op(&idx, b"entry", 5, 105, true));
        ops.push(IoOp { file: idx.clone(), kind: IoOpKind::SyncData, tag: 106, link_next: false });
        let before = thread_stats();
        let out = s.submit(ops);
        let d = delta(before);
        assert_eq!(d.enters, 1, "{mode}: {d:?}");
        assert_eq!(d.ops, 7);
        assert_eq!(d.fsyncs, 2);
        assert_eq!(d.bytes_written, 4 * 8192 + 5);
        assert_eq!(out.len(), 7);
        for (i, c) in out.iter().enumerate() {
            assert_eq!(c.op.tag, 100 + i as u64);
            let r = c.result.as_ref().unwrap_or_else(|e| panic!("op {i}: {e}"));
            match &c.op.kind {
                IoOpKind::Write { buf, .. } => {
                    assert_eq!(*r, buf.len());
                    if i < 4 {
                        assert_eq!(&buf[..], &chunks[i][..], "the buffer comes back intact");
                    }
                }
                IoOpKind::SyncData => assert_eq!(*r, 0),
            }
        }
        assert_eq!(std::fs::read(dir.path().join("0.log")).unwrap(), chunks.concat());
        assert_eq!(std::fs::read(dir.path().join("0.index")).unwrap(), b"\0\0\0\0\0entry");
    }
}

#[test]
fn pool_writes_go_out_fixed_and_dsync_writes_land() {
    // A thread of its own, so its pool and ring start fresh.
    std::thread::spawn(|| {
        for mode in [IoMode::Direct, IoMode::Buffered] {
            let dir = test_dir();
            let s = UringStorage::new(mode).unwrap();
            let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
            let pool = pool::thread_pool();
            let mut chunks = Vec::new();
            let mut ops = Vec::new();
            for i in 0..3u8 {
                let mut c = pool.alloc();
                c.bytes_mut()[..8192].copy_from_slice(&pattern(8192, i));
                let c = Arc::new(c);
                let buf = WriteBuf::pooled(c.clone(), 4096, 4096);
                ops.push(IoOp {
                    file: f.clone(),
                    kind: IoOpKind::Write { buf, pos: u64::from(i) * 4096, dsync: i == 1 },
                    tag: u64::from(i),
                    link_next: false,
                });
                chunks.push(c);
            }
            // And one owned buffer, with RWF_DSYNC.
            ops.push(IoOp {
                file: f.clone(),
                kind: IoOpKind::Write { buf: aligned(&pattern(4096, 9), 4096).into(), pos: 3 * 4096, dsync: true },
                tag: 3,
                link_next: false,
            });
            let before = crate::io::pool::thread_pool_stats(false);
            let t = thread_stats();
            let out = s.submit(ops);
            assert_eq!(delta(t).enters, 1);
            assert!(out.iter().all(|c| c.result.as_ref().ok() == Some(&4096)), "{out:?}");
            let after = crate::io::pool::thread_pool_stats(false);
            assert_eq!(after.fixed_writes - before.fixed_writes, 3, "{mode}: {after:?}");
            assert_eq!(after.mode, crate::io::pool::BufferMode::Registered { partial: None });
            drop(out);
            let back = std::fs::read(dir.path().join("0.log")).unwrap();
            for i in 0..3u8 {
                assert_eq!(&back[i as usize * 4096..][..4096], &pattern(8192, i)[4096..], "{mode} {i}");
            }
            assert_eq!(&back[3 * 4096..], &pattern(4096, 9)[..]);
            // Plain file methods: RWF_DSYNC through the ring.
            f.write_all_at_dsync(&aligned(&pattern(4096, 5), 4096), 4 * 4096).unwrap();
            assert_eq!(&std::fs::read(dir.path().join("0.log")).unwrap()[4 * 4096..], &pattern(4096, 5)[..]);
        }
    })
    .join()
    .unwrap();
}

#[test]
fn dsync_writes_through_the_plain_backend() {
    let dir = test_dir();
    let s = crate::io::std_backend::StdStorage::default();
    let f = s.open(&dir.path().join("x"), OpenMode::CreateNew).unwrap();
    f.write_all_at_dsync(b"hello", 3).unwrap();
    let out = s.submit(vec![IoOp {
        file: f.clone(),
        kind: IoOpKind::Write { buf: aligned(b"world", 512).into(), pos: 8, dsync: true },
        tag: 0,
        link_next: false,
    }]);
    assert!(out[0].result.is_ok());
    assert_eq!(std::fs::read(dir.path().join("x")).unwrap(), b"\0\0\0helloworld");
}

#[test]
fn submit_failures_cancel_linked_ops() {
    let dir = test_dir();
    let s = UringStorage::new(IoMode::Direct).unwrap();
    let path = dir.path().join("0.log");
    let log = s.open_log(&path, OpenMode::CreateNew).unwrap();
    let ro = s.open_log(&path, OpenMode::Read).unwrap();
    let a = log.direct_alignment().unwrap().offset as u64;
    let block = pattern(4096, 9);
    let ops = vec![
        // A misaligned write (refused before the kernel) linked to an fsync.
        write_op(&log, &block, a / 2, 0, true),
        IoOp { file: log.clone(), kind: IoOpKind::SyncData, tag: 1, link_next: false },
        // A good one, unlinked.
        write_op(&log, &block, 0, 2, false),
        // A write to a read-only fd: the kernel fails it (EBADF) and cancels its link.
        write_op(&ro, &block, 4096, 3, true),
        IoOp { file: ro.clone(), kind: IoOpKind::SyncData, tag: 4, link_next: true },
        write_op(&log, &block, 8192, 5, false),
        // A chain that succeeds.
        write_op(&log, &block, 12288, 6, true),
        IoOp { file: log.clone(), kind: IoOpKind::SyncData, tag: 7, link_next: false },
    ];
    let before = thread_stats();
    let out = s.submit(ops);
    assert_eq!(delta(before).enters, 1);
    let errno: Vec<Option<i32>> = out.iter().map(|c| c.result.as_ref().err().and_then(error_errno)).collect();
    assert_eq!(
        errno,
        [
            Some(libc::EINVAL),
            Some(libc::ECANCELED),
            None,
            Some(libc::EBADF),
            Some(libc::ECANCELED),
            Some(libc::ECANCELED),
            None,
            None
        ]
    );
    assert!(misaligned_of(out[0].result.as_ref().unwrap_err()).is_some());
    assert_eq!(out.iter().map(|c| c.op.tag).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), 4 * 4096);
    assert_eq!(&on_disk[..4096], &block[..]);
    assert!(on_disk[4096..3 * 4096].iter().all(|&b| b == 0), "the cancelled writes did not run");
    assert_eq!(&on_disk[3 * 4096..], &block[..]);
}

#[test]
fn short_writes_are_finished_and_cancelled_links_rerun() {
    // Feeds settle_round a short completion as the kernel would give it: op 0 wrote only
    // 100 bytes, so the kernel cancelled its linked fsync (op 1); op 2 completed.
    let dir = test_dir();
    let s = UringStorage::new(IoMode::Buffered).unwrap();
    let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
    let data = pattern(4096, 3);
    let ops = vec![
        write_op(&f, &data, 0, 0, true),
        IoOp { file: f.clone(), kind: IoOpKind::SyncData, tag: 1, link_next: true },
        write_op(&f, &data, 4096, 2, false),
    ];
    let fds = vec![f.raw_fd().unwrap(); 3];
    let mut results: Vec<Option<Result<usize>>> = (0..3).map(|_| None).collect();
    let before = thread_stats();
    let (w, syncs) =
        with_thread_ring(|r| settle_round(r, &ops, &fds, &[0, 1, 2], &[100, -libc::ECANCELED, 4096], &mut results))
            .unwrap();
    let d = delta(before);
    assert_eq!(d.enters, 2, "one follow-up write, one re-run fsync");
    assert_eq!((w + d.bytes_written, syncs + d.fsyncs), (100 + (4096 - 100) + 4096, 1));
    let r: Vec<usize> = results.into_iter().map(|r| r.unwrap().unwrap()).collect();
    assert_eq!(r, [4096, 0, 4096]);
    let back = std::fs::read(dir.path().join("0.log")).unwrap();
    assert_eq!(back.len(), 4096, "op 2 was only pretended");
    assert!(back[..100].iter().all(|&b| b == 0), "the first 100 bytes were only pretended too");
    assert_eq!(&back[100..], &data[100..]);

    // A short write whose remainder fails: the link successor is cancelled.
    let ro = s.open_log(&dir.path().join("0.log"), OpenMode::Read).unwrap();
    let ops = vec![
        write_op(&ro, &data, 0, 0, true),
        IoOp { file: ro.clone(), kind: IoOpKind::SyncData, tag: 1, link_next: false },
    ];
    let fds = vec![ro.raw_fd().unwrap(); 2];
    let mut results: Vec<Option<Result<usize>>> = (0..2).map(|_| None).collect();
    with_thread_ring(|r| settle_round(r, &ops, &fds, &[0, 1], &[100, -libc::ECANCELED], &mut results)).unwrap();
    let errno: Vec<Option<i32>> =
        results.iter().map(|r| r.as_ref().unwrap().as_ref().err().and_then(error_errno)).collect();
    assert_eq!(errno, [Some(libc::EBADF), Some(libc::ECANCELED)]);
}

#[test]
fn submit_batch_larger_than_the_ring() {
    let dir = test_dir();
    let s = UringStorage::new(IoMode::Buffered).unwrap();
    let f = s.open_log(&dir.path().join("0.log"), OpenMode::CreateNew).unwrap();
    let n = RING_ENTRIES as usize * 2 + 10;
    let ops: Vec<IoOp> =
        (0..n).map(|i| write_op(&f, &[(i % 251) as u8; 100], i as u64 * 100, i as u64, false)).collect();
    let before = thread_stats();
    let out = s.submit(ops);
    assert_eq!(delta(before).enters, 3);
    assert!(out.iter().enumerate().all(|(i, c)| c.op.tag == i as u64 && c.result.as_ref().ok() == Some(&100)));
    let back = std::fs::read(dir.path().join("0.log")).unwrap();
    assert!(back.chunks(100).enumerate().all(|(i, c)| c.iter().all(|&b| b == (i % 251) as u8)));
}

#[test]
fn refuses_sync_mode_and_nests_rings() {
    assert!(UringStorage::new(IoMode::Sync).is_err());
    let inner = with_thread_ring(|outer| {
        let fd = outer.raw_fd();
        with_thread_ring(|inner| inner.raw_fd() != fd).unwrap()
    });
    assert!(inner.unwrap(), "a nested call gets its own ring");
    let a = with_thread_ring(|r| r.raw_fd()).unwrap();
    let b = with_thread_ring(|r| r.raw_fd()).unwrap();
    assert_eq!(a, b, "one ring per thread");
    let other = std::thread::spawn(|| with_thread_ring(|r| r.raw_fd()).unwrap()).join().unwrap();
    let _ = other; // a different thread has its own ring (its fd may be reused once it exits)
}

#[test]
fn open_log_on_a_filesystem_refusing_o_direct_names_the_path() {
    let s = UringStorage::new(IoMode::Direct).unwrap();
    // procfs has no O_DIRECT.
    let e = s.open_log(Path::new("/proc/self/status"), OpenMode::Read).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("/proc/self/status") && msg.contains("O_DIRECT"), "{msg}");
    // Buffered mode opens it fine.
    let b = UringStorage::new(IoMode::Buffered).unwrap();
    let f = b.open_log(Path::new("/proc/self/status"), OpenMode::Read).unwrap();
    let mut v = vec![0u8; 64];
    assert!(f.read_at(&mut v, 0).unwrap() > 0);
}

#[test]
fn wait_eventfd_wakes_and_times_out() {
    use std::os::fd::AsRawFd as _;
    type Wait = fn(RawFd, Option<Duration>) -> Result<Option<u64>>;
    let waits: [(&str, Wait); 2] = [("uring", wait_eventfd), ("plain", wait_eventfd_plain)];
    for (name, wait) in waits {
        for nonblock in [false, true] {
            let flags = if nonblock { EfdFlags::EFD_NONBLOCK } else { EfdFlags::empty() };
            let efd = Arc::new(EventFd::from_flags(EfdFlags::EFD_CLOEXEC | flags).unwrap());
            let fd = efd.as_raw_fd();
            // Times out.
            let t = Instant::now();
            assert_eq!(wait(fd, Some(Duration::from_millis(30))).unwrap(), None, "{name} {flags:?}");
            assert!(t.elapsed() >= Duration::from_millis(29), "{name} {flags:?}: {:?}", t.elapsed());
            // Already rung: returns at once with the counter.
            assert_eq!(efd.write(3), Ok(8));
            assert_eq!(wait(fd, Some(Duration::from_secs(5))).unwrap(), Some(3));
            // Woken by another thread, with and without a timeout.
            for timeout in [Some(Duration::from_secs(10)), None] {
                let t = Instant::now();
                let bell = efd.clone();
                let waker = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(40));
                    assert_eq!(bell.write(1), Ok(8));
                });
                let before = thread_stats();
                assert_eq!(wait(fd, timeout).unwrap(), Some(1), "{name} {flags:?}");
                let el = t.elapsed();
                assert!(el >= Duration::from_millis(35) && el < Duration::from_secs(5), "{name} {flags:?}: {el:?}");
                let d = delta(before);
                if name == "uring" {
                    // A non-blocking eventfd may take a POLL_ADD round on older kernels.
                    let most = if nonblock { 2 } else { 1 };
                    assert!(d.enters >= 1 && d.enters <= most, "io_uring_enter per sleep: {d:?}");
                }
                waker.join().unwrap();
            }
        }
    }
}

#[test]
fn completed_async_batches_are_named_once_whoever_claims_them() {
    use crate::io::{AsyncIo, AsyncOutcome};
    // On a thread of its own: the thread's ring starts counting at the first call.
    std::thread::spawn(|| {
        let dir = test_dir();
        let s = UringStorage::new(IoMode::Direct).unwrap();
        let f = s.open_log(&dir.path().join("a.log"), OpenMode::CreateNew).unwrap();
        let mut ids = Vec::new();
        // Before the first call nothing is kept: a batch done then is never named.
        let early = s.submit_async(vec![vec![write_op(&f, &pattern(4096, 1), 0, 1, false)]]).pop().unwrap();
        let Ok(AsyncOutcome::Done(_)) = s.claim_async(early, true) else { panic!("waited") };
        assert!(s.take_finished_async(&mut ids), "the io_uring backend names finished batches");
        assert!(ids.is_empty(), "{ids:?}");
        let batches: Vec<Vec<IoOp>> =
            (0..3u64).map(|i| vec![write_op(&f, &pattern(4096, i as u8), (i + 1) * 4096, i, false)]).collect();
        let mut pending: Vec<AsyncIo> = s.submit_async(batches);
        let keys: Vec<u64> = pending.iter().map(|p| p.key().expect("in flight on the ring")).collect();
        // One claimed by waiting, before anyone asked what finished: still named, once.
        let first = pending.remove(0);
        let Ok(AsyncOutcome::Done(_)) = s.claim_async(first, true) else { panic!("waited") };
        let deadline = Instant::now() + Duration::from_secs(10);
        while ids.len() < keys.len() {
            assert!(Instant::now() < deadline, "named {ids:?} of {keys:?}");
            s.poll_async();
            s.take_finished_async(&mut ids);
        }
        ids.sort_unstable();
        let mut want = keys.clone();
        want.sort_unstable();
        assert_eq!(ids, want);
        // Each named batch is done: a claim without waiting gets it.
        for p in pending {
            assert!(matches!(s.claim_async(p, false), Ok(AsyncOutcome::Done(_))));
        }
        ids.clear();
        s.take_finished_async(&mut ids);
        assert!(ids.is_empty(), "named twice: {ids:?}");
    })
    .join()
    .unwrap();
}

#[test]
fn a_threads_ring_runs_at_least_min_io_workers_blocking_writes_at_once() {
    std::thread::spawn(|| {
        // A thread whose first ring is small: the kernel's limit is at most its 16 entries,
        // under MIN_IO_WORKERS on any machine.
        let mut first = Ring::new(TEMP_RING_ENTRIES).unwrap();
        let Some(before) = first.io_workers() else {
            eprintln!("skipped: the kernel does not report its io-wq limits (before Linux 5.15)");
            return;
        };
        assert!(before <= TEMP_RING_ENTRIES, "{before} workers");
        // The thread's ring raises it, for every ring of the thread.
        let limit = with_thread_ring(|ring| ring.io_workers()).unwrap();
        assert!(limit.is_some_and(|n| n >= MIN_IO_WORKERS), "{limit:?} workers");
        assert_eq!(first.io_workers(), limit);
    })
    .join()
    .unwrap();
}

#[test]
fn fdatasyncs_together_go_out_in_one_submission_even_for_closed_lazy_files() {
    use crate::io::file_cache::{FileCache, LazyFile, Reopen};
    let dir = test_dir();
    let s: Arc<dyn Storage> = Arc::new(UringStorage::new(IoMode::Buffered).unwrap());
    let cache = FileCache::new(16);
    let files: Vec<Arc<dyn IoFile>> = (0..3)
        .map(|i| {
            let f = LazyFile::create(
                s.clone(),
                &dir.path().join(format!("{i}.index")),
                OpenMode::CreateNew,
                Reopen::Plain,
                &cache,
            )
            .unwrap();
            f.write_all_at(&pattern(4096, i as u8), 0).unwrap();
            // No descriptor left: the batch has to open each file again.
            f.close_if_idle();
            f as Arc<dyn IoFile>
        })
        .collect();
    assert_eq!(cache.stats().open, 0);
    let before = thread_stats();
    crate::io::sync_data_together(s.as_ref(), &files.iter().collect::<Vec<_>>()).unwrap();
    let d = delta(before);
    assert_eq!(d.fsyncs, 3, "{d:?}");
    // One after the other would take an io_uring_enter each.
    assert!(d.enters < 3, "the three fdatasync's were not submitted together: {d:?}");
}
