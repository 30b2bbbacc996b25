//! The state the engine owns for its wings, one file per part, below everything that uses
//! it: [`crate::engine::Engine`] holds one of each, and each wing reaches its own through
//! the engine's accessors. None of these modules names the engine or a wing.
//!
//! - [`governance`]: context governance's windows, token counters, inflation guards and
//!   compactions asked for (the chat wing's).
//! - [`sessions`]: the session store and one lock per session guarding its cached log (the
//!   session wing's).
//! - [`pass_queue`]: the journal of queued write-path passes, and how many run at once (the
//!   write wing's); [`locks`]: one lock per conversation, so its passes run one at a time.
//! - [`usage`]: the upstream tokens and cost of answers (the chat wing's).
//! - [`index_queue`]: the turns written and not yet indexed, drained a batch at a time
//!   (the index's); [`deferred_keys`]: the conversations whose key upkeep waits for the
//!   end of their write-path pass (the index's, set by the write wing).
//! - [`revisions`]: the engines over the store as it was at recent revisions (searches as
//!   of a revision).

pub(crate) mod deferred_keys;
pub(crate) mod governance;
pub(crate) mod index_queue;
pub(crate) mod locks;
pub(crate) mod pass_queue;
pub(crate) mod revisions;
pub(crate) mod sessions;
pub(crate) mod usage;
