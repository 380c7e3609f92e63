//! Index files from arbitrary bytes: `OffsetIndex` / `TimeIndex::from_bytes`, then lookups,
//! truncation and Kafka's sanity check. Nothing may panic, and a lookup returns an entry of the
//! index or the `(base, 0)` / `(-1, base)` default.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seglog::index::{OffsetIndex, TimeIndex};

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let base = i64::from_be_bytes(data[..8].try_into().unwrap()) >> (data[8] % 64);
    let body = &data[9..];
    let mut oi = OffsetIndex::from_bytes(base, body.to_vec(), 4096, None);
    let _ = oi.sanity_check();
    let mut ti = TimeIndex::from_bytes(base, body.to_vec(), 4096, None);
    let _ = ti.sanity_check();
    for k in body.chunks(8).take(16) {
        let mut a = [0u8; 8];
        a[..k.len()].copy_from_slice(k);
        let target = i64::from_be_bytes(a);
        let p = oi.lookup(target);
        assert!((0..oi.entries()).any(|i| oi.entry(i) == p) || (p.offset == base && p.position == 0));
        let t = ti.lookup(target);
        assert!((0..ti.entries()).any(|i| ti.entry(i) == t) || (t.timestamp == -1 && t.offset == base));
        let _ = oi.last_entry();
        let _ = ti.last_entry();
    }
    if let Some(&b) = body.first() {
        let target = base.wrapping_add(b as i64);
        let _ = oi.truncate_to(target);
        let _ = ti.truncate_to(target);
        let _ = (oi.entries(), ti.entries(), oi.sanity_check(), ti.sanity_check());
    }
});
