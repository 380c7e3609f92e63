//! The server's answers to what real clients do not send: bad batches, unknown topics, versions it
//! does not serve, malformed and oversized requests. Each must get Kafka's error code (or, where
//! no answer can be built, a closed connection that leaves the server and its other connections
//! serving), and a refused produce must leave the data directory byte-identical.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    fetch_request, produce_request, ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse,
    MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use seglog::format::builder::BatchBuilder;
use seglog_server::{start, Running, ServerConfig, TXN_TOPIC as TXN_TOPIC_NAME};

fn server(dir: &Path, tune: impl FnOnce(&mut ServerConfig)) -> Running {
    let mut c = ServerConfig::new(dir);
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.engine.shards = Some(1);
    c.engine.pin_threads = false;
    tune(&mut c);
    start(c).unwrap()
}

struct Client {
    s: TcpStream,
    corr: i32,
}

impl Client {
    fn connect(r: &Running) -> Client {
        let s = TcpStream::connect(r.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client { s, corr: 0 }
    }

    /// Sends a frame as given (size added).
    fn send_raw(&mut self, body: &[u8]) {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        self.s.write_all(&f).unwrap();
    }

    fn request_bytes<T: Encodable>(&mut self, api: ApiKey, version: i16, req: &T) -> Vec<u8> {
        self.corr += 1;
        let mut h = RequestHeader::default();
        h.request_api_key = api as i16;
        h.request_api_version = version;
        h.correlation_id = self.corr;
        h.client_id = Some(StrBytes::from_static_str("protocol-test"));
        let mut b = BytesMut::new();
        h.encode(&mut b, api.request_header_version(version)).unwrap();
        req.encode(&mut b, version).unwrap();
        b.to_vec()
    }

    /// The next answer's correlation id and body (after its header), or `None` when the server
    /// closed the connection.
    fn read_frame(&mut self, api: ApiKey, version: i16) -> Option<(i32, Bytes)> {
        let mut size = [0u8; 4];
        if self.s.read_exact(&mut size).is_err() {
            return None;
        }
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.s.read_exact(&mut body).unwrap();
        let mut b = Bytes::from(body);
        let h = ResponseHeader::decode(&mut b, api.response_header_version(version)).unwrap();
        Some((h.correlation_id, b))
    }

    /// The answer to the last request sent.
    fn read_answer(&mut self, api: ApiKey, version: i16) -> Option<Bytes> {
        let (corr, b) = self.read_frame(api, version)?;
        assert_eq!(corr, self.corr);
        Some(b)
    }

    /// Sends `requests` (already encoded) in one write, each framed with its size.
    fn send_pipelined(&mut self, requests: &[Vec<u8>]) {
        let mut wire = Vec::new();
        for r in requests {
            wire.extend_from_slice(&(r.len() as i32).to_be_bytes());
            wire.extend_from_slice(r);
        }
        self.s.write_all(&wire).unwrap();
    }

    fn call<T: Encodable, R: Decodable>(&mut self, api: ApiKey, version: i16, req: &T) -> R {
        let bytes = self.request_bytes(api, version, req);
        self.send_raw(&bytes);
        let mut b = self.read_answer(api, version).expect("an answer");
        let r = R::decode(&mut b, version).unwrap();
        assert!(!b.has_remaining(), "trailing bytes in the answer");
        r
    }

    /// Whether the server closed the connection (end of stream or a reset); a read that times
    /// out (a server that hangs) is not that.
    fn closed(&mut self) -> bool {
        let mut one = [0u8; 1];
        loop {
            match self.s.read(&mut one) {
                Ok(0) => return true,
                // A socket read with a timeout is not restarted after an interruption (EINTR).
                // Under load this thread saw one in about 1 run of 40; it wrote files through
                // io_uring when the server started, whose task work can interrupt it, as a
                // signal would.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
                Ok(_) => return false,
            }
        }
    }
}

/// Whole batches in a fetch answer's records.
struct BatchCount;

impl BatchCount {
    fn of(records: &[u8]) -> usize {
        let (mut at, mut n) = (0, 0);
        while at + 12 <= records.len() {
            at += 12 + i32::from_be_bytes(records[at + 8..at + 12].try_into().unwrap()) as usize;
            n += 1;
        }
        n
    }
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn metadata(c: &mut Client, topic: &str, auto_create: bool) -> MetadataResponse {
    let mut t = kafka_protocol::messages::metadata_request::MetadataRequestTopic::default();
    t.name = Some(name(topic));
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![t]);
    req.allow_auto_topic_creation = auto_create;
    c.call(ApiKey::Metadata, 12, &req)
}

fn batch(values: &[&[u8]], base_ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for (i, v) in values.iter().enumerate() {
        b.push(base_ts + i as i64, None, Some(v), &[]);
    }
    b.build().unwrap()
}

fn produce_req(topic: &str, partition: i32, records: Vec<u8>) -> ProduceRequest {
    let mut p = produce_request::PartitionProduceData::default();
    p.index = partition;
    p.records = Some(Bytes::from(records));
    let mut t = produce_request::TopicProduceData::default();
    t.name = name(topic);
    t.partition_data = vec![p];
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 30_000;
    req.topic_data = vec![t];
    req
}

fn produce(c: &mut Client, topic: &str, partition: i32, records: Vec<u8>) -> (i16, i64) {
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &produce_req(topic, partition, records));
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn fetch(c: &mut Client, topic: &str, offset: i64, isolation: i8) -> FetchResponse {
    c.call(ApiKey::Fetch, 12, &fetch_req(topic, 0, offset, isolation, 0))
}

/// A fetch of one partition that waits up to `max_wait_ms` for a byte.
fn fetch_req(topic: &str, partition: i32, offset: i64, isolation: i8, max_wait_ms: i32) -> FetchRequest {
    let mut p = fetch_request::FetchPartition::default();
    p.partition = partition;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = name(topic);
    t.partitions = vec![p];
    let mut req = FetchRequest::default();
    req.replica_id = kafka_protocol::messages::BrokerId(-1);
    req.max_wait_ms = max_wait_ms;
    req.min_bytes = 1;
    req.max_bytes = 1 << 20;
    req.isolation_level = isolation;
    req.topics = vec![t];
    req
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            for (k, v) in snapshot(&p) {
                out.insert(format!("{}/{k}", p.file_name().unwrap().to_string_lossy()), v);
            }
        } else {
            out.insert(p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap());
        }
    }
    out
}

