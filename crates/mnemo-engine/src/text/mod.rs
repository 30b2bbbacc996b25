//! How mnemo reads what people wrote, with no model: the rules of English the write path and
//! the read path rely on, each stated as a rule of the language and tested on sentences of
//! its own.
//!
//! - [`words`]: words (contractions kept whole), stems, names, sentences, function words.
//! - [`clauses`]: a message clause by clause: whom each speaks of, what it denies or only
//!   supposes, whether it asks.
//! - [`subjects`]: whom a stored fact is about ("The user ...", "The user's sister ...").
//! - [`grounding`]: whether an extracted fact stands on the user's words, said of the same
//!   person and in the same way.
//! - [`changes`]: what a message says stopped or corrects, and which facts that retracts.
//! - [`summary_check`]: the sentences of a rewritten summary that still say what was
//!   retracted, or give someone else's trait to the user.
//! - [`low_information`]: whether a turn says anything of its own.
//! - [`dates`]: the dates a text names ("last Friday", "in March"), resolved against the day
//!   it was said.

pub mod changes;
pub mod clauses;
pub mod dates;
pub mod grounding;
pub mod low_information;
pub mod subjects;
pub mod summary_check;
pub mod words;
