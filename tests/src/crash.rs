//! Crash testing, shared by the writer program (`src/bin/crash_writer.rs`) and the crash tests
//! (`tests/power_cut.rs`, `tests/sigkill.rs`):
//!
//! - the seed-derived batch generator: the batch appended at offset `o` of partition `p` is a
//!   pure function of `(seed, p, o)` (record count, keys, values, timestamps), so a checker can
//!   regenerate every stored batch byte for byte and tell whether anything that was never
//!   appended appears;
//! - the writer's arguments and its acknowledgement lines (`ACK p first last crc size`, one per
//!   acknowledged append, flushed before the next append is acknowledged);
//! - [`WriterProcess`]: runs the writer, collecting its lines while it runs, and SIGKILLs it;
//! - [`verify_partition`]: reopens a partition directory with `Log::open`
//!   (`Recovery::FromRecoveryPoint(0)`) and checks the promise.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use seglog::format::batch::{self, BatchHeader};
use seglog::format::builder::BatchBuilder;
use seglog::log::{Log, LogOptions, Recovery};
use seglog::{Durability, IoMode, LogConfig};

/// The topic every crash test writes.
pub const TOPIC: &str = "crash";
/// The leader epoch the writer appends with (stamped into every stored batch).
pub const LEADER_EPOCH: i32 = 7;
/// Record timestamps are `TIMESTAMP_BASE + offset` (CreateTime; the default
/// `message.timestamp.before.max.ms` accepts any past time).
pub const TIMESTAMP_BASE: i64 = 1_600_000_000_000;

/// splitmix64: one step.
pub fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hash of several words.
pub fn mix(words: &[u64]) -> u64 {
    words.iter().fold(0x5EC1_0C0F_FEE0_0001, |h, &w| splitmix(h ^ w))
}

/// A small seeded generator for test schedules (not for the data, which is [`batch_for`]).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        splitmix(self.0)
    }
    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// A seed for a test run: `SEGLOG_CRASH_SEED` if set (decimal or 0x-hex), else from the clock.
pub fn base_seed() -> u64 {
    if let Ok(s) = std::env::var("SEGLOG_CRASH_SEED") {
        let s = s.trim();
        let v = match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => s.parse(),
        };
        return v.unwrap_or_else(|e| panic!("SEGLOG_CRASH_SEED={s}: {e}"));
    }
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    splitmix(t.as_nanos() as u64 ^ std::process::id() as u64)
}

/// Number of records of the batch at `base` (1..=6).
fn records_at(seed: u64, partition: i32, base: i64) -> i64 {
    1 + (mix(&[seed, partition as u64, base as u64, 1]) % 6) as i64
}

/// The key and value of the record at `offset`: the key names it, the value is seeded noise of
/// a seeded length (mostly small, sometimes several KiB, so batches straddle sectors).
pub fn record_at(seed: u64, partition: i32, offset: i64) -> (Vec<u8>, Vec<u8>) {
    let key = format!("{seed:016x}/{partition}/{offset}").into_bytes();
    let h = mix(&[seed, partition as u64, offset as u64, 2]);
    let len = match h % 8 {
        0 => (h >> 8) % 6000,
        1..=3 => (h >> 8) % 1500,
        _ => (h >> 8) % 200,
    } as usize;
    let mut value = Vec::with_capacity(len + 8);
    let mut r = Rng::new(h);
    while value.len() < len {
        value.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    value.truncate(len);
    (key, value)
}

/// The batch a producer sends for offset `base` (base offset 0, no leader epoch), as the writer
/// appends it.
pub fn batch_for(seed: u64, partition: i32, base: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for o in base..base + records_at(seed, partition, base) {
        let (k, v) = record_at(seed, partition, o);
        b.push(TIMESTAMP_BASE + o, Some(&k), Some(&v), &[]);
    }
    b.build().expect("generated batches are valid")
}

/// The batch as the log stores it when it was appended at `base`: [`batch_for`] with the base
/// offset and the leader epoch stamped (both outside the CRC).
pub fn stored_batch_for(seed: u64, partition: i32, base: i64) -> Vec<u8> {
    let mut b = batch_for(seed, partition, base);
    batch::set_base_offset(&mut b, base);
    batch::set_partition_leader_epoch(&mut b, LEADER_EPOCH);
    b
}

/// What the writer is told to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterArgs {
    pub data_dir: PathBuf,
    pub io_mode: IoMode,
    pub durability: Durability,
    pub seed: u64,
    pub partitions: i32,
    pub segment_bytes: u32,
    pub index_interval_bytes: u32,
    pub preallocate: bool,
    /// Appends in flight per partition.
    pub inflight: usize,
    /// Stop appending (and idle until killed) after this many bytes in one run.
    pub limit_bytes: u64,
    /// The engine's `checkpoint_interval_ms` (recovery-point and log-start checkpoints).
    pub checkpoint_ms: u64,
    /// The engine's `retention_check_interval_ms`.
    pub retention_check_ms: u64,
    /// `retention.bytes` (-1: none). `retention.ms` is always off: the generator's timestamps
    /// are years old.
    pub retention_bytes: i64,
    /// `file.delete.delay.ms`.
    pub delete_delay_ms: i64,
    /// Move each partition's high watermark to its acknowledged end every this many
    /// acknowledgements (0: never), as a broker does once followers caught up; retention never
    /// deletes past the high watermark.
    pub hw_every: u64,
    /// The engine's zero fill (`auto`: on under every-batch durability in direct mode).
    pub zero_fill: seglog::ZeroFill,
    /// The engine's sync method under every-batch durability.
    pub sync_method: seglog::SyncMethod,
}

