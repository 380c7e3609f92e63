//! The topics this node serves: their names and partition counts, as the partition directories in
//! the data directory say, and the creation of new ones through the engine.

use std::collections::BTreeMap;
use std::sync::Mutex;

use seglog::{Engine, TopicPartition};

/// The most partitions a topic is created with here (each is a directory and an open log).
pub(crate) const MAX_PARTITIONS: i32 = 10_000;

/// Topic name -> number of partitions. Creation is serialized by `creating`; lookups take the
/// map's lock only for the lookup.
pub(crate) struct Topics {
    map: Mutex<BTreeMap<String, i32>>,
    creating: tokio::sync::Mutex<()>,
}

/// Why a topic was not created: Kafka's error code and message.
pub(crate) struct Refused {
    pub(crate) code: i16,
    pub(crate) message: String,
}

impl Topics {
    /// The topics of the partitions the engine opened: a topic's partition count is one past its
    /// highest partition (Kafka numbers them from 0 without gaps).
    pub(crate) fn from_engine(engine: &Engine) -> seglog::Result<Topics> {
        let mut map = BTreeMap::new();
        for (tp, _, _) in engine.partitions()? {
            let n = map.entry(tp.topic).or_insert(0);
            *n = (*n).max(tp.partition + 1);
        }
        Ok(Topics { map: Mutex::new(map), creating: tokio::sync::Mutex::new(()) })
    }

    /// The topic's partition count, if it exists.
    pub(crate) fn partitions(&self, topic: &str) -> Option<i32> {
        self.lock().get(topic).copied()
    }

    /// Every topic with its partition count.
    pub(crate) fn all(&self) -> Vec<(String, i32)> {
        self.lock().iter().map(|(t, n)| (t.clone(), *n)).collect()
    }

    /// Whether `tp` is a partition served here.
    pub(crate) fn has(&self, tp: &TopicPartition) -> bool {
        tp.partition >= 0 && self.partitions(&tp.topic).is_some_and(|n| tp.partition < n)
    }

    /// Creates `topic` with `partitions` partitions, opening each in the engine; an existing
    /// topic is TOPIC_ALREADY_EXISTS. With `validate_only` only the checks run.
    pub(crate) async fn create(
        &self,
        engine: &Engine,
        topic: &str,
        partitions: i32,
        validate_only: bool,
    ) -> Result<i32, Refused> {
        use kafka_protocol::error::ResponseError as E;
        let refuse = |e: E, message: String| Refused { code: e.code(), message };
        if let Err(detail) = seglog::format::filename::validate_topic_name(topic) {
            return Err(refuse(E::InvalidTopicException, detail));
        }
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(refuse(
                E::InvalidPartitions,
                format!("Number of partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}"),
            ));
        }
        let _one_at_a_time = self.creating.lock().await;
        if self.partitions(topic).is_some() {
            return Err(refuse(E::TopicAlreadyExists, format!("Topic '{topic}' already exists.")));
        }
        if validate_only {
            return Ok(partitions);
        }
        for p in 0..partitions {
            let tp = TopicPartition::new(topic, p);
            if let Err(e) = engine.open_partition(&tp, None).await {
                // The partitions opened so far stay (their directories exist); the topic is
                // served with them once the rest can be created.
                return Err(Refused { code: crate::errors::code(&e), message: e.to_string() });
            }
        }
        self.lock().insert(topic.to_string(), partitions);
        Ok(partitions)
    }

    /// Deletes `topic` and every partition of it (their directories removed through
    /// [`Engine::delete_partition`], from the last partition down, so that a deletion cut short
    /// leaves partitions 0..k, a topic of k partitions, which a retry finishes).
    pub(crate) async fn delete(&self, state: &std::sync::Arc<crate::State>, topic: &str) -> Result<(), Refused> {
        use kafka_protocol::error::ResponseError as E;
        if topic == crate::TXN_TOPIC {
            return Err(Refused { code: E::InvalidTopicException.code(), message: "an internal topic".into() });
        }
        let _one_at_a_time = self.creating.lock().await;
        let Some(count) = self.partitions(topic) else {
            return Err(Refused {
                code: E::UnknownTopicOrPartition.code(),
                message: format!("Topic '{topic}' does not exist."),
            });
        };
        // Gone from the answers first: no new work is routed to a partition being deleted.
        self.lock().remove(topic);
        for p in (0..count).rev() {
            let tp = TopicPartition::new(topic, p);
            let (deleting, gone) = (state.clone(), tp.clone());
            // The deletion waits for fsyncs and the checkpoints: off the request threads.
            let r = tokio::task::spawn_blocking(move || deleting.engine.delete_partition(&gone)).await;
            let r = r.unwrap_or_else(|e| Err(seglog::Error::InvalidConfig(format!("the deletion task failed: {e}"))));
            match r {
                // Already gone (an earlier deletion got this far). Fetches waiting on it answer
                // now (UNKNOWN_TOPIC_OR_PARTITION), as Kafka completes them.
                Ok(()) | Err(seglog::Error::UnknownPartition { .. }) => state.waiters.wake(&tp),
                Err(e) => {
                    // The partitions not deleted are served again, and can be deleted again.
                    self.lock().insert(topic.to_string(), p + 1);
                    return Err(Refused { code: crate::errors::code(&e), message: e.to_string() });
                }
            }
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, i32>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}
