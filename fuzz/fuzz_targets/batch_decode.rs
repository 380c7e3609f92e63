//! Batch decoding on arbitrary bytes: header parsing, whole-batch validation, splitting a buffer
//! into batches, and record iteration with decompression. Nothing may panic, and decoded values
//! must stay within the input (a batch's size never exceeds the bytes it came from).
#![no_main]

use libfuzzer_sys::fuzz_target;
use seglog::format::batch::{split_batches, validate_batch, BatchHeader, EntryFrame};
use seglog::format::record::{batch_records, records_section};

fuzz_target!(|data: &[u8]| {
    let _ = EntryFrame::parse(data);
    let _ = EntryFrame::is_zeroed(data);
    if let Ok(h) = BatchHeader::parse(data) {
        let _ = (h.last_offset(), h.next_offset(), h.last_sequence(), h.compression(), h.size_in_bytes());
    }
    let _ = validate_batch(data, true);
    if let Ok(h) = validate_batch(data, false) {
        assert_eq!(h.size_in_bytes(), data.len() as i64);
    }
    if let Ok(batches) = split_batches(data, false) {
        let mut end = 0usize;
        for (pos, h) in &batches {
            assert_eq!(*pos, end);
            end += h.size_in_bytes() as usize;
        }
        assert_eq!(end, data.len());
    }
    // Record iteration (and decompression, bounded) on the bytes as one batch, whether or not the
    // CRC matches: recovery validates first, but readers must survive anything.
    let mut scratch = Vec::new();
    if let Ok(iter) = batch_records(data, &mut scratch) {
        for (i, r) in iter.enumerate() {
            if r.is_err() || i > 100_000 {
                break;
            }
        }
    }
    let mut scratch = Vec::new();
    let _ = records_section(data, &mut scratch, 1 << 20);
});