impl WriterArgs {
    pub fn new(data_dir: impl Into<PathBuf>, seed: u64) -> WriterArgs {
        WriterArgs {
            data_dir: data_dir.into(),
            io_mode: IoMode::Direct,
            durability: Durability::EveryBatch,
            seed,
            partitions: 3,
            segment_bytes: 64 * 1024,
            index_interval_bytes: 1024,
            preallocate: false,
            inflight: 4,
            limit_bytes: 48 << 20,
            checkpoint_ms: 60_000,
            retention_check_ms: 300_000,
            retention_bytes: -1,
            delete_delay_ms: 60_000,
            hw_every: 0,
            zero_fill: seglog::ZeroFill::Auto,
            sync_method: seglog::SyncMethod::default(),
        }
    }

    /// The partition config the writer opens with (and the checker reopens with).
    pub fn log_config(&self) -> LogConfig {
        LogConfig {
            segment_bytes: self.segment_bytes,
            index_interval_bytes: self.index_interval_bytes,
            preallocate: self.preallocate,
            retention_ms: -1,
            retention_bytes: self.retention_bytes,
            file_delete_delay_ms: self.delete_delay_ms,
            ..LogConfig::default()
        }
    }

    pub fn to_args(&self) -> Vec<String> {
        vec![
            format!("dir={}", self.data_dir.display()),
            format!("io={}", self.io_mode),
            format!(
                "durability={}",
                match self.durability {
                    Durability::None => "none".to_string(),
                    Durability::EveryBatch => "every-batch".to_string(),
                    Durability::Interval { flush_ms, flush_messages } =>
                        format!("interval:{flush_ms}:{flush_messages}"),
                }
            ),
            format!("seed={}", self.seed),
            format!("partitions={}", self.partitions),
            format!("segment-bytes={}", self.segment_bytes),
            format!("index-interval-bytes={}", self.index_interval_bytes),
            format!("preallocate={}", self.preallocate),
            format!("inflight={}", self.inflight),
            format!("limit-bytes={}", self.limit_bytes),
            format!("checkpoint-ms={}", self.checkpoint_ms),
            format!("retention-check-ms={}", self.retention_check_ms),
            format!("retention-bytes={}", self.retention_bytes),
            format!("delete-delay-ms={}", self.delete_delay_ms),
            format!("hw-every={}", self.hw_every),
            format!("zero-fill={}", self.zero_fill),
            format!("sync-method={}", self.sync_method),
        ]
    }

    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<WriterArgs, String> {
        let mut w = WriterArgs::new("", 0);
        let mut dir = None;
        for a in args {
            let (k, v) = a.split_once('=').ok_or_else(|| format!("argument {a:?} is not key=value"))?;
            let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{k}={v}: {e}"));
            match k {
                "dir" => dir = Some(PathBuf::from(v)),
                "io" => w.io_mode = v.parse()?,
                "durability" => {
                    w.durability = match v.split(':').collect::<Vec<_>>()[..] {
                        ["none"] => Durability::None,
                        ["every-batch"] => Durability::EveryBatch,
                        ["interval", ms, msgs] => Durability::Interval {
                            flush_ms: ms.parse().map_err(|e| format!("durability={v}: {e}"))?,
                            flush_messages: msgs.parse().map_err(|e| format!("durability={v}: {e}"))?,
                        },
                        _ => return Err(format!("durability={v}: none, every-batch or interval:<ms>:<messages>")),
                    }
                }
                "seed" => w.seed = num(v)?,
                "partitions" => w.partitions = num(v)? as i32,
                "segment-bytes" => w.segment_bytes = num(v)? as u32,
                "index-interval-bytes" => w.index_interval_bytes = num(v)? as u32,
                "preallocate" => w.preallocate = v == "true",
                "inflight" => w.inflight = num(v)?.max(1) as usize,
                "limit-bytes" => w.limit_bytes = num(v)?,
                "checkpoint-ms" => w.checkpoint_ms = num(v)?,
                "retention-check-ms" => w.retention_check_ms = num(v)?,
                "retention-bytes" => w.retention_bytes = v.parse().map_err(|e| format!("{k}={v}: {e}"))?,
                "delete-delay-ms" => w.delete_delay_ms = num(v)? as i64,
                "hw-every" => w.hw_every = num(v)?,
                "zero-fill" => w.zero_fill = v.parse()?,
                "sync-method" => w.sync_method = v.parse().map_err(|e| format!("sync-method={v}: {e}"))?,
                _ => return Err(format!("unknown argument {k}")),
            }
        }
        w.data_dir = dir.ok_or("dir= is required")?;
        Ok(w)
    }
}

