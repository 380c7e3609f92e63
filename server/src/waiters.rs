//! Fetches waiting for `min_bytes`, watched by partition (as Kafka's fetch purgatory keys its
//! delayed fetches): an acknowledged append, or a transaction marker that moves the last stable
//! offset, wakes only the fetches that read its partition, so a busy producer does not make
//! every idle consumer's long poll read its partitions again.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use seglog::TopicPartition;
use tokio::sync::Notify;

/// Each partition's watching fetches, by watch id.
type ByPartition = HashMap<TopicPartition, HashMap<u64, Arc<Notify>>>;

#[derive(Default)]
pub(crate) struct Waiters {
    /// Fetches watching now: an append checks it before taking the lock, so with no fetch
    /// waiting (a pure produce load) a wake costs one atomic load.
    watching: AtomicUsize,
    next_id: AtomicU64,
    by_partition: Mutex<ByPartition>,
}

/// One fetch's registration; dropping it (when the fetch answers: at the latest its deadline,
/// also when its client went away meanwhile) removes it from every partition it watched.
pub(crate) struct Watch<'a> {
    waiters: &'a Waiters,
    id: u64,
    partitions: Vec<TopicPartition>,
    notify: Arc<Notify>,
}

impl Waiters {
    /// Watches `partitions` for appends. Call it before reading them: a wake between the read
    /// and the wait is kept (`Notify` holds a permit), so none is missed.
    /// A partition listed twice is watched once.
    pub(crate) fn watch(&self, partitions: impl IntoIterator<Item = TopicPartition>) -> Watch<'_> {
        let partitions: Vec<TopicPartition> = partitions.into_iter().collect::<HashSet<_>>().into_iter().collect();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        let mut map = self.lock();
        for tp in &partitions {
            if let Some(watches) = map.get_mut(tp) {
                watches.insert(id, notify.clone());
            } else {
                map.insert(tp.clone(), HashMap::from([(id, notify.clone())]));
            }
        }
        self.watching.fetch_add(1, Ordering::SeqCst);
        drop(map);
        Watch { waiters: self, id, partitions, notify }
    }

    /// Wakes the fetches watching `tp`.
    pub(crate) fn wake(&self, tp: &TopicPartition) {
        if self.watching.load(Ordering::SeqCst) == 0 {
            return;
        }
        if let Some(watches) = self.lock().get(tp) {
            for n in watches.values() {
                n.notify_one();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ByPartition> {
        // A panic while holding it cannot leave the map inconsistent (every change is one
        // push or retain), so a poisoned lock is taken as it is.
        self.by_partition.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn registered(&self) -> usize {
        self.lock().values().map(HashMap::len).sum()
    }
}

impl Watch<'_> {
    /// Waits for an append to one of the watched partitions since the last call (or since the
    /// watch began).
    pub(crate) async fn woken(&self) {
        self.notify.notified().await
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut map = self.waiters.lock();
        for tp in &self.partitions {
            if let Some(watches) = map.get_mut(tp) {
                watches.remove(&self.id);
                if watches.is_empty() {
                    map.remove(tp);
                }
            }
        }
        self.waiters.watching.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_append_wakes_only_the_fetches_of_its_partition_and_none_is_missed() {
        let w = Waiters::default();
        let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        let on_a = w.watch(vec![a.clone()]);
        // Listed twice, watched once.
        let on_b = w.watch(vec![b.clone(), a.clone(), b.clone()]);
        // Woken before it waits: the permit is kept.
        w.wake(&b);
        tokio::time::timeout(Duration::from_secs(5), on_b.woken()).await.expect("a wake before the wait is kept");
        // `a`'s watcher was not woken by `b`.
        assert!(tokio::time::timeout(Duration::from_millis(50), on_a.woken()).await.is_err());
        w.wake(&a);
        tokio::time::timeout(Duration::from_secs(5), on_a.woken()).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), on_b.woken()).await.unwrap();
        assert_eq!(w.registered(), 3);
        drop(on_b);
        assert_eq!(w.registered(), 1);
        drop(on_a);
        assert_eq!((w.registered(), w.watching.load(Ordering::SeqCst)), (0, 0));
        assert!(w.lock().is_empty(), "no empty entries are left behind");
    }
}
