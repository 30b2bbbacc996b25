//! Searches as of a git revision through the client.

use crate::api_types::AsOfSearch;
use crate::client::MemoryClient;
use crate::error::EngineError;
use crate::retrieval::SearchRequest;

impl MemoryClient {
    /// [`search`](Self::search) over the memories as they were at git revision `rev`
    /// (anything git resolves to a commit: a hash or a prefix of one, `HEAD~3`, a branch).
    /// The first question about a revision indexes its memories in an engine of its own
    /// (see `crate::as_of`); the last two revisions' engines are kept. Recency is
    /// measured from the commit's time unless the request sets `now`.
    ///
    /// A store without git versioning is [`EngineError::InvalidInput`]; a revision that
    /// names no commit is [`EngineError::NotFound`].
    pub async fn search_as_of(
        &self,
        rev: &str,
        request: SearchRequest,
    ) -> Result<AsOfSearch, EngineError> {
        self.engine.as_of().search_as_of(rev, request).await
    }

    /// Closes the engines kept for searches as of a revision and removes their folders
    /// (once searches still running on them finish); the next such search opens one again.
    /// A server calls it on shutdown.
    pub fn close_revisions(&self) {
        self.engine.as_of().close_revisions()
    }
}