/// One acknowledged append, as the writer reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    pub partition: i32,
    pub first: i64,
    pub last: i64,
    pub crc: u32,
    pub size: u32,
}

impl Ack {
    pub fn line(&self) -> String {
        format!("ACK {} {} {} {} {}\n", self.partition, self.first, self.last, self.crc, self.size)
    }
    pub fn parse(line: &str) -> Option<Ack> {
        let mut it = line.strip_prefix("ACK ")?.split(' ');
        let a = Ack {
            partition: it.next()?.parse().ok()?,
            first: it.next()?.parse().ok()?,
            last: it.next()?.parse().ok()?,
            crc: it.next()?.parse().ok()?,
            size: it.next()?.parse().ok()?,
        };
        it.next().is_none().then_some(a)
    }
}

#[derive(Debug, Default)]
struct Seen {
    lines: Vec<String>,
    acks: usize,
    eof: bool,
}

/// A running writer whose stdout lines are collected as they come.
#[derive(Debug)]
pub struct WriterProcess {
    child: Child,
    seen: Arc<(Mutex<Seen>, Condvar)>,
    stdout_thread: Option<std::thread::JoinHandle<()>>,
    stderr_thread: Option<std::thread::JoinHandle<String>>,
}

/// What a writer run printed.
#[derive(Debug, Default)]
pub struct WriterOutput {
    pub acks: Vec<Ack>,
    /// `START ...` and `ERR ...` lines and anything else that is not an ack.
    pub other_lines: Vec<String>,
    pub stderr: String,
}

impl WriterOutput {
    /// The `START` line's `mode=` value: the I/O mode the engine really ran in.
    pub fn mode(&self) -> Option<String> {
        let start = self.other_lines.iter().find(|l| l.starts_with("START "))?;
        start.split(' ').find_map(|w| w.strip_prefix("mode=")).map(str::to_string)
    }
    /// The `START` line's `negative-control=` value.
    pub fn negative_control(&self) -> Option<bool> {
        let start = self.other_lines.iter().find(|l| l.starts_with("START "))?;
        start.split(' ').find_map(|w| w.strip_prefix("negative-control=")).map(|v| v == "true")
    }
}

impl WriterProcess {
    pub fn spawn(exe: &Path, args: &WriterArgs) -> WriterProcess {
        let mut child = Command::new(exe)
            .args(args.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", exe.display()));
        let seen = Arc::new((Mutex::new(Seen::default()), Condvar::new()));
        let out = child.stdout.take().expect("piped stdout");
        let s = seen.clone();
        let stdout_thread = std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                // A line cut by the kill has no newline: it was not completely reported.
                if !line.ends_with('\n') {
                    break;
                }
                let (m, cv) = &*s;
                let mut g = m.lock().expect("writer lines");
                if line.starts_with("ACK ") {
                    g.acks += 1;
                }
                g.lines.push(line.trim_end().to_string());
                cv.notify_all();
            }
            let (m, cv) = &*s;
            m.lock().expect("writer lines").eof = true;
            cv.notify_all();
        });
        let mut err = child.stderr.take().expect("piped stderr");
        let stderr_thread = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        WriterProcess { child, seen, stdout_thread: Some(stdout_thread), stderr_thread: Some(stderr_thread) }
    }

    /// Waits until the writer has acknowledged at least `n` appends (true), or exited or
    /// `timeout` passed (false).
    pub fn wait_for_acks(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.seen;
        let mut g = m.lock().expect("writer lines");
        loop {
            if g.acks >= n {
                return true;
            }
            let now = Instant::now();
            if g.eof || now >= deadline {
                return false;
            }
            g = cv.wait_timeout(g, deadline - now).expect("writer lines").0;
        }
    }

    /// Waits for the first line that starts with `START` or `ERR` (the writer opened its engine,
    /// or failed to) and returns it; `None` if the writer exited or `timeout` passed first.
    pub fn wait_for_start(&self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.seen;
        let mut g = m.lock().expect("writer lines");
        loop {
            if let Some(l) = g.lines.iter().find(|l| l.starts_with("START") || l.starts_with("ERR")) {
                return Some(l.clone());
            }
            let now = Instant::now();
            if g.eof || now >= deadline {
                return None;
            }
            g = cv.wait_timeout(g, deadline - now).expect("writer lines").0;
        }
    }

    /// The writer's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Acknowledgements seen so far.
    pub fn acks_so_far(&self) -> usize {
        self.seen.0.lock().expect("writer lines").acks
    }

    /// SIGKILLs the writer (if it still runs), reaps it and returns everything it printed.
    pub fn kill(mut self) -> WriterOutput {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.collect()
    }

    fn collect(&mut self) -> WriterOutput {
        if let Some(t) = self.stdout_thread.take() {
            let _ = t.join();
        }
        let stderr = self.stderr_thread.take().and_then(|t| t.join().ok()).unwrap_or_default();
        let g = self.seen.0.lock().expect("writer lines");
        let mut out = WriterOutput { stderr, ..Default::default() };
        for l in &g.lines {
            match Ack::parse(l) {
                Some(a) => out.acks.push(a),
                None => out.other_lines.push(l.clone()),
            }
        }
        out
    }
}

