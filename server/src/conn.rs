//! Connections: Kafka's framing (a 4-byte big-endian size, then the request), requests handled as
//! they arrive, answers written in request order (Kafka's rule for a connection).
//!
//! A client pipelines requests (librdkafka keeps up to five produce requests in flight per
//! connection), so a request does not wait for the one before it to be answered: the reader
//! starts each request's work (a produce's appends go to the engine's shards at once, in arrival
//! order, which keeps a partition's batches in order) and hands the writer a future for its
//! answer; the writer awaits them in order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::handlers;
use crate::State;

/// How much of a request body is read (and its memory taken) at a time.
const CHUNK: usize = 64 * 1024;

/// Permits of a connection's memory budget for `bytes`: one per KiB.
pub(crate) fn kib(bytes: usize) -> u32 {
    bytes.div_ceil(1024).min(u32::MAX as usize) as u32
}

/// Requests of one connection being handled or answered at once; the reader waits past it.
const MAX_IN_FLIGHT: usize = 64;

/// An answer to come: a frame (size included), or nothing (acks=0 produce, or a request that
/// could not be answered and closes the connection).
pub(crate) enum Answer {
    Now(Option<Bytes>),
    /// A task's answer; an error closes the connection (an answer that could not be encoded).
    Later(tokio::task::JoinHandle<Result<Option<Bytes>, String>>),
    /// Write what came before, then close: the request could not be parsed, so no answer in its
    /// format can be built (Kafka closes the connection too).
    Close(String),
}

pub(crate) async fn accept_loop(
    listener: std::net::TcpListener,
    state: Arc<State>,
    stop: impl std::future::Future<Output = ()>,
) -> crate::Result<()> {
    tokio::pin!(stop);
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|source| crate::ServerError::Io { what: "listener".into(), source })?;
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    // Out of descriptors and the like: the next accept may work.
                    Err(e) => {
                        eprintln!("seglog serve: accept: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                };
                if open.fetch_add(1, Ordering::AcqRel) >= state.config.max_connections {
                    open.fetch_sub(1, Ordering::AcqRel);
                    eprintln!("seglog serve: refusing {peer}: {} connections open", state.config.max_connections);
                    drop(stream);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let (state, open) = (state.clone(), open.clone());
                tokio::spawn(async move {
                    if let Err(why) = serve(stream, state).await {
                        eprintln!("seglog serve: closing {peer}: {why}");
                    }
                    open.fetch_sub(1, Ordering::AcqRel);
                });
            }
        }
    }
}

/// Serves one connection until the client closes it or sends something unanswerable.
async fn serve(stream: TcpStream, state: Arc<State>) -> Result<(), String> {
    let (rd, wr) = stream.into_split();
    // The connection's memory: `max_request_bytes`, in KiB permits.
    let budget = Arc::new(Semaphore::new(kib(state.config.max_request_bytes) as usize));
    // Each answer travels with the memory permits of its request, released once it is written.
    let (tx, mut rx) = mpsc::channel::<(Answer, Option<OwnedSemaphorePermit>)>(MAX_IN_FLIGHT);
    let writer = tokio::spawn(async move {
        // Answers ready together go out in one write: they are buffered, and the buffer is
        // flushed whenever the next answer is not ready yet (nothing waits behind a flush).
        let mut out = BufWriter::with_capacity(64 * 1024, wr);
        let gone = |e: std::io::Error| match e.kind() {
            // The client went away before its answer: nothing to tell it.
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => None,
            _ => Some(format!("write: {e}")),
        };
        loop {
            let (answer, _request_memory) = match rx.try_recv() {
                Ok(a) => a,
                Err(mpsc::error::TryRecvError::Empty) => {
                    if let Err(e) = out.flush().await {
                        return gone(e).map_or(Ok(()), Err);
                    }
                    match rx.recv().await {
                        Some(a) => a,
                        None => break,
                    }
                }
                Err(mpsc::error::TryRecvError::Disconnected) => break,
            };
            let frame = match answer {
                Answer::Now(f) => f,
                Answer::Later(h) => {
                    if !h.is_finished() {
                        if let Err(e) = out.flush().await {
                            return gone(e).map_or(Ok(()), Err);
                        }
                    }
                    match h.await.map_err(|e| format!("a request's handler failed: {e}")).and_then(|r| r) {
                        Ok(f) => f,
                        Err(why) => {
                            // The answers before it still go out.
                            let _ = out.flush().await;
                            return Err(why);
                        }
                    }
                }
                Answer::Close(why) => {
                    let _ = out.flush().await;
                    return Err(why);
                }
            };
            if let Some(frame) = frame {
                if let Err(e) = out.write_all(&frame).await {
                    return gone(e).map_or(Ok(()), Err);
                }
            }
        }
        out.flush().await.or_else(|e| gone(e).map_or(Ok(()), Err))
    });
    let mut rd = BufReader::with_capacity(64 * 1024, rd);
    let read = async {
        loop {
            let size = match rd.read_i32().await {
                Ok(n) => n,
                // The client went away: the usual end of a connection.
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset) =>
                {
                    return Ok(())
                }
                Err(e) => return Err(format!("read: {e}")),
            };
            // Kafka's InvalidReceiveException: the size alone says the frame is unacceptable.
            if size < 0 || size as usize > state.config.max_request_bytes {
                let why = format!(
                    "a request of {size} bytes (socket.request.max.bytes is {})",
                    state.config.max_request_bytes
                );
                let _ = tx.send((Answer::Close(why), None)).await;
                return Ok(());
            }
            // The body is read, and its memory taken from the connection's budget, a chunk at a
            // time as it arrives: a size word alone holds nothing, and the buffer is never larger
            // than the request.
            let size = size as usize;
            let mut body = Vec::new();
            let mut permit: Option<OwnedSemaphorePermit> = None;
            while body.len() < size {
                let chunk = (size - body.len()).min(CHUNK);
                let more = budget
                    .clone()
                    .acquire_many_owned(kib(chunk))
                    .await
                    .map_err(|e| format!("the connection's memory budget: {e}"))?;
                match permit.as_mut() {
                    Some(p) => p.merge(more),
                    None => permit = Some(more),
                }
                // Read into the spare capacity (no zeroing pass over bytes about to be
                // overwritten); `reserve_exact` keeps the buffer at the request's size.
                let end = body.len() + chunk;
                body.reserve_exact(chunk);
                while body.len() < end {
                    let n = (&mut rd)
                        .take((end - body.len()) as u64)
                        .read_buf(&mut body)
                        .await
                        .map_err(|e| format!("read: {e}"))?;
                    if n == 0 {
                        return Err(format!("the connection ended inside a request of {size} bytes"));
                    }
                }
            }
            let answer = handlers::dispatch(&state, Bytes::from(body), &budget);
            let close = matches!(answer, Answer::Close(_));
            if tx.send((answer, permit)).await.is_err() || close {
                return Ok(());
            }
        }
    };
    let r = read.await;
    drop(tx);
    let w = writer.await.map_err(|e| format!("writer: {e}"))?;
    r.and(w)
}
