//! One function per API: decode the request, do the work through the engine, encode the answer.
//!
//! The versions served ([`SUPPORTED`]) are those whose requests name topics (Fetch from v13 and
//! Produce from v13 name them by id only) and that today's clients negotiate.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError as E;
use kafka_protocol::messages::{
    add_partitions_to_txn_response, api_versions_response, create_topics_response, delete_topics_response,
    fetch_response, find_coordinator_response, list_offsets_response, metadata_response, produce_response,
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ApiVersionsResponse, BrokerId, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, EndTxnRequest, EndTxnResponse, FetchRequest,
    FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse,
    ProducerId, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use seglog::log::{FetchData, FetchIsolation, ListOffset};
use seglog::TopicPartition;

use crate::conn::Answer;
use crate::errors::code;
use crate::State;

/// Every API served, with the oldest and newest version of it.
pub(crate) const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 5),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 3),
];

/// This node's id: the leader and only replica of every partition.
const NODE: i32 = 0;
/// The leader epoch of every partition: one node, never a new leader.
const LEADER_EPOCH: i32 = 0;
/// The most a fetch answer holds whatever it asks (Kafka's `fetch.max.bytes` default, 55 MiB).
const MAX_FETCH_BYTES: usize = 57_671_680;
/// The longest a fetch waits for `min_bytes` whatever it asks (Kafka bounds it by the client's
/// request timeout; a bound here keeps a hostile max_wait from holding a task for days).
const MAX_FETCH_WAIT: Duration = Duration::from_secs(60);

/// Handles one request frame (without its size): the answer now, a task that will produce it,
/// or a reason to close the connection.
pub(crate) fn dispatch(state: &Arc<State>, mut frame: Bytes, budget: &Arc<tokio::sync::Semaphore>) -> Answer {
    if frame.len() < 4 {
        return Answer::Close(format!("a request of {} bytes, shorter than any header", frame.len()));
    }
    let (key, version) = (i16::from_be_bytes([frame[0], frame[1]]), i16::from_be_bytes([frame[2], frame[3]]));
    let Ok(api) = ApiKey::try_from(key) else {
        return Answer::Close(format!("unknown API key {key}"));
    };
    let header = match RequestHeader::decode(&mut frame, api.request_header_version(version)) {
        Ok(h) => h,
        Err(e) => return Answer::Close(format!("{api:?} v{version}: malformed request header: {e}")),
    };
    let corr = header.correlation_id;
    let served = SUPPORTED.iter().any(|&(k, min, max)| k == api && (min..=max).contains(&version));
    if !served {
        if api == ApiKey::ApiVersions {
            // Kafka's rule: an ApiVersions the broker cannot parse is answered in v0 with
            // UNSUPPORTED_VERSION and the versions it can, so the client can pick one.
            return answer(ApiKey::ApiVersions, 0, corr, &api_versions(E::UnsupportedVersion.code()));
        }
        return Answer::Close(format!("{api:?} v{version} is not served (see ApiVersions)"));
    }
    let state = state.clone();
    match api {
        ApiKey::ApiVersions => answer(api, version, corr, &api_versions(0)),
        ApiKey::Produce => match decode::<ProduceRequest>(&mut frame, api, version) {
            Ok(req) => produce(&state, req, version, corr),
            Err(why) => Answer::Close(why),
        },
        ApiKey::Fetch => match decode::<FetchRequest>(&mut frame, api, version) {
            // The answer's memory (up to its max_bytes) comes from the connection's budget, taken
            // before the reads and held with the frame until it is written, less what the frame
            // does not use. It is never waited for (the connection's own answers queued behind
            // the fetch hold what it would wait for): what is free is taken, and with nothing
            // free the answer holds the first batch of its first partition.
            Ok(mut req) => {
                let budget = budget.clone();
                Answer::Later(tokio::spawn(async move {
                    let want = fetch_max_bytes(req.max_bytes);
                    let take = crate::conn::kib(want).min(budget.available_permits() as u32);
                    let mut permit = if take > 0 { budget.try_acquire_many_owned(take).ok() } else { None };
                    let granted = permit.as_ref().map_or(0, |p| p.num_permits() * 1024);
                    req.max_bytes = granted.min(want) as i32;
                    let frame = encode(api, version, corr, &fetch(state, req).await)?;
                    // Only what the frame holds stays taken until it is written.
                    if let Some(p) = permit.as_mut() {
                        let used = crate::conn::kib(frame.len()) as usize;
                        if p.num_permits() > used {
                            drop(p.split(p.num_permits() - used));
                        }
                    }
                    Ok(Some(Bytes::from_owner(Held { frame, _permit: permit })))
                }))
            }
            Err(why) => Answer::Close(why),
        },
        ApiKey::ListOffsets => {
            later::<ListOffsetsRequest, _, _>(frame, api, version, corr, move |r| list_offsets(state, r, version))
        }
        ApiKey::Metadata => {
            later::<MetadataRequest, _, _>(frame, api, version, corr, move |r| metadata(state, r, version))
        }
        ApiKey::CreateTopics => {
            later::<CreateTopicsRequest, _, _>(frame, api, version, corr, move |r| create_topics(state, r))
        }
        ApiKey::DeleteTopics => {
            later::<DeleteTopicsRequest, _, _>(frame, api, version, corr, move |r| delete_topics(state, r))
        }
        ApiKey::InitProducerId => {
            later::<InitProducerIdRequest, _, _>(frame, api, version, corr, move |r| init_producer_id(state, r))
        }
        ApiKey::FindCoordinator => later::<FindCoordinatorRequest, _, _>(frame, api, version, corr, move |r| {
            find_coordinator(state, r, version)
        }),
        ApiKey::AddPartitionsToTxn => {
            later::<AddPartitionsToTxnRequest, _, _>(frame, api, version, corr, move |r| add_partitions(state, r))
        }
        ApiKey::EndTxn => later::<EndTxnRequest, _, _>(frame, api, version, corr, move |r| end_txn(state, r)),
        _ => Answer::Close(format!("{api:?} has no handler")),
    }
}