#[test]
fn api_versions_lists_what_is_served_and_answers_unknown_versions_in_v0() {
    let dir = tempfile::tempdir().unwrap();
    let r = server(dir.path(), |_| {});
    let mut c = Client::connect(&r);
    let v: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(v.error_code, 0);
    let produce = v.api_keys.iter().find(|k| k.api_key == ApiKey::Produce as i16).unwrap();
    assert_eq!((produce.min_version, produce.max_version), (3, 9));
    // A version from the future (a v3 body under a v99 header): Kafka's answer is v0 with
    // UNSUPPORTED_VERSION and the list.
    let mut bytes = c.request_bytes(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    bytes[2..4].copy_from_slice(&99i16.to_be_bytes());
    c.send_raw(&bytes);
    let mut b = c.read_answer(ApiKey::ApiVersions, 0).unwrap();
    let v = ApiVersionsResponse::decode(&mut b, 0).unwrap();
    assert_eq!(v.error_code, 35);
    assert!(v.api_keys.len() >= 7);
    r.shutdown().unwrap();
}

#[test]
fn produce_and_fetch_keep_the_clients_batches_and_refuse_bad_ones_without_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let r = server(dir.path(), |c| c.default_partitions = 2);
    let mut c = Client::connect(&r);
    // Metadata creates the topic on first use, with the default partition count.
    let m = metadata(&mut c, "events", true);
    assert_eq!(m.topics[0].error_code, 0);
    assert_eq!(m.topics[0].partitions.len(), 2);
    assert_eq!(m.brokers[0].port as u16, r.local_addr().port());
    // Not created when the client says not to.
    assert_eq!(metadata(&mut c, "nope", false).topics[0].error_code, 3);

    let sent = batch(&[b"one", b"two", b"three"], 1_700_000_000_000);
    assert_eq!(produce(&mut c, "events", 0, sent.clone()), (0, 0));
    assert_eq!(produce(&mut c, "events", 0, batch(&[b"four"], 1_700_000_000_100)), (0, 3));
    // The answer carries the partition's log start, as Kafka's does (a producer reads it after
    // UNKNOWN_PRODUCER_ID to tell a retention-removed producer from a lost one).
    let answer: ProduceResponse =
        c.call(ApiKey::Produce, 9, &produce_req("events", 1, batch(&[b"x"], 1_700_000_000_000)));
    assert_eq!(answer.responses[0].partition_responses[0].log_start_offset, 0);

    // The fetch returns the client's batch as stored: the same bytes but for the partition
    // leader epoch the leader writes into it (bytes 12..16, outside the CRC).
    let f = fetch(&mut c, "events", 0, 0);
    let p = &f.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset), (0, 4, 4, 0));
    let got = p.records.as_ref().unwrap();
    assert_eq!(&got[..12], &sent[..12]);
    assert_eq!(&got[16..sent.len()], &sent[16..]);
    assert_eq!(p.aborted_transactions, None, "read uncommitted answers null");
    assert_eq!(fetch(&mut c, "events", 0, 1).responses[0].partitions[0].aborted_transactions, Some(vec![]));
    assert_eq!(fetch(&mut c, "events", 99, 0).responses[0].partitions[0].error_code, 1, "OFFSET_OUT_OF_RANGE");
    assert_eq!(fetch(&mut c, "unknown", 0, 0).responses[0].partitions[0].error_code, 3);

    // ListOffsets in the oldest and newest versions served: by time, latest, earliest.
    for version in [1i16, 7] {
        for (ts, want) in [(1_700_000_000_050i64, 3i64), (-1, 4), (-2, 0)] {
            let mut p = kafka_protocol::messages::list_offsets_request::ListOffsetsPartition::default();
            p.timestamp = ts;
            let mut t = kafka_protocol::messages::list_offsets_request::ListOffsetsTopic::default();
            t.name = name("events");
            t.partitions = vec![p];
            let mut req = kafka_protocol::messages::ListOffsetsRequest::default();
            req.topics = vec![t];
            let r: kafka_protocol::messages::ListOffsetsResponse = c.call(ApiKey::ListOffsets, version, &req);
            let p = &r.topics[0].partitions[0];
            assert_eq!((p.error_code, p.offset), (0, want), "v{version} timestamp {ts}");
        }
    }

    // Refusals, each leaving every file as it was. Each answers its partition's log start, as
    // Kafka does, except those Kafka answers -1 for: an unknown partition, a batch too large or
    // corrupt.
    let refused = |c: &mut Client, topic: &str, partition: i32, records: Vec<u8>| {
        let r: ProduceResponse = c.call(ApiKey::Produce, 9, &produce_req(topic, partition, records));
        let p = &r.responses[0].partition_responses[0];
        (p.error_code, p.log_start_offset)
    };
    let before = snapshot(dir.path());
    let mut bad_crc = batch(&[b"x"], 1_700_000_000_200);
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0xff;
    assert_eq!(refused(&mut c, "events", 0, bad_crc), (2, -1), "CORRUPT_MESSAGE");
    assert_eq!(refused(&mut c, "events", 7, batch(&[b"x"], 0)), (3, -1), "UNKNOWN_TOPIC_OR_PARTITION");
    assert_eq!(refused(&mut c, "ghost", 0, batch(&[b"x"], 0)), (3, -1));
    let big = vec![7u8; 1_100_000];
    assert_eq!(refused(&mut c, "events", 0, batch(&[&big], 1_700_000_000_300)), (10, -1), "MESSAGE_TOO_LARGE");
    assert_eq!(refused(&mut c, "events", 0, b"garbage".to_vec()), (2, -1), "a frame that is no batch");
    assert_eq!(snapshot(dir.path()), before, "a refused produce changed the directory");
    let idempotent = |seq: i32| {
        let mut b = BatchBuilder::new().producer(4242, 0, seq);
        b.push(1_700_000_000_400, None, Some(b"x"), &[]);
        b.build().unwrap()
    };
    assert_eq!(refused(&mut c, "events", 1, idempotent(0)), (0, 0));
    assert_eq!(refused(&mut c, "events", 1, idempotent(5)), (45, 0), "OUT_OF_ORDER_SEQUENCE_NUMBER");
    r.shutdown().unwrap();
}

