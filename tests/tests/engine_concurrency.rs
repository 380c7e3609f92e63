//! Many producer threads on many partitions across shards: per-partition order is kept, every
//! acknowledged batch is readable, offsets are gap-free; and the engine answers from plain
//! threads and as a `Future`.

use std::sync::Arc;

use seglog::format::batch::BatchHeader;
use seglog::format::builder::BatchBuilder;
use seglog::{Durability, Engine, EngineConfig, IoMode, TopicPartition};

fn batch(producer: u32, seq: u32, records: u32) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for r in 0..records {
        let v = format!("p{producer}-s{seq}-r{r}");
        b.push(1_700_000_000_000 + seq as i64, Some(&producer.to_be_bytes()), Some(v.as_bytes()), &[]);
    }
    b.build().unwrap()
}

fn run(mode: IoMode, durability: Durability) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig::new(dir.path());
    cfg.io_mode = mode;
    cfg.shards = Some(2);
    cfg.durability = durability;
    cfg.queue_capacity = 64; // small, so producers hit back-pressure
    let engine = Arc::new(Engine::open(cfg).unwrap());
    let partitions: Vec<TopicPartition> = (0..8).map(|p| TopicPartition::new("orders", p)).collect();
    for tp in &partitions {
        engine.open_partition(tp, None).wait().unwrap();
    }
    let producers = 6u32;
    let per_producer = 200u32;
    let mut handles = Vec::new();
    for p in 0..producers {
        let engine = engine.clone();
        let partitions = partitions.clone();
        handles.push(std::thread::spawn(move || {
            let mut acked = Vec::new();
            for s in 0..per_producer {
                let tp = &partitions[((p + s) % partitions.len() as u32) as usize];
                let n = 1 + (s % 5);
                let info = engine.append(tp, batch(p, s, n), 3).wait().unwrap();
                assert_eq!(info.last_offset - info.first_offset + 1, n as i64);
                acked.push((tp.clone(), info.first_offset, info.last_offset, p, s));
            }
            acked
        }));
    }
    let mut acked: Vec<_> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    acked.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    // Per partition: offsets gap-free from 0; per producer, its batches in the order it sent them.
    for tp in &partitions {
        let mine: Vec<_> = acked.iter().filter(|a| &a.0 == tp).collect();
        let mut next = 0;
        for a in &mine {
            assert_eq!(a.1, next, "{tp}: gap or overlap at {next}");
            next = a.2 + 1;
        }
        for p in 0..producers {
            let seqs: Vec<u32> = mine.iter().filter(|a| a.3 == p).map(|a| a.4).collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{tp}: producer {p} reordered: {seqs:?}");
        }
        // Every acknowledged batch reads back, with the offsets it was acknowledged with.
        let mut offset = 0;
        while offset < next {
            let f = engine.fetch(tp, offset, 1 << 20, None).wait().unwrap();
            assert!(!f.records.is_empty(), "{tp}: nothing at {offset}");
            let mut pos = 0;
            while pos < f.records.len() {
                let h = BatchHeader::parse(&f.records[pos..]).unwrap();
                seglog::format::batch::validate_batch(&f.records[pos..pos + h.size_in_bytes() as usize], true).unwrap();
                assert_eq!(h.partition_leader_epoch, 3);
                assert!(acked.iter().any(|a| &a.0 == tp && a.1 == h.base_offset && a.2 == h.last_offset()));
                offset = h.next_offset();
                pos += h.size_in_bytes() as usize;
            }
        }
    }
    let stats = engine.stats().unwrap();
    let batches: u64 = stats.iter().map(|s| s.appended_batches).sum();
    assert_eq!(batches, (producers * per_producer) as u64);
    let engine = Arc::try_unwrap(engine).unwrap();
    engine.shutdown().unwrap();
    // Reopen: everything is still there, with a clean close behind it.
    let mut cfg = EngineConfig::new(dir.path());
    cfg.io_mode = mode;
    cfg.shards = Some(3); // a different shard count must not matter
    let engine = Engine::open(cfg).unwrap();
    let parts = engine.partitions().unwrap();
    assert_eq!(parts.len(), partitions.len());
    let total: i64 = parts.iter().map(|p| p.2).sum();
    let expected: i64 = acked.iter().map(|a| a.2 - a.1 + 1).sum();
    assert_eq!(total, expected);
    engine.shutdown().unwrap();
}

#[test]
fn concurrent_producers_sync_mode() {
    run(IoMode::Sync, Durability::None);
}

#[test]
fn concurrent_producers_every_batch_durability() {
    run(IoMode::Sync, Durability::EveryBatch);
}