fn decode<T: Decodable>(frame: &mut Bytes, api: ApiKey, version: i16) -> Result<T, String> {
    T::decode(frame, version).map_err(|e| format!("{api:?} v{version}: malformed request: {e}"))
}

/// Decodes the request now and answers it from a task running `work`.
fn later<T, F, Fut>(mut frame: Bytes, api: ApiKey, version: i16, corr: i32, work: F) -> Answer
where
    T: Decodable,
    F: FnOnce(T) -> Fut,
    Fut: std::future::Future + Send + 'static,
    Fut::Output: Encodable,
{
    let req = match decode::<T>(&mut frame, api, version) {
        Ok(r) => r,
        Err(why) => return Answer::Close(why),
    };
    let fut = work(req);
    Answer::Later(tokio::spawn(async move { encode(api, version, corr, &fut.await).map(Some) }))
}

fn answer<T: Encodable>(api: ApiKey, version: i16, corr: i32, body: &T) -> Answer {
    match encode(api, version, corr, body) {
        Ok(f) => Answer::Now(Some(f)),
        Err(why) => Answer::Close(why),
    }
}

/// The frame of an answer: size, response header, body, in one buffer of the exact size (a
/// fetch's records are copied into it once). An error (a field the version has no place for: a
/// bug here) closes the connection.
fn encode<T: Encodable>(api: ApiKey, version: i16, corr: i32, body: &T) -> Result<Bytes, String> {
    let mut header = ResponseHeader::default();
    header.correlation_id = corr;
    let header_version = api.response_header_version(version);
    let failed = |e: anyhow::Error| format!("encoding the answer to {api:?} v{version}: {e}");
    let size = header.compute_size(header_version).and_then(|h| Ok(h + body.compute_size(version)?)).map_err(failed)?;
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(i32::try_from(size).map_err(|_| format!("an answer of {size} bytes"))?);
    header.encode(&mut buf, header_version).and_then(|_| body.encode(&mut buf, version)).map_err(failed)?;
    Ok(buf.freeze())
}

/// An answer's frame with the memory permits it holds: released when the frame is dropped,
/// after it is written.
struct Held {
    frame: Bytes,
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.frame
    }
}