#[test]
fn unparseable_requests_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let r = server(dir.path(), |c| c.max_request_bytes = 64 << 10);
    let good = |r: &Running| {
        let mut c = Client::connect(r);
        let v: ApiVersionsResponse = c.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
        assert_eq!(v.error_code, 0);
    };
    // A produce cut in the middle of its body.
    let mut c = Client::connect(&r);
    let full = c.request_bytes(ApiKey::Produce, 9, &produce_req("t", 0, batch(&[b"x"], 0)));
    c.send_raw(&full[..full.len() - 20]);
    assert!(c.closed());
    good(&r);
    // An array count of i32::MAX in 8 bytes of body: refused as malformed, with nothing
    // allocated for it (the patched kafka-protocol; unpatched, the allocator aborts the process).
    let mut c = Client::connect(&r);
    let mut hostile = c.request_bytes(ApiKey::Metadata, 0, &MetadataRequest::default());
    let n = hostile.len();
    hostile[n - 4..].copy_from_slice(&i32::MAX.to_be_bytes());
    c.send_raw(&hostile);
    assert!(c.closed());
    good(&r);
    // An API key that does not exist, and one not served.
    for key in [999i16, ApiKey::JoinGroup as i16] {
        let mut c = Client::connect(&r);
        let mut b = BytesMut::new();
        b.put_i16(key);
        b.put_i16(0);
        b.put_i32(1);
        b.put_i16(-1);
        c.send_raw(&b);
        assert!(c.closed(), "api key {key}");
        good(&r);
    }
    // A size past max_request_bytes is refused before anything is read; so is a negative one.
    for size in [(64 << 10) + 1, -5i32] {
        let mut c = Client::connect(&r);
        c.s.write_all(&size.to_be_bytes()).unwrap();
        assert!(c.closed(), "size {size}");
        good(&r);
    }
    // Three bytes of a frame, then nothing: the server is not stuck on it.
    let mut stuck = Client::connect(&r);
    stuck.s.write_all(&[0, 0, 0]).unwrap();
    good(&r);
    r.shutdown().unwrap();
}

