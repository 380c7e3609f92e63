use super::*;

fn arena(h: HugePages) -> IndexArena {
    IndexArena::new(ArenaConfig { huge_pages: h, packed_region_bytes: 2 << 20, ..ArenaConfig::default() })
}

#[test]
fn slots_are_disjoint_zeroed_and_reused() {
    let a = arena(HugePages::Off);
    let mut s1 = a.alloc_packed(100).unwrap();
    let mut s2 = a.alloc_packed(8).unwrap();
    assert_eq!(s1.capacity(), 128);
    assert_eq!(s2.capacity(), 64);
    assert!(s1.as_slice().iter().all(|&b| b == 0));
    s1.as_mut_slice().fill(1);
    s2.as_mut_slice().fill(2);
    assert!(s1.as_slice().iter().all(|&b| b == 1));
    let p1 = s1.as_slice().as_ptr();
    drop(s1);
    let s3 = a.alloc_packed(128).unwrap();
    assert_eq!(s3.as_slice().as_ptr(), p1, "best fit reuses the freed slot");
    assert_eq!(a.report().live_slices, 2);
    assert_eq!(a.report().packed_regions, [0, 0, 1]);
}

#[test]
fn big_slots_get_their_own_region_and_free_ranges_merge() {
    let a = arena(HugePages::Off);
    let big = a.alloc_packed(3 << 20).unwrap();
    assert_eq!(big.capacity(), 3 << 20);
    let slots: Vec<_> = (0..100).map(|_| a.alloc_packed(1000).unwrap()).collect();
    drop(slots);
    let whole = a.alloc_packed(2 << 20).unwrap();
    assert_eq!(whole.capacity(), 2 << 20, "freed neighbours merged back into one range");
    assert_eq!(a.report().packed_regions[2], 2);
}

#[test]
fn growth_slots_are_page_sized_and_virtual() {
    let a = IndexArena::new(ArenaConfig { growth_region_bytes: 64 << 20, ..ArenaConfig::default() });
    let mut s = a.alloc_growth(10 << 20).unwrap();
    assert_eq!(s.capacity(), 10 << 20);
    s.as_mut_slice()[..8].copy_from_slice(&[1; 8]);
    s.prefault(0..8);
    let m = a.memory();
    assert!(m.rss_bytes < 1 << 20, "only touched pages are resident: {m:?}");
    assert_eq!(a.report().growth_regions, 1);
}

#[test]
fn transparent_regions_report_their_backing() {
    let a = arena(HugePages::Transparent);
    let r = a.probe().unwrap();
    let expect = if thp_mode() == "never" { PageBacking::Normal } else { PageBacking::Transparent };
    assert_eq!(r.backing, Some(expect));
    let off = arena(HugePages::Off).probe().unwrap();
    assert_eq!(off.backing, Some(PageBacking::Normal));
    assert!(off.fallback.is_none());
}

#[test]
fn explicit_pages_when_reserved_else_normal_pages_and_a_reason() {
    let a = arena(HugePages::Explicit);
    let r = a.probe().unwrap();
    match r.backing {
        Some(PageBacking::Explicit) => {
            let mut s = a.alloc_packed(4096).unwrap();
            s.as_mut_slice().fill(7);
            assert_eq!(s.backing(), Some(PageBacking::Explicit));
        }
        Some(PageBacking::Normal) => assert!(r.fallback.is_some(), "{r:?}"),
        other => panic!("explicit never falls back to THP: {other:?}"),
    }
}

#[test]
fn locked_regions_report_their_state() {
    let a = IndexArena::new(ArenaConfig {
        huge_pages: HugePages::Off,
        packed_region_bytes: 2 << 20,
        lock_memory: true,
        ..ArenaConfig::default()
    });
    let mut s = a.alloc_packed(8192).unwrap();
    s.as_mut_slice().fill(1);
    match a.report().lock {
        LockState::Locked => assert!(a.memory().locked_bytes >= 8192, "{:?}", a.memory()),
        LockState::Failed(why) => assert!(why.contains("mlock2"), "{why}"),
        LockState::NotRequested => panic!("locking was requested"),
    }
    drop(s);
    // Freed locked memory is unlocked, dropped and locked again (the region stays one map).
    let s2 = a.alloc_packed(8192).unwrap();
    assert!(s2.as_slice().iter().all(|&b| b == 0 || b == 1));
}

#[test]
fn empty_slices_need_no_region() {
    let a = arena(HugePages::Off);
    let s = a.alloc_packed(0).unwrap();
    assert_eq!(s.capacity(), 0);
    assert!(s.as_slice().is_empty());
    s.prefault(0..10);
    assert_eq!(a.report().mapped_bytes, 0);
}

#[test]
fn counters_read() {
    assert!(map_count() > 0);
    assert!(open_fd_count() > 0);
    let before = thread_page_faults();
    let v = vec![1u8; 1 << 22];
    assert!(v.iter().map(|&b| b as u64).sum::<u64>() > 0);
    assert!(thread_page_faults().minor > before.minor);
}