/// The isolation a consumer asks for: 1 is read committed, anything else read uncommitted.
fn isolation(level: i8) -> FetchIsolation {
    if level == 1 {
        FetchIsolation::TxnCommitted
    } else {
        FetchIsolation::HighWatermark
    }
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn api_versions(error_code: i16) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = error_code;
    r.api_keys = SUPPORTED
        .iter()
        .map(|&(k, min, max)| {
            let mut v = api_versions_response::ApiVersion::default();
            v.api_key = k as i16;
            v.min_version = min;
            v.max_version = max;
            v
        })
        .collect();
    r
}

/// Starts every partition's append now (in the order the request lists them, so a client's
/// pipelined requests reach a partition in order), then answers from a task once the engine
/// acknowledged them: under the engine's durability, whatever `acks` asks (1 and -1 are the
/// same with one replica). acks=0 gets no answer.
fn produce(state: &Arc<State>, req: ProduceRequest, version: i16, corr: i32) -> Answer {
    let mut started = Vec::with_capacity(req.topic_data.len());
    for topic in req.topic_data {
        let mut parts = Vec::with_capacity(topic.partition_data.len());
        for p in topic.partition_data {
            let tp = TopicPartition::new(topic.name.0.as_str(), p.index);
            let r = match p.records {
                _ if !state.topics.has(&tp) => Err((E::UnknownTopicOrPartition.code(), None)),
                // Kafka: clients do not append to internal topics.
                _ if tp.topic == crate::TXN_TOPIC => {
                    Err((E::InvalidTopicException.code(), Some("the coordinator's own topic".to_string())))
                }
                None => Err((E::InvalidRecord.code(), Some("no records".to_string()))),
                #[cfg(feature = "bench")]
                // Answered with no error and offset -1, as if stored.
                Some(_) if state.config.discard_produce => Err((0, None)),
                Some(records) => Ok(state.engine.append(&tp, records.to_vec(), LEADER_EPOCH)),
            };
            parts.push((p.index, tp, r));
        }
        parts.shrink_to_fit();
        started.push((topic.name, parts));
    }
    let acks = req.acks;
    let state = state.clone();
    let task = tokio::spawn(async move {
        let mut out = ProduceResponse::default();
        // Refusals that answer their partition's log start, looked up together once every
        // append of the request is settled (none for acks=0: there is no answer).
        let mut log_starts = Vec::new();
        for (topic, parts) in started {
            let mut t = produce_response::TopicProduceResponse::default();
            t.name = topic;
            for (index, tp, r) in parts {
                let mut p = produce_response::PartitionProduceResponse::default();
                p.index = index;
                p.base_offset = -1;
                p.log_append_time_ms = -1;
                p.log_start_offset = -1;
                match r {
                    Ok(pending) => match pending.await {
                        Ok(info) => {
                            // Fetches waiting on this partition look again.
                            state.waiters.wake(&tp);
                            p.base_offset = info.first_offset;
                            p.log_append_time_ms = info.log_append_time_ms;
                            p.log_start_offset = info.log_start_offset;
                        }
                        Err(e) => {
                            p.error_code = code(&e);
                            p.error_message = Some(StrBytes::from_string(e.to_string()));
                            if acks != 0 && answers_log_start(p.error_code) {
                                let at = (out.responses.len(), t.partition_responses.len());
                                log_starts.push((at, state.engine.with_log(&tp, |log| Ok(log.log_start_offset()))));
                            }
                        }
                    },
                    // Refused before the engine saw it: Kafka answers -1 for these. (In a bench
                    // build, `discard_produce` answers here too, with error 0: stored, at -1.)
                    Err((error_code, message)) => {
                        p.error_code = error_code;
                        p.error_message = message.map(StrBytes::from_string);
                    }
                }
                t.partition_responses.push(p);
            }
            out.responses.push(t);
        }
        for ((topic, part), start) in log_starts {
            // -1 when it cannot be read, Kafka's answer for a partition that is not online.
            out.responses[topic].partition_responses[part].log_start_offset = start.await.unwrap_or(-1);
        }
        if acks == 0 {
            // No answer; a refusal closes the connection, which is how Kafka tells an acks=0
            // producer (it then refreshes its metadata and goes on).
            let refused = out.responses.iter().flat_map(|t| &t.partition_responses).find(|p| p.error_code != 0);
            return match refused {
                Some(p) => Err(format!("an acks=0 produce was refused with error {}", p.error_code)),
                None => Ok(None),
            };
        }
        encode(ApiKey::Produce, version, corr, &out).map(Some)
    });
    Answer::Later(task)
}