#[test]
fn topics_and_high_watermarks_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let r = server(dir.path(), |_| {});
    let mut c = Client::connect(&r);
    metadata(&mut c, "kept", true);
    assert_eq!(produce(&mut c, "kept", 0, batch(&[b"a", b"b"], 1_700_000_000_000)), (0, 0));
    drop(c);
    r.shutdown().unwrap();
    assert!(dir.path().join(".kafka_cleanshutdown").exists());

    let r = server(dir.path(), |c| c.auto_create_topics = false);
    let mut c = Client::connect(&r);
    let m = metadata(&mut c, "kept", true);
    assert_eq!((m.topics[0].error_code, m.topics[0].partitions.len()), (0, 1));
    // The high watermark is the log end again: what was acknowledged is readable.
    let f = fetch(&mut c, "kept", 0, 0);
    assert_eq!(f.responses[0].partitions[0].high_watermark, 2);
    assert_eq!(produce(&mut c, "kept", 0, batch(&[b"c"], 1_700_000_000_010)), (0, 2));
    r.shutdown().unwrap();
}

fn init_pid(c: &mut Client, txn: &str, timeout_ms: i32) -> (i16, i64, i16) {
    let mut req = kafka_protocol::messages::InitProducerIdRequest::default();
    req.transactional_id = Some(kafka_protocol::messages::TransactionalId(StrBytes::from_string(txn.into())));
    req.transaction_timeout_ms = timeout_ms;
    req.producer_id = kafka_protocol::messages::ProducerId(-1);
    req.producer_epoch = -1;
    let r: kafka_protocol::messages::InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &req);
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

/// InitProducerId naming the producer's id and epoch (KIP-360).
fn init_pid_from(c: &mut Client, txn: &str, pid: i64, epoch: i16) -> (i16, i64, i16) {
    let mut req = kafka_protocol::messages::InitProducerIdRequest::default();
    req.transactional_id = Some(kafka_protocol::messages::TransactionalId(StrBytes::from_string(txn.into())));
    req.transaction_timeout_ms = 60_000;
    req.producer_id = kafka_protocol::messages::ProducerId(pid);
    req.producer_epoch = epoch;
    let r: kafka_protocol::messages::InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &req);
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

fn add_partition(c: &mut Client, txn: &str, pid: i64, epoch: i16, topic: &str, partition: i32) -> i16 {
    let mut t = kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
    t.name = name(topic);
    t.partitions = vec![partition];
    let mut req = kafka_protocol::messages::AddPartitionsToTxnRequest::default();
    req.v3_and_below_transactional_id = kafka_protocol::messages::TransactionalId(StrBytes::from_string(txn.into()));
    req.v3_and_below_producer_id = kafka_protocol::messages::ProducerId(pid);
    req.v3_and_below_producer_epoch = epoch;
    req.v3_and_below_topics = vec![t];
    let r: kafka_protocol::messages::AddPartitionsToTxnResponse = c.call(ApiKey::AddPartitionsToTxn, 3, &req);
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

fn end_txn(c: &mut Client, txn: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    let mut req = kafka_protocol::messages::EndTxnRequest::default();
    req.transactional_id = kafka_protocol::messages::TransactionalId(StrBytes::from_string(txn.into()));
    req.producer_id = kafka_protocol::messages::ProducerId(pid);
    req.producer_epoch = epoch;
    req.committed = commit;
    let r: kafka_protocol::messages::EndTxnResponse = c.call(ApiKey::EndTxn, 3, &req);
    r.error_code
}

/// A transactional batch stamped now: the markers are stamped now too, and a batch days older
/// than them would roll the segment (segment.ms), leaving the markers out of a fetch from 0.
fn txn_batch(pid: i64, epoch: i16, seq: i32, value: &[u8]) -> Vec<u8> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let mut b = BatchBuilder::new().producer(pid, epoch, seq).transactional(true);
    b.push(now, None, Some(value), &[]);
    b.build().unwrap()
}