#[test]
fn completion_is_a_future_without_a_runtime() {
    use std::future::Future;
    use std::task::{Context, Poll, Wake, Waker};
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig::new(dir.path());
    cfg.io_mode = IoMode::Sync;
    cfg.shards = Some(1);
    let engine = Engine::open(cfg).unwrap();
    let tp = TopicPartition::new("t", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    let mut fut = engine.append(&tp, batch(0, 0, 3), 0);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let info = loop {
        match std::pin::Pin::new(&mut fut).poll(&mut cx) {
            Poll::Ready(r) => break r.unwrap(),
            Poll::Pending => std::thread::park(),
        }
    };
    assert_eq!((info.first_offset, info.last_offset), (0, 2));
    engine.shutdown().unwrap();
}

#[test]
fn full_queue_is_a_typed_error_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig::new(dir.path());
    cfg.io_mode = IoMode::Sync;
    cfg.shards = Some(1);
    cfg.queue_capacity = 1;
    cfg.backpressure = seglog::Backpressure::Error;
    let engine = Engine::open(cfg).unwrap();
    let tp = TopicPartition::new("t", 0);
    engine.open_partition(&tp, None).wait().unwrap();
    let mut pending = Vec::new();
    let mut refused = 0;
    for s in 0..2000 {
        let c = engine.append(&tp, batch(0, s, 1), 0);
        pending.push(c);
    }
    let mut ok = 0i64;
    for c in pending {
        match c.wait() {
            Ok(_) => ok += 1,
            Err(seglog::Error::QueueFull { .. }) => refused += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(refused > 0, "a 1-slot queue under 2000 quick appends refuses some");
    // Nothing accepted was dropped: the log holds exactly the accepted batches.
    let parts = engine.partitions().unwrap();
    assert_eq!(parts[0].2, ok);
    engine.shutdown().unwrap();
}

/// Opens queued together load side by side (`open_threads_per_shard`), and each still gets its
/// own answer: existing partitions open with their data, a damaged one fails alone, a second
/// open of a partition (which ends the group: it opens after the first) is a no-op, and after a
/// restart,
/// where every existing partition opens at once, all of it is there.
#[test]
fn opens_queued_together_each_get_their_answer() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        let mut cfg = EngineConfig::new(dir.path());
        cfg.shards = Some(1);
        cfg.pin_threads = false;
        cfg.open_threads_per_shard = 4;
        cfg
    };
    let tps: Vec<TopicPartition> = (0..40).map(|p| TopicPartition::new("group", p)).collect();
    let e = Engine::open(config()).unwrap();
    let opens: Vec<_> = tps.iter().map(|tp| e.open_partition(tp, None)).collect();
    opens.into_iter().for_each(|o| drop(o.wait().unwrap()));
    for (p, tp) in tps.iter().enumerate() {
        e.append(tp, batch(p as u32, 0, 1 + p as u32 % 3), 0).wait().unwrap();
    }
    let closes: Vec<_> = tps.iter().map(|tp| e.close_partition(tp)).collect();
    closes.into_iter().for_each(|c| c.wait().unwrap());
    // A partition whose segment is a symbolic link: refused, whatever opens beside it.
    let bad = TopicPartition::new("group", 99);
    std::fs::create_dir(dir.path().join(bad.dir_name())).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", dir.path().join(bad.dir_name()).join("00000000000000000000.log"))
        .unwrap();
    let mut order: Vec<TopicPartition> = tps.clone();
    order.insert(20, bad.clone());
    order.insert(21, tps[3].clone());
    let pending: Vec<_> = order.iter().map(|tp| (tp.clone(), e.open_partition(tp, None))).collect();
    for (tp, o) in pending {
        let r = o.wait();
        if tp == bad {
            assert!(matches!(r, Err(seglog::Error::NotRegular { .. })), "{r:?}");
        } else {
            r.unwrap_or_else(|err| panic!("{tp:?}: {err}"));
        }
    }
    let ends = e.partitions().unwrap();
    assert_eq!(ends.len(), 40, "{ends:?}");
    assert!(ends.iter().all(|(tp, start, end)| (*start, *end) == (0, 1 + tp.partition as i64 % 3)), "{ends:?}");
    e.shutdown().unwrap();
    std::fs::remove_dir_all(dir.path().join(bad.dir_name())).unwrap();
    let e = Engine::open(config()).unwrap();
    for (p, tp) in tps.iter().enumerate() {
        let f = e.fetch(tp, 0, 1 << 20, None).wait().unwrap();
        let h = BatchHeader::parse(&f.records).unwrap();
        assert_eq!(h.last_offset_delta + 1, 1 + p as i32 % 3, "{tp:?}");
    }
    e.shutdown().unwrap();
}