/// Whether the engine's refusal of an append answers its partition's log start offset, as
/// Kafka's `ReplicaManager.appendToLocalLog` does for every refusal but these: an unknown
/// partition, a partition led elsewhere, a batch too large or corrupt, a failed log directory
/// (-1 for those, `LogAppendInfo.UnknownLogAppendInfo`). A full shard queue (REQUEST_TIMED_OUT)
/// answers -1 too, rather than queue a lookup behind it.
fn answers_log_start(error_code: i16) -> bool {
    ![
        E::UnknownTopicOrPartition,
        E::NotLeaderOrFollower,
        E::MessageTooLarge,
        E::RecordListTooLarge,
        E::CorruptMessage,
        E::KafkaStorageError,
        E::RequestTimedOut,
    ]
    .iter()
    .any(|e| e.code() == error_code)
}

/// A fetch's byte limit: its max_bytes up to the server's own, and 0 for 0 or less (Kafka takes
/// the smaller of the two as is; with 0 the first partition with records returns its first
/// batch, minOneMessage, and the others nothing).
fn fetch_max_bytes(max_bytes: i32) -> usize {
    (max_bytes.max(0) as usize).min(MAX_FETCH_BYTES)
}

/// Waves of reads a fetch pass makes before its remaining partitions go together (see
/// `fetch_once`).
const MAX_FETCH_WAVES: usize = 8;

/// One partition of a fetch: its name, what the client asked of it, and whether it is here.
struct Part<'a> {
    tp: TopicPartition,
    asked: &'a kafka_protocol::messages::fetch_request::FetchPartition,
    known: bool,
}

/// A consumer's fetch: up to the high watermark (read uncommitted) or the last stable offset
/// with the aborted transactions (read committed); waits up to `max_wait_ms` for `min_bytes`.
async fn fetch(state: Arc<State>, req: FetchRequest) -> FetchResponse {
    let isolation = isolation(req.isolation_level);
    let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_FETCH_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    let min_bytes = req.min_bytes.max(0) as usize;
    let parts: Vec<Part> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|asked| {
                let tp = TopicPartition::new(t.topic.0.as_str(), asked.partition);
                let known = state.topics.has(&tp);
                Part { tp, asked, known }
            })
        })
        .collect();
    let mut watch = None;
    loop {
        let (results, bytes, failed) = fetch_once(&state, &parts, req.max_bytes, isolation).await;
        // Kafka's rule: answer once min_bytes are there, at the first error, with nothing to
        // fetch, or at the deadline.
        let done = failed || bytes >= min_bytes || parts.is_empty() || tokio::time::Instant::now() >= deadline;
        if done {
            return fetch_answer(&req, results, isolation);
        }
        match &watch {
            // Short: watch the partitions, then read again. An append acknowledged after the
            // read above is seen by that read or wakes the wait after it.
            None => watch = Some(state.waiters.watch(parts.iter().map(|p| p.tp.clone()))),
            Some(watch) => tokio::select! {
                _ = watch.woken() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            },
        }
    }
}

