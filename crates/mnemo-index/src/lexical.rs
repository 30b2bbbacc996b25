//! BM25 term weights, computed the way Qdrant does (so the Qdrant-server backend can share
//! them): Unicode word tokens, lower-cased, English stop words removed, Snowball-stemmed;
//! term ids are murmur3 hashes. Documents get saturated term frequencies
//! `tf·(k1+1) / (tf + k1·(1 − b + b·len/avg_len))`; queries get weight 1 per distinct term.
//! The index supplies the IDF factor. A document may be made of weighted parts
//! ([`LexicalEncoder::weighted_document`]): a word of a part with weight 0.5 counts half.

use ordered_float::NotNan;
use qdrant_edge::bm25_embed::{EdgeBm25, EdgeBm25Config};

use crate::vector_index::{IndexError, SparseVector};

/// BM25 parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LexicalOptions {
    /// Term-frequency saturation.
    pub k1: f64,
    /// Length normalisation: 0 none, 1 full.
    pub b: f64,
    /// Typical length of a text, in tokens after stop-word removal.
    pub avg_len: f64,
}

impl Default for LexicalOptions {
    fn default() -> Self {
        Self {
            k1: 1.2,
            b: 0.75,
            avg_len: 256.0,
        }
    }
}

/// `k1` of the counting tokeniser: large enough that `n·(k1+1)/(k1+n)` rounds to `n`.
const COUNTING_K1: f64 = 1e12;

/// Turns text into the sparse vectors lexical search works on.
#[derive(Debug)]
pub struct LexicalEncoder {
    bm25: EdgeBm25,
    /// The same tokeniser with saturation and length normalisation off (`k1` huge, `b = 0`):
    /// its document weights are the terms' counts.
    counter: EdgeBm25,
    options: LexicalOptions,
}

impl LexicalEncoder {
    /// An encoder with these BM25 parameters; a NaN parameter is an error.
    pub fn new(options: LexicalOptions) -> Result<Self, IndexError> {
        let not_nan = |name: &str, v: f64| {
            NotNan::new(v).map_err(|_| IndexError::Backend(format!("BM25 {name} is NaN")))
        };
        let config = EdgeBm25Config {
            k: not_nan("k1", options.k1)?,
            b: not_nan("b", options.b)?,
            avg_len: not_nan("avg_len", options.avg_len)?,
            ..EdgeBm25Config::default()
        };
        let counting = EdgeBm25Config {
            k: not_nan("k1", COUNTING_K1)?,
            b: not_nan("b", 0.0)?,
            ..config.clone()
        };
        let build = |c| EdgeBm25::new(c).map_err(|e| IndexError::Backend(e.to_string()));
        Ok(Self {
            bm25: build(config)?,
            counter: build(counting)?,
            options,
        })
    }

    /// Term weights of a text made of weighted parts: each part's term counts are scaled by
    /// its weight, and so is its length, before BM25's saturation. With every weight 1 this
    /// is [`document`](Self::document) of the parts joined. Parts with a weight that is not
    /// positive and finite are left out.
    pub fn weighted_document(&self, parts: &[(&str, f32)]) -> SparseVector {
        let mut counts: std::collections::BTreeMap<u32, f64> = Default::default();
        let mut length = 0.0f64;
        for &(text, weight) in parts {
            if !(weight.is_finite() && weight > 0.0) {
                continue;
            }
            let v = self.counter.embed_document(text);
            for (id, count) in v.indices.into_iter().zip(v.values) {
                let count = f64::from(count.round()) * f64::from(weight);
                *counts.entry(id).or_default() += count;
                length += count;
            }
        }
        let LexicalOptions { k1, b, avg_len } = self.options;
        let norm = k1 * (1.0 - b + b * length / avg_len);
        let (indices, values) = counts
            .into_iter()
            .map(|(id, n)| (id, (n * (k1 + 1.0) / (n + norm)) as f32))
            .unzip();
        SparseVector { indices, values }
    }

    /// Term weights of a memory's text.
    pub fn document(&self, text: &str) -> SparseVector {
        let v = self.bm25.embed_document(text);
        SparseVector {
            indices: v.indices,
            values: v.values,
        }
    }

    /// Terms of a query.
    pub fn query(&self, text: &str) -> SparseVector {
        let v = self.bm25.embed_query(text);
        SparseVector {
            indices: v.indices,
            values: v.values,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_and_drops_stop_words() {
        let lexical = LexicalEncoder::new(LexicalOptions::default()).unwrap();
        let a = lexical.query("the runners were running");
        let b = lexical.query("runner runs");
        assert_eq!(a.indices.len(), 2, "{a:?}");
        assert_eq!(a.indices, b.indices, "stemmed forms share ids");
        assert!(lexical.query("the and of").is_empty());
    }

    #[test]
    fn weighted_parts_count_their_words_by_their_weight() {
        let lexical = LexicalEncoder::new(LexicalOptions::default()).unwrap();
        let text = "pizza in Naples, pizza in Rome";
        let joined = lexical.document(&format!("{text}\nthe best pasta"));
        let parts = lexical.weighted_document(&[(text, 1.0), ("the best pasta", 1.0)]);
        assert_eq!(joined.indices, parts.indices);
        for (a, b) in joined.values.iter().zip(&parts.values) {
            assert!((a - b).abs() < 1e-6, "{joined:?} {parts:?}");
        }
        let half = lexical.weighted_document(&[(text, 1.0), ("the best pasta", 0.5)]);
        let weight = |v: &SparseVector, word: &str| {
            let id = lexical.query(word).indices[0];
            v.indices.iter().position(|&i| i == id).map(|i| v.values[i])
        };
        assert!(weight(&half, "pasta").unwrap() < weight(&parts, "pasta").unwrap());
        assert!(weight(&half, "pizza").unwrap() > weight(&half, "naples").unwrap());
        let nothing = lexical.weighted_document(&[(text, 0.0), ("pasta", f32::NAN)]);
        assert!(nothing.is_empty());
    }

    #[test]
    fn repeated_terms_saturate() {
        let lexical = LexicalEncoder::new(LexicalOptions::default()).unwrap();
        let once = lexical.document("pizza");
        let thrice = lexical.document("pizza pizza pizza");
        assert!(thrice.values[0] > once.values[0]);
        assert!(thrice.values[0] < 3.0 * once.values[0]);
    }
}
