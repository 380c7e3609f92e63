//! [`InFlight`]: operations submitted without waiting, with what their submitter must know when
//! they end. The one in-flight type of the write path: a log's data writes and a segment's zero
//! fill both hold their batch in one.

use super::{AsyncIo, AsyncOutcome, Storage};

/// A batch from [`Storage::submit_async`] and its submitter's note about it (`meta`: the recovery
/// point its fsync advances, the range it zeroes...). Claim it with [`InFlight::poll`] on the storage that
/// submitted it.
#[derive(Debug)]
pub(crate) struct InFlight<M> {
    io: AsyncIo,
    meta: M,
}

impl<M> InFlight<M> {
    pub(crate) fn new(io: AsyncIo, meta: M) -> InFlight<M> {
        InFlight { io, meta }
    }

    pub(crate) fn meta(&self) -> &M {
        &self.meta
    }

    /// The note and the batch's outcome once it is done (with `wait`, blocking until then), or
    /// the batch back while it is in flight.
    pub(crate) fn poll(self, storage: &dyn Storage, wait: bool) -> Result<(M, AsyncOutcome), InFlight<M>> {
        let InFlight { io, meta } = self;
        match storage.claim_async(io, wait) {
            Ok(outcome) => Ok((meta, outcome)),
            Err(io) => Err(InFlight { io, meta }),
        }
    }
}

/// Polls the batch in `slot`, if any: its note and outcome once done (the slot is then empty),
/// else `None` with the batch left in place.
pub(crate) fn poll_slot<M>(
    slot: &mut Option<InFlight<M>>,
    storage: &dyn Storage,
    wait: bool,
) -> Option<(M, AsyncOutcome)> {
    match slot.take()?.poll(storage, wait) {
        Ok(done) => Some(done),
        Err(back) => {
            *slot = Some(back);
            None
        }
    }
}

/// [`poll_slot`] for the oldest of a queue of batches claimed in order.
pub(crate) fn poll_front<M>(
    queue: &mut std::collections::VecDeque<InFlight<M>>,
    storage: &dyn Storage,
    wait: bool,
) -> Option<(M, AsyncOutcome)> {
    match queue.pop_front()?.poll(storage, wait) {
        Ok(done) => Some(done),
        Err(back) => {
            queue.push_front(back);
            None
        }
    }
}