/// One pass over the fetch's partitions: each one's read (or error code), the record bytes in
/// them, and whether any partition answered an error (Kafka answers at once then).
///
/// Kafka reads a fetch's partitions in turn, each up to its partition_max_bytes and what
/// max_bytes leaves after the bytes the partitions before it returned, and returns a first batch
/// larger than that (minOneMessage) until some partition has returned records. Reading in turn
/// would cost a shard round trip per partition, so the reads go in waves started together: a
/// wave takes the next partitions while their whole limit fits in what is left after the
/// partitions before them in the wave (so each gets exactly Kafka's limit, whatever those
/// return), and the next wave starts once the sizes are known.
/// - When the limits together exceed max_bytes (waves are possible), each partition's readable
///   end is looked up first, in one round trip: partitions with nothing to read take no room
///   (they are read within 0 bytes, for their offsets), nor do unknown ones.
/// - Only a wave's first partition gets minOneMessage. A later one that held back records while
///   nothing came before it, or any after a first batch over its limit, starts the next wave; so
///   at most one batch over its limit is read.
/// - After `MAX_FETCH_WAVES` waves the remaining partitions go together, each within what the
///   ones before it could return: when that many waves of partitions with records each return
///   less than their limit, the later ones get less than Kafka would give them.
async fn fetch_once(
    state: &State,
    parts: &[Part<'_>],
    max_bytes: i32,
    isolation: FetchIsolation,
) -> (Vec<Result<FetchData, i16>>, usize, bool) {
    let max_bytes = fetch_max_bytes(max_bytes);
    let limit_of = |p: &Part| if p.known { (p.asked.partition_max_bytes.max(0) as usize).min(max_bytes) } else { 0 };
    let demand = parts.iter().fold(0usize, |sum, p| sum.saturating_add(limit_of(p)));
    let mut idle = vec![false; parts.len()];
    if demand > max_bytes {
        let ends: Vec<_> = parts
            .iter()
            .map(|p| p.known.then(|| state.engine.list_offset_isolated(&p.tp, ListOffset::Latest, isolation)))
            .collect();
        for ((p, end), idle) in parts.iter().zip(ends).zip(idle.iter_mut()) {
            if let Some(end) = end {
                *idle = matches!(end.await, Ok(Some(end)) if p.asked.fetch_offset >= end.offset);
            }
        }
    }
    let mut results = Vec::with_capacity(parts.len());
    let (mut left, mut total, mut failed) = (max_bytes, 0usize, false);
    for waves in 1.. {
        if results.len() == parts.len() {
            break;
        }
        let mut room = left;
        let mut wave = Vec::new();
        for (i, p) in parts.iter().enumerate().skip(results.len()) {
            let want = if idle[i] { 0 } else { limit_of(p).min(left) };
            // Past the first of the wave, a partition whose limit would depend on what the ones
            // before it return waits for the next wave (with nothing left, every limit is 0).
            if !wave.is_empty() && want > room && waves < MAX_FETCH_WAVES {
                break;
            }
            let limit = want.min(room);
            room -= limit;
            // A negative partition_max_bytes reads within 0 bytes, for its offsets (below).
            let negative = p.asked.partition_max_bytes < 0;
            let min_one = total == 0 && wave.is_empty() && !negative;
            let read = p.known.then(|| {
                state.engine.fetch_isolated_bounded(&p.tp, p.asked.fetch_offset, limit as u32, isolation, min_one)
            });
            wave.push((limit, p.asked.fetch_offset, negative, read));
        }
        let first = results.len();
        for (limit, offset, negative, read) in wave {
            let r = match read {
                None => Err(E::UnknownTopicOrPartition.code()),
                Some(pending) => pending.await.map_err(|e| code(&e)),
            };
            let n = r.as_ref().map_or(0, |data| data.records.len());
            let r = match r {
                Ok(data) => {
                    let readable = match isolation {
                        FetchIsolation::TxnCommitted => data.last_stable_offset,
                        _ => data.high_watermark,
                    };
                    if negative && offset < readable {
                        // Kafka's segment read refuses a negative size (IllegalArgumentException),
                        // and is reached only with records to read: out of range and caught-up
                        // fetches answer as any other.
                        Err(E::UnknownServerError.code())
                    } else {
                        // Nothing came before it and it held back records it has (its first
                        // batch is over its limit): Kafka would have returned that batch. It
                        // starts the next wave, with minOneMessage; the reads after it in this
                        // wave are dropped and made again.
                        if total == 0 && results.len() > first && n == 0 && offset < readable {
                            break;
                        }
                        Ok(data)
                    }
                }
                Err(e) => Err(e),
            };
            total += n;
            left = left.saturating_sub(n);
            failed |= r.is_err();
            results.push(r);
            // A first batch over its limit (minOneMessage) leaves less than the partitions
            // after it in the wave were read within: they are read again with what is left.
            if n > limit {
                break;
            }
        }
    }
    (results, total, failed)
}

/// The Fetch answer from each partition's read, in the request's order.
fn fetch_answer(req: &FetchRequest, results: Vec<Result<FetchData, i16>>, isolation: FetchIsolation) -> FetchResponse {
    let mut results = results.into_iter();
    let mut out = FetchResponse::default();
    for topic in &req.topics {
        let mut t = fetch_response::FetchableTopicResponse::default();
        t.topic = topic.topic.clone();
        for p in &topic.partitions {
            let mut answer = fetch_response::PartitionData::default();
            answer.partition_index = p.partition;
            answer.high_watermark = -1;
            answer.last_stable_offset = -1;
            answer.log_start_offset = -1;
            answer.preferred_read_replica = BrokerId(-1);
            answer.records = Some(Bytes::new());
            match results.next().expect("one read per partition") {
                Ok(data) => {
                    answer.high_watermark = data.high_watermark;
                    answer.last_stable_offset = data.last_stable_offset;
                    answer.log_start_offset = data.log_start_offset;
                    // Null under read uncommitted (Kafka's answer), the list under read committed.
                    answer.aborted_transactions = None;
                    if isolation == FetchIsolation::TxnCommitted {
                        let aborted = data.aborted_transactions.iter().map(|a| {
                            let mut x = fetch_response::AbortedTransaction::default();
                            x.producer_id = ProducerId(a.producer_id);
                            x.first_offset = a.first_offset;
                            x
                        });
                        answer.aborted_transactions = Some(aborted.collect());
                    }
                    if !data.records.is_empty() {
                        answer.records = Some(Bytes::from_owner(data.records));
                    }
                }
                Err(error_code) => answer.error_code = error_code,
            }
            t.partitions.push(answer);
        }
        out.responses.push(t);
    }
    out
}

async fn list_offsets(state: Arc<State>, req: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    let isolation = isolation(req.isolation_level);
    // Every lookup is started before any is awaited: the partitions may be on different shards.
    let lookups: Vec<Vec<(i32, Result<_, i16>)>> = req
        .topics
        .iter()
        .map(|topic| {
            let lookup = |p: &kafka_protocol::messages::list_offsets_request::ListOffsetsPartition| {
                let tp = TopicPartition::new(topic.name.0.as_str(), p.partition_index);
                let target = match p.timestamp {
                    -1 => ListOffset::Latest,
                    -2 => ListOffset::Earliest,
                    -3 => ListOffset::MaxTimestamp,
                    t if t >= 0 => ListOffset::Timestamp(t),
                    _ => return Err(E::InvalidRequest.code()),
                };
                if !state.topics.has(&tp) {
                    return Err(E::UnknownTopicOrPartition.code());
                }
                Ok(state.engine.list_offset_isolated(&tp, target, isolation))
            };
            topic.partitions.iter().map(|p| (p.partition_index, lookup(p))).collect()
        })
        .collect();
    let mut out = ListOffsetsResponse::default();
    for (topic, parts) in req.topics.into_iter().zip(lookups) {
        let mut t = list_offsets_response::ListOffsetsTopicResponse::default();
        t.name = topic.name;
        for (index, lookup) in parts {
            let mut r = list_offsets_response::ListOffsetsPartitionResponse::default();
            r.partition_index = index;
            r.timestamp = -1;
            r.offset = -1;
            let found = match lookup {
                Ok(pending) => pending.await.map_err(|e| code(&e)),
                Err(error_code) => Err(error_code),
            };
            match found {
                Ok(Some(found)) => {
                    r.timestamp = found.timestamp;
                    r.offset = found.offset;
                    // From v4 (earlier versions have no field for it).
                    if version >= 4 {
                        r.leader_epoch = found.leader_epoch.unwrap_or(-1);
                    }
                }
                // Nothing at or after the timestamp: offset -1 (Kafka's answer).
                Ok(None) => {}
                Err(error_code) => r.error_code = error_code,
            }
            t.partitions.push(r);
        }
        out.topics.push(t);
    }
    out
}

async fn metadata(state: Arc<State>, req: MetadataRequest, version: i16) -> MetadataResponse {
    let mut out = MetadataResponse::default();
    let mut broker = metadata_response::MetadataResponseBroker::default();
    broker.node_id = BrokerId(NODE);
    broker.host = StrBytes::from_string(state.advertised.0.clone());
    broker.port = state.advertised.1;
    out.brokers.push(broker);
    out.cluster_id = Some(StrBytes::from_static_str("seglog"));
    out.controller_id = BrokerId(NODE);
    // v0: an empty list means every topic; from v1 null does, and an empty list none.
    let wanted: Option<Vec<Option<String>>> = match req.topics {
        None => None,
        Some(v) if v.is_empty() && version == 0 => None,
        Some(v) => Some(v.into_iter().map(|t| t.name.map(|n| n.0.to_string())).collect()),
    };
    let create = state.config.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
    let topics: Vec<(Option<String>, Result<i32, i16>)> = match wanted {
        None => state.topics.all().into_iter().map(|(t, n)| (Some(t), Ok(n))).collect(),
        Some(names) => {
            let mut v = Vec::with_capacity(names.len());
            for n in names {
                let r = match &n {
                    // Asked by id only: ids are not kept here.
                    None => Err(E::UnknownTopicId.code()),
                    Some(t) => match state.topics.partitions(t) {
                        Some(count) => Ok(count),
                        None if create => state
                            .topics
                            .create(&state.engine, t, state.config.default_partitions, false)
                            .await
                            .map_err(|r| r.code),
                        None => Err(E::UnknownTopicOrPartition.code()),
                    },
                };
                v.push((n, r));
            }
            v
        }
    };
    for (topic, r) in topics {
        let mut t = metadata_response::MetadataResponseTopic::default();
        t.is_internal = topic.as_deref().is_some_and(|n| n.starts_with("__"));
        t.name = topic.map(|n| name(&n));
        match r {
            Ok(count) => {
                for i in 0..count {
                    let mut p = metadata_response::MetadataResponsePartition::default();
                    p.partition_index = i;
                    p.leader_id = BrokerId(NODE);
                    p.leader_epoch = LEADER_EPOCH;
                    p.replica_nodes = vec![BrokerId(NODE)];
                    p.isr_nodes = vec![BrokerId(NODE)];
                    t.partitions.push(p);
                }
            }
            Err(error_code) => t.error_code = error_code,
        }
        out.topics.push(t);
    }
    out
}

async fn create_topics(state: Arc<State>, req: CreateTopicsRequest) -> CreateTopicsResponse {
    let mut out = CreateTopicsResponse::default();
    for topic in req.topics {
        let mut r = create_topics_response::CreatableTopicResult::default();
        let count = if !topic.assignments.is_empty() { topic.assignments.len() as i32 } else { topic.num_partitions };
        let count = if count == -1 { state.config.default_partitions } else { count };
        let refused = |e: E, message: String| Err(crate::topics::Refused { code: e.code(), message });
        let created = if !matches!(topic.replication_factor, -1 | 1) {
            refused(
                E::InvalidReplicationFactor,
                format!("Replication factor: {} larger than available brokers: 1.", topic.replication_factor),
            )
        } else if topic.assignments.iter().any(|a| a.broker_ids.iter().any(|b| b.0 != NODE)) {
            refused(E::InvalidReplicaAssignment, format!("Only broker {NODE} exists."))
        } else if !topic.configs.is_empty() {
            refused(E::InvalidConfig, "topic configs are not taken yet: every topic has the server's settings".into())
        } else {
            state.topics.create(&state.engine, topic.name.0.as_str(), count, req.validate_only).await
        };
        match created {
            Ok(n) => {
                r.num_partitions = n;
                r.replication_factor = 1;
            }
            Err(refused) => {
                r.error_code = refused.code;
                r.error_message = Some(StrBytes::from_string(refused.message));
                r.num_partitions = -1;
                r.replication_factor = -1;
            }
        }
        r.name = topic.name;
        out.topics.push(r);
    }
    out
}

async fn delete_topics(state: Arc<State>, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
    let mut out = DeleteTopicsResponse::default();
    for topic in req.topic_names {
        let mut r = delete_topics_response::DeletableTopicResult::default();
        if let Err(refused) = state.topics.delete(&state, topic.0.as_str()).await {
            r.error_code = refused.code;
            r.error_message = Some(StrBytes::from_string(refused.message));
        }
        r.name = Some(topic);
        out.responses.push(r);
    }
    out
}

/// A new producer id with epoch 0 for an idempotent producer; for a transactional id, the
/// coordinator's answer ([`crate::txn::Coordinator::init_producer_id`]).
async fn init_producer_id(state: Arc<State>, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let mut out = InitProducerIdResponse::default();
    out.producer_id = ProducerId(-1);
    out.producer_epoch = -1;
    if let Some(id) = &req.transactional_id {
        let expected = (req.producer_id.0 >= 0).then_some((req.producer_id.0, req.producer_epoch));
        match state.coordinator.init_producer_id(&state, id.0.as_str(), req.transaction_timeout_ms, expected).await {
            Ok((pid, epoch)) => {
                out.producer_id = ProducerId(pid);
                out.producer_epoch = epoch;
            }
            Err(code) => out.error_code = code,
        }
        return out;
    }
    match state.producer_ids.next() {
        Ok(id) => {
            out.producer_id = ProducerId(id);
            out.producer_epoch = 0;
        }
        Err(e) => {
            eprintln!("seglog serve: allocating a producer id: {e}");
            out.error_code = E::KafkaStorageError.code();
        }
    }
    out
}

/// This node for the transaction coordinator; consumer groups are not served
/// (COORDINATOR_NOT_AVAILABLE with a message).
async fn find_coordinator(state: Arc<State>, req: FindCoordinatorRequest, version: i16) -> FindCoordinatorResponse {
    let (error_code, message) = match req.key_type {
        1 => (0, None),
        0 => (E::CoordinatorNotAvailable.code(), Some("consumer groups are not served by seglog serve")),
        _ => (E::InvalidRequest.code(), Some("unknown key type")),
    };
    let node = if error_code == 0 { NODE } else { -1 };
    let host = if error_code == 0 { state.advertised.0.clone() } else { String::new() };
    let port = if error_code == 0 { state.advertised.1 } else { -1 };
    let mut out = FindCoordinatorResponse::default();
    // v0-3 answer one key at the top level; v4 a list for the keys asked.
    if version < 4 {
        out.error_code = error_code;
        out.error_message = message.map(StrBytes::from_static_str);
        out.node_id = BrokerId(node);
        out.host = StrBytes::from_string(host);
        out.port = port;
        return out;
    }
    out.coordinators = req
        .coordinator_keys
        .into_iter()
        .map(|key| {
            let mut c = find_coordinator_response::Coordinator::default();
            c.key = key;
            c.node_id = BrokerId(node);
            c.host = StrBytes::from_string(host.clone());
            c.port = port;
            c.error_code = error_code;
            c.error_message = message.map(StrBytes::from_static_str);
            c
        })
        .collect();
    out
}

async fn add_partitions(state: Arc<State>, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse {
    let wanted: Vec<TopicPartition> = req
        .v3_and_below_topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| TopicPartition::new(t.name.0.as_str(), *p)))
        .collect();
    let producer = (req.v3_and_below_producer_id.0, req.v3_and_below_producer_epoch);
    let id = req.v3_and_below_transactional_id.0.as_str();
    let mut codes = state.coordinator.add_partitions(&state, id, producer, &wanted).await.into_iter();
    let mut out = AddPartitionsToTxnResponse::default();
    for t in req.v3_and_below_topics {
        let mut r = add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
        for p in t.partitions {
            let mut x = add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default();
            x.partition_index = p;
            x.partition_error_code = codes.next().unwrap_or(E::UnknownServerError.code());
            r.results_by_partition.push(x);
        }
        r.name = t.name;
        out.results_by_topic_v3_and_below.push(r);
    }
    out
}

async fn end_txn(state: Arc<State>, req: EndTxnRequest) -> EndTxnResponse {
    let producer = (req.producer_id.0, req.producer_epoch);
    let r = state.coordinator.end_txn(&state, req.transactional_id.0.as_str(), producer, req.committed).await;
    let mut out = EndTxnResponse::default();
    out.producer_id = ProducerId(-1);
    out.producer_epoch = -1;
    if let Err(code) = r {
        out.error_code = code;
    }
    out
}