impl Drop for WriterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What reopening one partition found.
#[derive(Debug, Default)]
pub struct Verdict {
    pub log_end_offset: i64,
    pub log_start_offset: i64,
    /// Acknowledged batches below the log start offset (deleted by retention).
    pub deleted_acks: usize,
    /// Base offset of the last (active) segment after recovery.
    pub active_base_offset: i64,
    pub batches: usize,
    pub segments: usize,
    pub index_entries: usize,
    /// Bytes recovery cut from torn tails.
    pub truncated_bytes: u64,
    /// Segments recovery deleted because they followed a truncation.
    pub segments_removed: usize,
    /// Promised batches (acknowledged before the crash) that are missing (or differ).
    pub lost_acks: usize,
    /// Batches acknowledged while the crash was under way (after `FS_IOC_SHUTDOWN` began) that
    /// are missing: no promise (a real power cut leaves nobody to see such an acknowledgement),
    /// counted for the report.
    pub lost_unpromised: usize,
    /// Every broken promise, in words.
    pub violations: Vec<String>,
}

/// Reopens `<data_dir>/crash-<partition>` with `Log::open` (`Recovery::FromRecoveryPoint(0)`,
/// the writer's config) and checks the promise:
/// - every batch of `acks` (acknowledged before the crash) is there, at its offset, with its
///   size and CRC (`unpromised`: acknowledged during the crash, only counted when missing);
/// - batches follow each other from the log start offset (0 unless retention deleted segments;
///   acknowledged batches below it count as deleted) with no gap, overlap or duplicate,
///   segments start where the previous one ended, and nothing lies past the last batch;
/// - every stored batch is valid (CRC) and is byte for byte the batch the generator gives for its
///   offset: nothing that was never appended appears;
/// - every offset index entry points at the start of a batch whose last offset is the entry's
///   key, entries increase, and `translate_offset` and `Log::read` agree with a linear scan;
/// - the indexes pass their sanity checks.
pub fn verify_partition(args: &WriterArgs, partition: i32, acks: &[Ack], unpromised: &[Ack]) -> Verdict {
    let dir = args.data_dir.join(format!("{TOPIC}-{partition}"));
    let mut v = Verdict::default();
    let opts =
        LogOptions { config: args.log_config(), recovery: Recovery::FromRecoveryPoint(0), ..crate::log_options() };
    let (log, report) = match Log::open_with_report(&dir, opts) {
        Ok(x) => x,
        Err(e) => {
            v.violations.push(format!("p{partition}: Log::open failed: {e}"));
            v.lost_acks = acks.iter().filter(|a| a.partition == partition).count();
            return v;
        }
    };
    v.truncated_bytes = report.truncations.iter().map(|t| t.2).sum();
    v.segments_removed = report.segments_removed.len();
    v.log_end_offset = log.log_end_offset();
    v.active_base_offset = log.active_segment().base_offset();
    let seed = args.seed;
    let bad = |v: &mut Verdict, s: String| {
        if v.violations.len() < 20 {
            v.violations.push(format!("p{partition}: {s}"));
        }
    };
    let log_start = log.log_start_offset();
    v.log_start_offset = log_start;
    if log_start != 0 && args.retention_bytes < 0 {
        bad(&mut v, format!("log start offset {log_start} but nothing was deleted (no retention)"));
    }
    let first_base = log.segments().next().map(|s| s.base_offset()).unwrap_or(0);
    if first_base != log_start {
        bad(&mut v, format!("log start offset {log_start} but the first segment starts at {first_base}"));
    }

    // Linear scan of every segment.
    struct Scanned {
        segment: i64,
        position: u32,
        header: BatchHeader,
    }
    let mut all: Vec<Scanned> = Vec::new();
    let mut all_bytes: Vec<u8> = Vec::new();
    let mut by_base: HashMap<i64, (i64, u32, u32)> = HashMap::new();
    let mut next = log_start;
    let mut buf = Vec::new();
    for seg in log.segments() {
        v.segments += 1;
        if seg.base_offset() != next {
            bad(
                &mut v,
                format!(
                    "segment {} starts at {} but the previous batches end at {next}",
                    seg.base_offset(),
                    seg.base_offset()
                ),
            );
        }
        let batches = match seg.batches() {
            Ok(b) => b,
            Err(e) => {
                bad(&mut v, format!("segment {}: scan failed: {e}", seg.base_offset()));
                continue;
            }
        };
        let mut end = 0u32;
        let scanner = seg.scanner(0);
        let seg_first = all.len();
        for b in &batches {
            let h = b.header;
            if b.position != end {
                bad(
                    &mut v,
                    format!(
                        "segment {}: batch at {} but the previous one ends at {end}",
                        seg.base_offset(),
                        b.position
                    ),
                );
            }
            end = b.end();
            if h.base_offset != next {
                bad(
                    &mut v,
                    format!(
                        "segment {} position {}: batch {}..={} but the previous batch ends at {next} (gap, overlap or duplicate)",
                        seg.base_offset(),
                        b.position,
                        h.base_offset,
                        h.last_offset()
                    ),
                );
            }
            next = next.max(h.last_offset() + 1);
            if let Err(e) = scanner.read_batch(b, &mut buf) {
                bad(&mut v, format!("segment {} position {}: read failed: {e}", seg.base_offset(), b.position));
                continue;
            }
            if let Err(e) = batch::validate_batch(&buf, true) {
                bad(
                    &mut v,
                    format!("segment {} position {}: invalid stored batch: {e}", seg.base_offset(), b.position),
                );
            }
            let want = stored_batch_for(seed, partition, h.base_offset);
            if buf != want {
                let at = buf.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(buf.len().min(want.len()));
                bad(
                    &mut v,
                    format!(
                        "segment {} position {}: batch {}..={} ({} bytes) is not what was appended at {} \
                         ({} bytes; first difference at byte {at}): something never appended appears",
                        seg.base_offset(),
                        b.position,
                        h.base_offset,
                        h.last_offset(),
                        buf.len(),
                        h.base_offset,
                        want.len()
                    ),
                );
            }
            if by_base.insert(h.base_offset, (h.last_offset(), h.crc, buf.len() as u32)).is_some() {
                bad(&mut v, format!("batch {} appears twice", h.base_offset));
            }
            all_bytes.extend_from_slice(&buf);
            all.push(Scanned { segment: seg.base_offset(), position: b.position, header: h });
        }
        if end != seg.size() {
            bad(
                &mut v,
                format!(
                    "segment {}: {} bytes after the last batch (ends at {end})",
                    seg.base_offset(),
                    seg.size() - end
                ),
            );
        }
        if let Err(e) = seg.sanity_check() {
            bad(&mut v, format!("segment {}: index sanity check: {e}", seg.base_offset()));
        }

        // Offset index: each entry at a batch start, keyed by that batch's last offset.
        let seg_batches = &all[seg_first..];
        let idx = seg.offset_index();
        v.index_entries += idx.entries();
        let mut prev: Option<(i64, u32)> = None;
        for i in 0..idx.entries() {
            let e = idx.entry(i);
            match seg_batches.iter().find(|s| s.position == e.position) {
                Some(s) if s.header.last_offset() == e.offset => {}
                Some(s) => bad(
                    &mut v,
                    format!(
                        "segment {} index entry {i} ({}, {}): the batch there ends at {}",
                        seg.base_offset(),
                        e.offset,
                        e.position,
                        s.header.last_offset()
                    ),
                ),
                None => bad(
                    &mut v,
                    format!(
                        "segment {} index entry {i} ({}, {}) is not at a batch start",
                        seg.base_offset(),
                        e.offset,
                        e.position
                    ),
                ),
            }
            if let Some((po, pp)) = prev {
                if e.offset <= po || e.position <= pp {
                    bad(
                        &mut v,
                        format!("segment {} index entries {} and {i} do not increase", seg.base_offset(), i - 1),
                    );
                }
            }
            prev = Some((e.offset, e.position));
        }
        // Time index: record timestamps are TIMESTAMP_BASE + offset, so each entry is
        // (TIMESTAMP_BASE + k, k) with k the last offset of one of this segment's batches, and
        // entries increase.
        let tidx = seg.time_index();
        let mut prev_ts = i64::MIN;
        for i in 0..tidx.entries() {
            let e = tidx.entry(i);
            let at_batch_end = seg_batches.iter().any(|s| s.header.last_offset() == e.offset);
            if e.timestamp != TIMESTAMP_BASE + e.offset || !at_batch_end || e.timestamp <= prev_ts {
                bad(
                    &mut v,
                    format!(
                        "segment {} time index entry {i} ({}, {}) does not name a batch's last record and its \
                         timestamp, in increasing order",
                        seg.base_offset(),
                        e.timestamp,
                        e.offset
                    ),
                );
            }
            prev_ts = e.timestamp;
        }
        // Lookups: the first and last offset of every batch, and one inside it.
        for s in seg_batches {
            let (b, l) = (s.header.base_offset, s.header.last_offset());
            for o in [b, (b + l) / 2, l] {
                match seg.translate_offset(o, 0) {
                    Ok(Some(p)) if p.position == s.position && p.offset == l => {}
                    other => bad(
                        &mut v,
                        format!(
                            "segment {}: translate_offset({o}) = {other:?}, the scan says batch {b}..={l} at {}",
                            s.segment, s.position
                        ),
                    ),
                }
            }
        }
    }
    v.batches = all.len();
    // Time lookups: the first record at or after TIMESTAMP_BASE + o is offset o (at the first
    // offset of up to 256 batches spread over the log, and once past the end).
    for s in all.iter().step_by(all.len().div_ceil(256).max(1)) {
        let o = s.header.base_offset;
        match log.offset_for_time(seglog::log::ListOffset::Timestamp(TIMESTAMP_BASE + o)) {
            Ok(Some(t)) if t.offset == o && t.timestamp == TIMESTAMP_BASE + o => {}
            other => bad(&mut v, format!("time lookup of {} (offset {o}): {other:?}", TIMESTAMP_BASE + o)),
        }
    }
    match log.offset_for_time(seglog::log::ListOffset::Timestamp(TIMESTAMP_BASE + log.log_end_offset())) {
        Ok(None) => {}
        other => bad(&mut v, format!("time lookup past the log end {}: {other:?}", log.log_end_offset())),
    }
    if next != log.log_end_offset() {
        bad(&mut v, format!("log end offset {} but the batches end at {next}", log.log_end_offset()));
    }

    // The fetch path returns exactly the scanned bytes.
    let mut fetched = Vec::new();
    let mut o = log_start;
    while o < log.log_end_offset() {
        match log.read(o, 48 * 1024, None, true) {
            Ok(f) if !f.records.is_empty() => {
                let mut pos = 0;
                while pos < f.records.len() {
                    match BatchHeader::parse(&f.records[pos..]) {
                        Ok(h) => {
                            o = h.next_offset();
                            pos += h.size_in_bytes() as usize;
                        }
                        Err(e) => {
                            bad(&mut v, format!("fetch at {o}: unparsable batch: {e}"));
                            o = log.log_end_offset();
                            break;
                        }
                    }
                }
                fetched.extend_from_slice(&f.records);
            }
            other => {
                bad(&mut v, format!("fetch at {o} below the log end {}: {other:?}", log.log_end_offset()));
                break;
            }
        }
    }
    if fetched != all_bytes {
        bad(&mut v, format!("fetching the whole log gives {} bytes, the scan {}", fetched.len(), all_bytes.len()));
    }

    // The promise: every acknowledged batch, at its offset, with its size and CRC.
    for a in acks.iter().filter(|a| a.partition == partition) {
        if a.first < log_start {
            // Below the log start: deleted by retention (never past the high watermark, which
            // the writer only moves to what it acknowledged).
            v.deleted_acks += 1;
            continue;
        }
        match by_base.get(&a.first) {
            Some(&(last, crc, size)) if last == a.last && crc == a.crc && size == a.size => {}
            found => {
                v.lost_acks += 1;
                bad(
                    &mut v,
                    format!(
                        "acknowledged batch {}..={} (crc {:08x}, {} bytes) {}; log end offset {}",
                        a.first,
                        a.last,
                        a.crc,
                        a.size,
                        match found {
                            None => "is missing".to_string(),
                            Some((l, c, s)) => format!("differs: found ..={l} crc {c:08x} {s} bytes"),
                        },
                        log.log_end_offset()
                    ),
                );
            }
        }
    }
    v.lost_unpromised = unpromised
        .iter()
        .filter(|a| a.partition == partition)
        .filter(|a| by_base.get(&a.first) != Some(&(a.last, a.crc, a.size)))
        .count();
    drop(log);
    v
}

