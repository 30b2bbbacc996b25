//! What an upstream call cost, from the prices bundled with `genai-prices` (the data the
//! window table reads, [`crate::window`]).

use genai_prices::{Calculator, PriceRequest, Usage, UsageKey};

use crate::window::split_provider;

/// The price in US dollars of a call to `model` that read `prompt_tokens` and wrote
/// `completion_tokens`, when the bundled data prices the model. Names are matched as the
/// window table matches them: whole, then with a provider in front (`openai:gpt-4.1`) as
/// that provider's model, then bare.
pub fn price_usd(model: &str, prompt_tokens: u64, completion_tokens: u64) -> Option<f64> {
    let model = model.trim();
    if model.is_empty() {
        return None;
    }
    let usage = Usage::from([
        (UsageKey::INPUT_TOKENS, prompt_tokens as f64),
        (UsageKey::OUTPUT_TOKENS, completion_tokens as f64),
    ]);
    price_of(model, None, &usage).or_else(|| {
        let (provider, name) = split_provider(model)?;
        price_of(name, Some(provider), &usage).or_else(|| price_of(name, None, &usage))
    })
}

fn price_of(model: &str, provider: Option<&str>, usage: &Usage) -> Option<f64> {
    let mut request = PriceRequest::new(model, usage);
    if let Some(provider) = provider {
        request = request.with_provider_id(provider);
    }
    let price = Calculator::bundled().calculate(&request).ok()?.total_price;
    price.is_finite().then_some(price)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_are_priced_by_their_tokens_and_unknown_ones_are_not() {
        let million = price_usd("gpt-4o", 1_000_000, 0).unwrap();
        assert!(million > 0.5 && million < 50.0, "{million}");
        let both = price_usd("gpt-4o", 1_000_000, 1_000_000).unwrap();
        assert!(both > million, "output costs too: {both} vs {million}");
        assert_eq!(price_usd("gpt-4o", 0, 0), Some(0.0));
        let prefixed = price_usd("openai:gpt-4o", 1_000_000, 0).unwrap();
        assert!((prefixed - million).abs() < 1e-9);
        assert_eq!(price_usd("qwen2.5-coder-1.5b-instruct", 1000, 1000), None);
        assert_eq!(price_usd(" ", 1000, 1000), None);
    }
}
