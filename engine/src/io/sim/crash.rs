//! Power cuts: the state a crash can leave ([`SimStorage::crash_with`]).

use super::*;

impl SimStorage {
    /// The state a power cut now could leave: a new, independent storage (no faults, not halted,
    /// counters at zero) in which everything is durable.
    pub fn crash_with(&self, rng: &mut SimRng, cfg: &CrashConfig) -> SimStorage {
        let in_flight = self.flights().writes_not_run();
        let s = self.lock();
        let mut out = SimState { direct_alignment: s.direct_alignment, now_ms: s.now_ms, ..SimState::default() };
        let mut inode_map: HashMap<usize, usize> = HashMap::new();
        let mut todo = vec![PathBuf::from("/")];
        while let Some(dir) = todo.pop() {
            let Some(d) = s.dirs.get(&dir) else { continue };
            let mut entries = d.durable.clone();
            let n = if cfg.unsynced_dir_ops { rng.prefix_len(d.pending.len()) } else { 0 };
            for op in &d.pending[..n] {
                op.apply(&mut entries);
            }
            let mut kept = BTreeMap::new();
            for (name, e) in entries {
                match e {
                    Entry::Dir => {
                        let child = dir.join(&name);
                        if s.dirs.contains_key(&child) {
                            todo.push(child);
                            kept.insert(name, Entry::Dir);
                        }
                    }
                    Entry::File(ino) => {
                        let new = match inode_map.get(&ino) {
                            Some(&n) => n,
                            None => {
                                let flying = in_flight.iter().filter(|w| w.ino == ino);
                                let content = crash_content(&s.inodes[ino], flying, rng, cfg);
                                out.inodes.push(Inode {
                                    volatile: content.clone(),
                                    durable: content,
                                    pending: Vec::new(),
                                    mtime_ms: s.inodes[ino].mtime_ms,
                                });
                                inode_map.insert(ino, out.inodes.len() - 1);
                                out.inodes.len() - 1
                            }
                        };
                        kept.insert(name, Entry::File(new));
                    }
                }
            }
            out.dirs.insert(dir, DirState { volatile: kept.clone(), durable: kept, pending: Vec::new() });
        }
        SimStorage::from_state(out)
    }
}

/// Lands some sectors of a write of `bytes` at `pos` in `c` (512- or 4096-byte sectors; a
/// prefix of them or a random subset).
fn land_torn(c: &mut Content, pos: u64, bytes: &[u8], rng: &mut SimRng) {
    let sector: u64 = if rng.below(2) == 0 { 512 } else { 4096 };
    // Sectors of the write, split at file offsets that are multiples of `sector`.
    let end = pos + bytes.len() as u64;
    let mut cuts = vec![pos];
    let mut at = (pos / sector + 1) * sector;
    while at < end {
        cuts.push(at);
        at += sector;
    }
    cuts.push(end);
    let sectors = cuts.len() - 1;
    if sectors >= 2 {
        let subset = rng.below(2) == 0;
        let prefix = 1 + rng.below(sectors as u64 - 1) as usize;
        for k in 0..sectors {
            let lands = if subset { rng.below(2) == 0 } else { k < prefix };
            if lands {
                let (a, b) = (cuts[k], cuts[k + 1]);
                c.write(a, &bytes[(a - pos) as usize..(b - pos) as usize]);
            }
        }
    }
}

/// The content one file is left with by a crash: its durable content, a prefix of its unsynced
/// operations (the first one left out possibly torn), then each of its writes still in flight
/// whole, torn or not at all (the device may finish them in any order).
fn crash_content<'a>(
    i: &Inode,
    in_flight: impl Iterator<Item = &'a flights::WriteInFlight>,
    rng: &mut SimRng,
    cfg: &CrashConfig,
) -> Content {
    let mut c = i.durable.clone();
    if !cfg.unsynced_data {
        return c;
    }
    if !i.pending.is_empty() {
        let n = rng.prefix_len(i.pending.len());
        for op in &i.pending[..n] {
            op.apply(&mut c);
        }
        if let Some(DataOp::Write { pos, bytes }) = i.pending.get(n) {
            if rng.percent(cfg.torn_write_percent) {
                land_torn(&mut c, *pos, bytes, rng);
            }
        }
    }
    for w in in_flight {
        match rng.below(3) {
            0 => {}
            1 => c.write(w.pos, &w.bytes),
            _ => land_torn(&mut c, w.pos, &w.bytes, rng),
        }
    }
    if c.len > i.durable.len && rng.percent(cfg.zero_tail_percent) {
        let base = i.durable.len;
        let from = if rng.below(2) == 0 {
            base
        } else {
            let block: u64 = if rng.below(2) == 0 { 512 } else { 4096 };
            let p = base + rng.below(c.len - base);
            (p / block * block).max(base)
        };
        c.zero_from(from);
    }
    c
}