/// Copies a directory tree (regular files and directories) from `src` to `dst`.
pub fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for ent in std::fs::read_dir(src)? {
        let ent = ent?;
        let to = dst.join(ent.file_name());
        if ent.file_type()?.is_dir() {
            copy_tree(&ent.path(), &to)?;
        } else {
            std::fs::copy(ent.path(), &to)?;
        }
    }
    Ok(())
}

/// What a restarted engine saw: `(partition, log start, log end)` per open partition, and every
/// broken promise.
#[derive(Debug, Default)]
pub struct EngineVerdict {
    pub partitions: Vec<(i32, i64, i64)>,
    /// Partitions the engine recovered only from a checkpointed recovery point above 0.
    pub from_checkpoint: usize,
    pub violations: Vec<String>,
}

/// Opens `data_dir` with the [`Engine`](seglog::Engine), as a restarted broker would: recovery
/// points and log start offsets come from the engine's own checkpoints, and only segments from
/// the recovery point on are revalidated. Then fetches every partition whole through the engine:
/// offsets must run from the log start to the log end with no gap or duplicate, every batch must
/// be the one the seed says was appended at its offset, and every batch of `acks` at or above the
/// log start must be there. Closes the engine cleanly. Retention is off while it runs.
pub fn verify_engine_reopen(args: &WriterArgs, data_dir: &Path, acks: &[Ack]) -> EngineVerdict {
    use seglog::{Engine, EngineConfig};

    let mut v = EngineVerdict::default();
    let mut cfg = EngineConfig::new(data_dir);
    cfg.io_mode = args.io_mode;
    cfg.shards = Some(2);
    cfg.pin_threads = false;
    cfg.durability = Durability::None;
    cfg.log_config = LogConfig { retention_bytes: -1, ..args.log_config() };
    cfg.checkpoint_interval_ms = 3_600_000;
    cfg.retention_check_interval_ms = 3_600_000;
    let engine = match Engine::open(cfg) {
        Ok(e) => e,
        Err(e) => {
            v.violations.push(format!("Engine::open after the crash failed: {e}"));
            return v;
        }
    };
    v.from_checkpoint = engine.load_reports().iter().filter(|(_, r)| r.segments_recovered < r.segments).count();
    let parts = match engine.partitions() {
        Ok(p) => p,
        Err(e) => {
            v.violations.push(format!("Engine::partitions: {e}"));
            return v;
        }
    };
    for (tp, start, end) in parts {
        let p = tp.partition;
        v.partitions.push((p, start, end));
        let mut bases: HashMap<i64, (i64, u32, u32)> = HashMap::new();
        let mut o = start;
        'fetch: while o < end {
            let f = match engine.fetch(&tp, o, 64 * 1024, None).wait() {
                Ok(f) if !f.records.is_empty() => f,
                other => {
                    v.violations.push(format!("engine p{p}: fetch at {o} below the log end {end}: {other:?}"));
                    break;
                }
            };
            let mut pos = 0;
            while pos < f.records.len() {
                let rest = &f.records[pos..];
                let size =
                    BatchHeader::parse(rest).map_or(rest.len(), |h| (h.size_in_bytes() as usize).min(rest.len()));
                let bytes = &rest[..size];
                let h = match batch::validate_batch(bytes, true) {
                    Ok(h) => h,
                    Err(e) => {
                        v.violations.push(format!("engine p{p}: invalid batch fetched at offset {o}: {e}"));
                        break 'fetch;
                    }
                };
                if h.base_offset != o {
                    v.violations.push(format!(
                        "engine p{p}: batch {}..={} where offset {o} was expected (gap, overlap or duplicate)",
                        h.base_offset,
                        h.last_offset()
                    ));
                }
                if bytes != stored_batch_for(args.seed, p, h.base_offset).as_slice() {
                    v.violations.push(format!(
                        "engine p{p}: batch {}..={} is not what was appended at {}: something never appended appears",
                        h.base_offset,
                        h.last_offset(),
                        h.base_offset
                    ));
                }
                bases.insert(h.base_offset, (h.last_offset(), h.crc, bytes.len() as u32));
                o = h.next_offset();
                pos += bytes.len();
                if v.violations.len() > 20 {
                    break 'fetch;
                }
            }
        }
        for a in acks.iter().filter(|a| a.partition == p && a.first >= start) {
            if bases.get(&a.first) != Some(&(a.last, a.crc, a.size)) {
                v.violations.push(format!(
                    "engine p{p}: acknowledged batch {}..={} is missing after the restart (log {start}..{end})",
                    a.first, a.last
                ));
            }
        }
    }
    if let Err(e) = engine.shutdown() {
        v.violations.push(format!("engine shutdown after the check: {e}"));
    }
    v
}

