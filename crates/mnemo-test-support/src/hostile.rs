//! Inputs nobody wrote by hand, for the property tests of every parser of untrusted input:
//! a valid document, then mutated the ways files and requests go wrong — cut short, bytes
//! flipped or inserted (invalid UTF-8 included), a part repeated into a huge document, and
//! nesting thousands deep.
//!
//! The suite runs [`cases`] cases per property with a fixed seed ([`config`]), so a run is
//! the same on every machine; `MNEMO_PROPERTY_CASES=100000 cargo test --workspace hostile`
//! runs a longer search, and `MNEMO_PROPERTY_SEED` another seed.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

/// The seed of the suite's run, unless `MNEMO_PROPERTY_SEED` names another.
pub const SEED: u64 = 0x6d6e_656d_6f21;

/// Cases per property: 256 in the suite, `MNEMO_PROPERTY_CASES` for a longer run.
pub fn cases() -> u32 {
    std::env::var("MNEMO_PROPERTY_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256)
}

/// The runner's configuration: [`cases`] cases from a fixed seed, no regression files
/// written into the checkout (a failure prints its input, shrunk).
pub fn config() -> Config {
    let seed = std::env::var("MNEMO_PROPERTY_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SEED);
    Config {
        cases: cases(),
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    }
}

/// The largest document a mutation makes: past the store's 1 MiB file limit, small enough
/// that four compounding repeats stay cheap.
pub const MAX_DOCUMENT_BYTES: usize = 4 << 20;

/// One way a document goes wrong.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Cut at this share of its length (a torn write, a truncated download).
    Truncate(f64),
    /// This byte put at this share of its length (a stray character, invalid UTF-8).
    Insert(f64, u8),
    /// The byte at this share of its length replaced.
    Replace(f64, u8),
    /// This text put at this share of its length (a field, a delimiter, a quote).
    Splice(f64, String),
    /// The bytes from one share to another, there this many times in all (a huge document).
    Repeat(f64, f64, usize),
    /// The whole document nested this deep in `open`/`close` (brackets, braces, indents).
    Nest(usize, &'static str, &'static str),
}

impl Mutation {
    fn at(share: f64, len: usize) -> usize {
        ((share.clamp(0.0, 1.0) * len as f64) as usize).min(len)
    }

    /// `document` with this mutation applied.
    pub fn apply(&self, mut document: Vec<u8>) -> Vec<u8> {
        let len = document.len();
        match self {
            Mutation::Truncate(share) => document.truncate(Self::at(*share, len)),
            Mutation::Insert(share, byte) => document.insert(Self::at(*share, len), *byte),
            Mutation::Replace(share, byte) => {
                if len > 0 {
                    document[Self::at(*share, len - 1)] = *byte;
                }
            }
            Mutation::Splice(share, text) => {
                let at = Self::at(*share, len);
                document.splice(at..at, text.bytes());
            }
            Mutation::Repeat(from, to, times) => {
                let (a, b) = (Self::at(*from, len), Self::at(*to, len));
                let (a, b) = (a.min(b), a.max(b));
                let part = document[a..b].to_vec();
                let tail = document.split_off(b);
                // The part is there once already; repeats compound, so the document is
                // kept under MAX_DOCUMENT_BYTES.
                let room = MAX_DOCUMENT_BYTES.saturating_sub(len) / part.len().max(1);
                for _ in 1..(*times).min(room + 1) {
                    document.extend_from_slice(&part);
                }
                document.extend(tail);
            }
            Mutation::Nest(depth, open, close) => {
                let mut nested = open.repeat(*depth).into_bytes();
                nested.extend(document);
                nested.extend(close.repeat(*depth).into_bytes());
                return nested;
            }
        }
        document
    }
}

/// Texts a parser is likely to trip on, spliced into documents.
const SPLICES: &[&str] = &[
    "---\n",
    "\n---\n",
    ": ",
    "- ",
    "\"",
    "'",
    "{",
    "}",
    "[",
    "]",
    "&a ",
    "*a ",
    "!!binary ",
    "\u{0}",
    "\u{feff}",
    "\r\n",
    "\\u0000",
    "null",
    "1e999",
    "-1",
    "18446744073709551616",
    "../../etc/passwd",
    "%",
];

/// One mutation.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    let share = 0.0..=1.0f64;
    prop_oneof![
        share.clone().prop_map(Mutation::Truncate),
        (share.clone(), any::<u8>()).prop_map(|(s, b)| Mutation::Insert(s, b)),
        (share.clone(), any::<u8>()).prop_map(|(s, b)| Mutation::Replace(s, b)),
        (share.clone(), prop::sample::select(SPLICES))
            .prop_map(|(s, t)| Mutation::Splice(s, t.to_owned())),
        (share.clone(), "\\PC{0,40}").prop_map(|(s, t)| Mutation::Splice(s, t)),
        (share.clone(), share, 1..2_000usize).prop_map(|(a, b, n)| Mutation::Repeat(a, b, n)),
        (
            1..5_000usize,
            prop::sample::select(&[("[", "]"), ("{\"a\":", "}"), ("- ", ""), ("a:\n ", "")][..])
        )
            .prop_map(|(depth, (open, close))| Mutation::Nest(depth, open, close)),
    ]
}

/// `base` with one to four mutations applied, in order.
pub fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(mutation(), 1..=4).prop_map(move |mutations| {
        mutations
            .iter()
            .fold(base.clone(), |document, mutation| mutation.apply(document))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_do_what_they_say() {
        let doc = b"abcdef".to_vec();
        assert_eq!(Mutation::Truncate(0.5).apply(doc.clone()), b"abc");
        assert_eq!(Mutation::Insert(0.0, b'x').apply(doc.clone()), b"xabcdef");
        assert_eq!(Mutation::Replace(1.0, b'x').apply(doc.clone()), b"abcdex");
        assert_eq!(
            Mutation::Repeat(0.0, 0.5, 2).apply(doc.clone()),
            b"abcabcdef"
        );
        assert_eq!(Mutation::Nest(2, "[", "]").apply(b"1".to_vec()), b"[[1]]");
        assert_eq!(Mutation::Splice(1.0, "!".into()).apply(doc), b"abcdef!");
    }
}
