//! BM25 term weights, computed the way Qdrant does (so the Qdrant-server backend can share
//! them): Unicode word tokens, lower-cased, English stop words removed, Snowball-stemmed;
//! term ids are murmur3 hashes. Documents get saturated term frequencies
//! `tf·(k1+1) / (tf + k1·(1 − b + b·len/avg_len))`; queries get weight 1 per distinct term.
//! The index supplies the IDF factor.

use ordered_float::NotNan;
use qdrant_edge::bm25_embed::{EdgeBm25, EdgeBm25Config};

use crate::{IndexError, SparseVector};

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

/// Turns text into the sparse vectors lexical search works on.
#[derive(Debug)]
pub struct LexicalEncoder {
    bm25: EdgeBm25,
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
        let bm25 = EdgeBm25::new(config).map_err(|e| IndexError::Backend(e.to_string()))?;
        Ok(Self { bm25 })
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
    fn repeated_terms_saturate() {
        let lexical = LexicalEncoder::new(LexicalOptions::default()).unwrap();
        let once = lexical.document("pizza");
        let thrice = lexical.document("pizza pizza pizza");
        assert!(thrice.values[0] > once.values[0]);
        assert!(thrice.values[0] < 3.0 * once.values[0]);
    }
}