/// The writer program (`src/bin/crash_writer.rs`, and `crash_writer_nc` with the engine's
/// `negative-control` feature). Never returns: it appends until killed.
pub fn writer_main() -> ! {
    use std::collections::VecDeque;
    use std::io::Write;

    use seglog::{Engine, EngineConfig, TopicPartition};

    fn say(line: &str) {
        let mut out = std::io::stdout().lock();
        // One write per line (a pipe write under PIPE_BUF is atomic), flushed at once.
        let _ = out.write_all(line.as_bytes());
        let _ = out.flush();
    }
    fn idle() -> ! {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }

    let args = match WriterArgs::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("crash_writer: {e}");
            std::process::exit(2);
        }
    };
    let mut cfg = EngineConfig::new(&args.data_dir);
    cfg.io_mode = args.io_mode;
    cfg.durability = args.durability;
    cfg.shards = Some(2);
    cfg.pin_threads = false;
    cfg.log_config = args.log_config();
    cfg.checkpoint_interval_ms = args.checkpoint_ms;
    cfg.zero_fill = args.zero_fill;
    cfg.sync_method = args.sync_method;
    cfg.retention_check_interval_ms = args.retention_check_ms;
    let engine = match Engine::open(cfg) {
        Ok(e) => e,
        Err(e) => {
            say(&format!("ERR -1 open: {e}\n"));
            idle();
        }
    };
    let tps: Vec<TopicPartition> = (0..args.partitions).map(|p| TopicPartition::new(TOPIC, p)).collect();
    for tp in &tps {
        if let Err(e) = engine.open_partition(tp, None).wait() {
            say(&format!("ERR {} open: {e}\n", tp.partition));
            idle();
        }
    }
    let leo: HashMap<i32, i64> = match engine.partitions() {
        Ok(v) => v.into_iter().map(|(tp, _, end)| (tp.partition, end)).collect(),
        Err(e) => {
            say(&format!("ERR -1 partitions: {e}\n"));
            idle();
        }
    };
    let leos: Vec<String> = tps.iter().map(|tp| format!("{}:{}", tp.partition, leo[&tp.partition])).collect();
    say(&format!(
        "START mode={} negative-control={} leo={}\n",
        engine.io_mode(),
        cfg!(feature = "negative-control"),
        leos.join(",")
    ));
    let per_partition_limit = args.limit_bytes / args.partitions.max(1) as u64;
    std::thread::scope(|s| {
        for tp in &tps {
            let engine = &engine;
            let args = &args;
            let mut next = leo[&tp.partition];
            s.spawn(move || {
                let p = tp.partition;
                let mut written = 0u64;
                let mut acked = 0u64;
                let mut inflight: VecDeque<(seglog::Completion<seglog::log::AppendInfo>, Ack)> = VecDeque::new();
                loop {
                    while inflight.len() < args.inflight && written < per_partition_limit {
                        let b = batch_for(args.seed, p, next);
                        let h = BatchHeader::parse(&b).expect("generated batch");
                        let ack = Ack {
                            partition: p,
                            first: next,
                            last: next + h.last_offset_delta as i64,
                            crc: h.crc,
                            size: b.len() as u32,
                        };
                        next = ack.last + 1;
                        written += b.len() as u64;
                        inflight.push_back((engine.append(tp, b, LEADER_EPOCH), ack));
                    }
                    let Some((c, want)) = inflight.pop_front() else {
                        say(&format!("IDLE {p} limit of {per_partition_limit} bytes reached\n"));
                        return;
                    };
                    match c.wait() {
                        Ok(info) if info.first_offset == want.first && info.last_offset == want.last => {
                            say(&want.line());
                            acked += 1;
                            if args.hw_every > 0 && acked.is_multiple_of(args.hw_every) {
                                let hw = want.last + 1;
                                let r = engine
                                    .with_log(tp, move |log| {
                                        log.set_high_watermark(hw);
                                        Ok(())
                                    })
                                    .wait();
                                if let Err(e) = r {
                                    say(&format!("ERR {p} high watermark {hw}: {e}\n"));
                                    return;
                                }
                            }
                        }
                        Ok(info) => {
                            say(&format!(
                                "ERR {p} append of {}..={} was given offsets {}..={}\n",
                                want.first, want.last, info.first_offset, info.last_offset
                            ));
                            return;
                        }
                        Err(e) => {
                            say(&format!("ERR {p} append {}..={}: {e}\n", want.first, want.last));
                            return;
                        }
                    }
                }
            });
        }
    });
    // Never close the engine cleanly: the harness kills this process.
    idle();
}