#[test]
fn the_coordinator_fences_commits_aborts_and_keeps_its_state_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let r = server(dir.path(), |_| {});
    let mut c = Client::connect(&r);
    metadata(&mut c, "orders", true);
    let (code, pid, epoch) = init_pid(&mut c, "tx", 60_000);
    assert_eq!((code, epoch), (0, 0));
    assert_eq!(init_pid(&mut c, "tx", 60_000), (0, pid, 1), "a second instance bumps the epoch");
    assert_eq!(init_pid(&mut c, "tx", 0).0, 50, "INVALID_TRANSACTION_TIMEOUT");
    assert_eq!(init_pid(&mut c, "", 60_000).0, 42, "INVALID_REQUEST: an empty transactional id");
    // KIP-360: a producer bumping from its epoch gets the next; its retry gets the same; an
    // instance that held an older epoch is fenced.
    assert_eq!(init_pid_from(&mut c, "tx", pid, 1), (0, pid, 2));
    assert_eq!(init_pid_from(&mut c, "tx", pid, 1), (0, pid, 2), "a retry");
    assert_eq!(init_pid(&mut c, "tx", 60_000), (0, pid, 3), "a new instance, no epoch named");
    assert_eq!(init_pid_from(&mut c, "tx", pid, 1).0, 90, "the old instance is fenced");
    assert_eq!(init_pid_from(&mut c, "tx", pid, 2).0, 90, "so is the one before the new");
    let epoch = 3;
    assert_eq!(end_txn(&mut c, "tx", pid, epoch, true), 48, "INVALID_TXN_STATE: nothing begun");
    assert_eq!(add_partition(&mut c, "tx", pid, 1, "orders", 0), 90, "PRODUCER_FENCED: an old epoch");
    assert_eq!(add_partition(&mut c, "tx", pid + 1, 1, "orders", 0), 49, "INVALID_PRODUCER_ID_MAPPING");
    assert_eq!(add_partition(&mut c, "tx", pid, epoch, "orders", 9), 3);
    assert_eq!(add_partition(&mut c, "tx", pid, epoch, "orders", 0), 0);
    assert_eq!(produce(&mut c, "orders", 0, txn_batch(pid, epoch, 0, b"kept")), (0, 0));
    assert_eq!(end_txn(&mut c, "tx", pid, epoch, true), 0);
    assert_eq!(end_txn(&mut c, "tx", pid, epoch, true), 0, "a retried commit");
    assert_eq!(end_txn(&mut c, "tx", pid, epoch, false), 48, "abort after commit");
    // A second transaction left open across a restart.
    assert_eq!(add_partition(&mut c, "tx", pid, epoch, "orders", 0), 0);
    assert_eq!(produce(&mut c, "orders", 0, txn_batch(pid, epoch, 1, b"dropped")), (0, 2));
    let f = fetch(&mut c, "orders", 0, 1);
    assert_eq!(f.responses[0].partitions[0].last_stable_offset, 2, "the open transaction holds the LSO");
    assert_eq!(produce(&mut c, TXN_TOPIC_NAME, 0, batch(&[b"x"], 0)).0, 17, "the coordinator's topic");
    drop(c);
    r.shutdown().unwrap();

    let r = server(dir.path(), |_| {});
    let mut c = Client::connect(&r);
    // The state came back: the next instance is epoch 5, after the open transaction was
    // aborted under epoch 4 (fencing epoch 3) and the epoch bumped again.
    assert_eq!(init_pid(&mut c, "tx", 60_000), (0, pid, 5));
    let f = fetch(&mut c, "orders", 0, 1);
    let p = &f.responses[0].partitions[0];
    assert_eq!((p.high_watermark, p.last_stable_offset), (4, 4));
    let aborted = p.aborted_transactions.as_ref().unwrap();
    assert_eq!((aborted.len(), aborted[0].producer_id.0, aborted[0].first_offset), (1, pid, 2));
    drop(c);
    r.shutdown().unwrap();
    // The state partition holds Kafka's TransactionLogKey/Value records: `seglog verify` reads
    // it as any partition.
    assert!(dir.path().join("__transaction_state-0").is_dir());
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let r = server(dir.path(), |_| {});
    let mut c = Client::connect(&r);
    metadata(&mut c, "slow", true);
    let (_, pid, epoch) = init_pid(&mut c, "late", 100);
    assert_eq!(add_partition(&mut c, "late", pid, epoch, "slow", 0), 0);
    assert_eq!(produce(&mut c, "slow", 0, txn_batch(pid, epoch, 0, b"never")).0, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while fetch(&mut c, "slow", 0, 1).responses[0].partitions[0].last_stable_offset < 2 {
        assert!(std::time::Instant::now() < deadline, "not aborted within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let f = fetch(&mut c, "slow", 0, 1);
    assert_eq!(f.responses[0].partitions[0].aborted_transactions.as_ref().unwrap().len(), 1);
    assert_eq!(end_txn(&mut c, "late", pid, epoch, true), 90, "its producer is fenced");
    r.shutdown().unwrap();
}

fn delete_topic(c: &mut Client, topic: &str) -> i16 {
    let mut req = kafka_protocol::messages::DeleteTopicsRequest::default();
    req.topic_names = vec![name(topic)];
    req.timeout_ms = 30_000;
    let r: kafka_protocol::messages::DeleteTopicsResponse = c.call(ApiKey::DeleteTopics, 5, &req);
    r.responses[0].error_code
}

#[test]
fn deleted_topics_leave_no_directory_and_come_back_empty() {
    let dir = tempfile::tempdir().unwrap();
    let r = server(dir.path(), |c| c.default_partitions = 2);
    let mut c = Client::connect(&r);
    metadata(&mut c, "temp", true);
    assert_eq!(produce(&mut c, "temp", 1, batch(&[b"a", b"b"], 1_700_000_000_000)), (0, 0));
    // A long poll on the empty partition 0 (a minute; the read times out after 20 s).
    let mut poll = Client::connect(&r);
    let req = poll.request_bytes(ApiKey::Fetch, 12, &fetch_req("temp", 0, 0, 0, 60_000));
    poll.send_raw(&req);
    assert!(!answer_ready(&mut poll, Duration::from_millis(200)));
    assert_eq!(delete_topic(&mut c, "temp"), 0);
    assert!(!dir.path().join("temp-0").exists() && !dir.path().join("temp-1").exists());
    // The deletion answered it.
    let mut b = poll.read_answer(ApiKey::Fetch, 12).expect("the poll answered by the deletion");
    assert_eq!(FetchResponse::decode(&mut b, 12).unwrap().responses[0].partitions[0].error_code, 3);
    assert_eq!(metadata(&mut c, "temp", false).topics[0].error_code, 3);
    assert_eq!(produce(&mut c, "temp", 1, batch(&[b"c"], 1_700_000_000_000)).0, 3);
    assert_eq!(delete_topic(&mut c, "temp"), 3, "UNKNOWN_TOPIC_OR_PARTITION");
    assert_eq!(delete_topic(&mut c, TXN_TOPIC_NAME), 17, "the coordinator's topic stays");
    // Made again on first use: empty, offsets from 0.
    assert_eq!(metadata(&mut c, "temp", true).topics[0].partitions.len(), 2);
    assert_eq!(produce(&mut c, "temp", 1, batch(&[b"d"], 1_700_000_000_000)), (0, 0));
    drop(c);
    r.shutdown().unwrap();
}

/// Requests pipelined on one connection are answered in order, and a partition's appends land in
/// the order they were sent, whatever order the work finishes in.
#[test]
fn pipelined_requests_are_answered_in_order() {
    // With one network thread, and with several (a connection's tasks may then run on any).
    for threads in [1, 3] {
        pipelined_requests_are_answered_in_order_with(threads);
    }
}

fn pipelined_requests_are_answered_in_order_with(network_threads: usize) {
    let dir = tempfile::tempdir().unwrap();
    let r = server(dir.path(), |c| c.network_threads = network_threads);
    let mut c = Client::connect(&r);
    metadata(&mut c, "piped", true);
    let first = c.corr + 1;
    let mut kinds = Vec::new();
    let mut requests = Vec::new();
    for i in 0..40i64 {
        // Produces, with metadata requests between them (answered without waiting on a write).
        let (api, bytes) = if i % 5 == 4 {
            let mut t = kafka_protocol::messages::metadata_request::MetadataRequestTopic::default();
            t.name = Some(name("piped"));
            let mut req = MetadataRequest::default();
            req.topics = Some(vec![t]);
            (ApiKey::Metadata, c.request_bytes(ApiKey::Metadata, 12, &req))
        } else {
            let b = batch(&[format!("r{i}").as_bytes()], 1_700_000_000_000 + i);
            (ApiKey::Produce, c.request_bytes(ApiKey::Produce, 9, &produce_req("piped", 0, b)))
        };
        kinds.push(api);
        requests.push(bytes);
    }
    c.send_pipelined(&requests);
    let mut next_offset = 0;
    for (i, api) in kinds.into_iter().enumerate() {
        let version = if api == ApiKey::Produce { 9 } else { 12 };
        let (corr, mut b) = c.read_frame(api, version).unwrap();
        assert_eq!(corr, first + i as i32, "answer {i} out of order");
        if api == ApiKey::Produce {
            let p = ProduceResponse::decode(&mut b, version).unwrap();
            assert_eq!(p.responses[0].partition_responses[0].base_offset, next_offset);
            next_offset += 1;
        }
    }
    assert_eq!(next_offset, 32);
    drop(c);
    r.shutdown().unwrap();
}

/// A connection holds at most max_request_bytes of requests and answers: pipelined requests
/// past it wait for the answers before them to be written (no deadlock), a fetch answer holds
/// what is free of it, and a connection that announces a request and stalls holds nothing.
#[test]
fn a_connection_serves_everything_in_turn_within_its_memory() {
    let dir = tempfile::tempdir().unwrap();
    let r = server(dir.path(), |c| c.max_request_bytes = 64 << 10);
    // Stalled after announcing a request of the largest size: the others are served.
    let mut stalled = Client::connect(&r);
    stalled.s.write_all(&(64i32 << 10).to_be_bytes()).unwrap();
    let mut c = Client::connect(&r);
    metadata(&mut c, "tight", true);
    let first = c.corr + 1;
    let requests: Vec<Vec<u8>> = (0..12i64)
        .map(|i| {
            let b = batch(&[&vec![i as u8; 40_000]], 1_700_000_000_000 + i);
            c.request_bytes(ApiKey::Produce, 9, &produce_req("tight", 0, b))
        })
        .collect();
    c.send_pipelined(&requests);
    for i in 0..12 {
        let (corr, mut b) = c.read_frame(ApiKey::Produce, 9).unwrap();
        assert_eq!(corr, first + i);
        let p = ProduceResponse::decode(&mut b, 9).unwrap();
        assert_eq!(p.responses[0].partition_responses[0].base_offset, i as i64);
    }
    // 64 KiB of answer: one 40 KB batch (two would not fit).
    let f = fetch(&mut c, "tight", 0, 0);
    let records = f.responses[0].partitions[0].records.as_ref().unwrap();
    let batches = BatchCount::of(records);
    assert_eq!(batches, 1, "{} bytes", records.len());
    drop((c, stalled));
    r.shutdown().unwrap();
    // With room, several.
    let r = server(dir.path(), |_| {});
    let mut c = Client::connect(&r);
    let f = fetch(&mut c, "tight", 0, 0);
    assert_eq!(BatchCount::of(f.responses[0].partitions[0].records.as_ref().unwrap()), 12);
    drop(c);
    r.shutdown().unwrap();
}

/// Whether an answer is waiting to be read, looking for `within` (nothing is consumed).
fn answer_ready(c: &mut Client, within: Duration) -> bool {
    let until = std::time::Instant::now() + within;
    let ready = loop {
        let left = until.saturating_duration_since(std::time::Instant::now()).max(Duration::from_millis(1));
        c.s.set_read_timeout(Some(left)).unwrap();
        match c.s.peek(&mut [0u8; 1]) {
            // Interrupted (see `Client::closed`): look again for what is left of the time.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted && std::time::Instant::now() < until => continue,
            r => break r.is_ok_and(|n| n > 0),
        }
    };
    c.s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    ready
}

#[test]
fn a_long_poll_is_answered_by_an_append_to_its_partition_or_by_the_commit_that_makes_it_readable() {
    let dir = tempfile::tempdir().unwrap();
    let r = server(dir.path(), |c| c.default_partitions = 2);
    let mut producer = Client::connect(&r);
    metadata(&mut producer, "polled", true);
    let mut consumer = Client::connect(&r);
    // Far longer than the test may take: an answer before it comes from an append.
    const WAIT_MS: i32 = 60_000;
    let started = std::time::Instant::now();

    // Read uncommitted, partition 0: an append to partition 1 does not answer it.
    let req = consumer.request_bytes(ApiKey::Fetch, 12, &fetch_req("polled", 0, 0, 0, WAIT_MS));
    consumer.send_raw(&req);
    assert_eq!(produce(&mut producer, "polled", 1, batch(&[b"elsewhere"], 1_700_000_000_000)), (0, 0));
    assert!(!answer_ready(&mut consumer, Duration::from_millis(300)), "answered without data");
    assert_eq!(produce(&mut producer, "polled", 0, batch(&[b"here"], 1_700_000_000_000)), (0, 0));
    let mut b = consumer.read_answer(ApiKey::Fetch, 12).expect("an answer");
    let f = FetchResponse::decode(&mut b, 12).unwrap();
    assert_eq!(BatchCount::of(f.responses[0].partitions[0].records.as_ref().unwrap()), 1);

    // Read committed, partition 1, from the end: a transaction's batch is not readable yet, its
    // commit marker makes it so.
    let (code, pid, epoch) = init_pid(&mut producer, "poll-tx", 60_000);
    assert_eq!(code, 0);
    assert_eq!(add_partition(&mut producer, "poll-tx", pid, epoch, "polled", 1), 0);
    let req = consumer.request_bytes(ApiKey::Fetch, 12, &fetch_req("polled", 1, 1, 1, WAIT_MS));
    consumer.send_raw(&req);
    assert_eq!(produce(&mut producer, "polled", 1, txn_batch(pid, epoch, 0, b"pending")), (0, 1));
    assert!(!answer_ready(&mut consumer, Duration::from_millis(300)), "an uncommitted batch answered it");
    assert_eq!(end_txn(&mut producer, "poll-tx", pid, epoch, true), 0);
    let mut b = consumer.read_answer(ApiKey::Fetch, 12).expect("an answer");
    let f = FetchResponse::decode(&mut b, 12).unwrap();
    let p = &f.responses[0].partitions[0];
    assert_eq!(p.last_stable_offset, 3, "the batch and its marker");
    assert!(BatchCount::of(p.records.as_ref().unwrap()) >= 1);
    assert!(started.elapsed() < Duration::from_millis(WAIT_MS as u64 / 2), "answered at the deadline, not by the data");
    drop((producer, consumer));
    r.shutdown().unwrap();
}

/// Bytes a fetch of "spread" from offset 0 returns for each of `parts`, in that order.
fn fetch_parts(c: &mut Client, parts: &[i32], partition_max: i32, max_bytes: i32) -> Vec<usize> {
    let mut req = fetch_req("spread", 0, 0, 0, 0);
    req.max_bytes = max_bytes;
    req.topics[0].partitions = parts
        .iter()
        .map(|&i| {
            let mut p = fetch_request::FetchPartition::default();
            p.partition = i;
            p.partition_max_bytes = partition_max;
            p
        })
        .collect();
    let f: FetchResponse = c.call(ApiKey::Fetch, 12, &req);
    f.responses[0].partitions.iter().map(|p| p.records.as_ref().map_or(0, |r| r.len())).collect()
}

#[test]
fn a_fetchs_byte_limits_are_kafkas_whatever_the_partitions_before_return() {
    let dir = tempfile::tempdir().unwrap();
    let r = server(dir.path(), |c| c.default_partitions = 12);
    let mut c = Client::connect(&r);
    metadata(&mut c, "spread", true);
    // Partitions 1, 2, 10 and 11 get one batch of about 570 bytes; 3 one of about 2,070; the
    // others stay empty.
    let small = batch(&[&[7u8; 500]], 1_700_000_000_000);
    let big = batch(&[&[9u8; 2_000]], 1_700_000_000_000);
    for p in [1, 2, 10, 11] {
        assert_eq!(produce(&mut c, "spread", p, small.clone()), (0, 0));
    }
    assert_eq!(produce(&mut c, "spread", 3, big.clone()), (0, 0));
    let (s, b) = (small.len(), big.len());
    // Kafka's limit for each partition: min(partition max, max bytes less what the partitions
    // before it returned). The idle partition 0 costs the others nothing.
    assert_eq!(fetch_parts(&mut c, &[0, 1, 2], 1_000, 1_500), vec![0, s, s]);
    // What is left for partition 2 (1,000 - 570) is under its batch: nothing.
    assert_eq!(fetch_parts(&mut c, &[0, 1, 2], 1_000, 1_000), vec![0, s, 0]);
    // A batch over its partition's limit is returned as the answer's first records
    // (minOneMessage), even after an idle partition, and not after other records.
    assert_eq!(fetch_parts(&mut c, &[0, 3, 1], 1_000, 1 << 20), vec![0, b, s]);
    assert_eq!(fetch_parts(&mut c, &[0, 1, 2, 3], 1_000, 1 << 20), vec![0, s, s, 0]);
    assert_eq!(fetch_parts(&mut c, &[1, 3], 1_000, 1 << 20), vec![s, 0]);
    // After a first batch over its limit, what is left of max bytes (2,000 - 2,070: nothing)
    // bounds the partitions after it.
    assert_eq!(fetch_parts(&mut c, &[3, 1], 1_000, 2_000), vec![b, 0]);
    // Every partition may take the whole budget: each gets what the records before it leave
    // (1: 2,000; 2: 1,430; 3: 860, under its batch; 10: 860; 11: 290, under its batch), and
    // the empty ones in between cost nothing.
    let all: Vec<i32> = (0..12).collect();
    assert_eq!(fetch_parts(&mut c, &all, 2_000, 2_000), vec![0, s, s, 0, 0, 0, 0, 0, 0, 0, s, 0]);
    // Unknown partitions cost nothing either.
    assert_eq!(fetch_parts(&mut c, &[40, 41, 42, 1], 2_000, 2_000), vec![0, 0, 0, s]);
    // A max_bytes of 0 or less is 0, as Kafka takes it: the first partition with records
    // returns its first batch (minOneMessage), the others nothing.
    for max in [0, -7] {
        assert_eq!(fetch_parts(&mut c, &[0, 1, 2], 1_000, max), vec![0, s, 0], "max_bytes {max}");
    }
    // A negative partition_max_bytes: where there are records to read, refused as Kafka's
    // segment read refuses it (UNKNOWN_SERVER_ERROR), and the fetch answers at once; at the end
    // of the partition (1) it waits as any fetch there, and past it (5) it is out of range.
    for (offset, want, waits) in [(0i64, -1i16, false), (1, 0, true), (5, 1, false)] {
        let mut req = fetch_req("spread", 1, offset, 0, 2_000);
        req.topics[0].partitions[0].partition_max_bytes = -1;
        let started = std::time::Instant::now();
        let f: FetchResponse = c.call(ApiKey::Fetch, 12, &req);
        let took = started.elapsed();
        let p = &f.responses[0].partitions[0];
        assert_eq!((p.error_code, p.records.as_ref().map_or(0, |r| r.len())), (want, 0), "offset {offset}");
        assert_eq!(took >= Duration::from_millis(1_900), waits, "offset {offset}: {took:?}");
    }
    drop(c);
    r.shutdown().unwrap();
}
