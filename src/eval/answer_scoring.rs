//! Scoring for the LoCoMo answer benchmark (`mnemo eval locomo --answer`): how an answer
//! generated from mnemo's memory of a conversation is graded against the dataset's gold
//! answer, and the prompts the benchmark asks and grades with.
//!
//! Two graders:
//!
//! - Token F1, with the rules of LoCoMo's own evaluation code (`task_eval/evaluation.py` in
//!   the LoCoMo repository of snap-research), followed exactly: [`normalize_answer`] is its
//!   `normalize_answer`, [`f1_score`] its `f1_score` (tokens stemmed by NLTK's
//!   `PorterStemmer`, reimplemented here as [`porter_stem`]), [`multi_answer_f1`] its
//!   multi-answer `f1`, and [`score_f1`] the category handling of its
//!   `eval_question_answering`. The only departures are where Python's Unicode tables and
//!   Rust's differ (which characters are letters or spaces), which no English answer meets.
//! - An LLM judge, as published memory systems report their LoCoMo accuracy:
//!   [`JUDGE_PROMPT`] (lenient: the answer must be about the same fact),
//!   [`STRICT_JUDGE_PROMPT`] (the answer must state the fact), [`judge_messages`] to ask and
//!   [`parse_judge`] to read the verdict.
//!
//! Also the system prompt each question is answered with ([`ANSWER_PROMPT`]), a short hash
//! that records which prompt text a run used ([`prompt_hash`]), and the sampler that picks a
//! subset of questions spread over the categories ([`stratified_sample`]). Latency
//! percentiles use `eval::percentile`.
//!
//! Categories are the dataset's: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
//! 5 adversarial (unanswerable from the conversation).

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------------------
// Token F1 (LoCoMo's rules)
// ---------------------------------------------------------------------------------------

/// LoCoMo's answer normalisation: commas removed, lower case, ASCII punctuation removed,
/// the words `a`, `an`, `the` and `and` removed as whole words, and runs of whitespace
/// collapsed to one space (none at either end).
///
/// In that order, as in LoCoMo: punctuation goes before the articles, so "a.m." loses its
/// dots and survives as "am", and "Hello,world" becomes "helloworld". A whole word is a
/// maximal run of letters, digits and `_` (Python's `\b`).
pub fn normalize_answer(s: &str) -> String {
    let lowered = s.replace(',', "").to_lowercase();
    let no_punct: String = lowered
        .chars()
        .filter(|c| !c.is_ascii_punctuation())
        .collect();
    let no_articles = remove_articles(&no_punct);
    py_split(&no_articles).collect::<Vec<_>>().join(" ")
}

/// `regex.sub(r'\b(a|an|the|and)\b', ' ', text)`: a match is exactly a maximal run of word
/// characters that is one of the four words.
fn remove_articles(text: &str) -> String {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if is_word(c) {
            let end = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
            let word = &rest[..end];
            match word {
                "a" | "an" | "the" | "and" => out.push(' '),
                _ => out.push_str(word),
            }
            rest = &rest[end..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Python's `str.split()`: splits on whitespace (which for Python also includes the ASCII
/// separators U+001C to U+001F), dropping empty pieces.
fn py_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
        .filter(|w| !w.is_empty())
}

/// The tokens F1 counts: the normalised answer's words, Porter-stemmed.
fn answer_tokens(s: &str) -> Vec<String> {
    py_split(&normalize_answer(s)).map(porter_stem).collect()
}

/// LoCoMo's `f1_score`: token-level F1 between a prediction and one gold answer, over
/// [`normalize_answer`]'s words stemmed by [`porter_stem`]. Common tokens count with
/// multiplicity (the smaller of the two counts, as `Counter & Counter`). 0 when either side
/// has no tokens or they share none.
pub fn f1_score(prediction: &str, gold: &str) -> f64 {
    let predicted = answer_tokens(prediction);
    let expected = answer_tokens(gold);
    let mut counts: HashMap<&str, (usize, usize)> = HashMap::new();
    for t in &predicted {
        counts.entry(t.as_str()).or_default().0 += 1;
    }
    for t in &expected {
        counts.entry(t.as_str()).or_default().1 += 1;
    }
    let same: usize = counts.values().map(|&(p, g)| p.min(g)).sum();
    if same == 0 {
        return 0.0;
    }
    let precision = same as f64 / predicted.len() as f64;
    let recall = same as f64 / expected.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

/// LoCoMo's multi-answer `f1` (used for multi-hop questions): prediction and gold are both
/// split on `,`; each gold part scores the best [`f1_score`] of any prediction part, and the
/// result is the mean over the gold parts.
pub fn multi_answer_f1(prediction: &str, gold: &str) -> f64 {
    let predictions: Vec<&str> = prediction.split(',').map(str::trim).collect();
    let golds: Vec<&str> = gold.split(',').map(str::trim).collect();
    let total: f64 = golds
        .iter()
        .map(|g| {
            predictions
                .iter()
                .map(|p| f1_score(p, g))
                .fold(0.0, f64::max)
        })
        .sum();
    total / golds.len() as f64
}

/// The F1 score of one answer, by the question's category, as LoCoMo's
/// `eval_question_answering` computes it:
///
/// - 1 (multi-hop): [`multi_answer_f1`];
/// - 2 (temporal), 4 (single-hop): [`f1_score`];
/// - 3 (open-domain): [`f1_score`] against the gold answer's part before its first `;`
///   (trimmed: the gold answers add their reasoning after it);
/// - 5 (adversarial): 1.0 when the lower-cased prediction says "no information available"
///   or "not mentioned" (the question cannot be answered from the conversation), else 0.0;
///   `gold` is not used.
///
/// `gold` is the dataset's answer as text (LoCoMo takes `str()` of it: a year stored as a
/// number is its digits). LoCoMo's script refuses other categories; here they score as
/// single-hop.
pub fn score_f1(category: u8, prediction: &str, gold: &str) -> f64 {
    match category {
        1 => multi_answer_f1(prediction, gold),
        3 => f1_score(prediction, gold.split(';').next().unwrap_or("").trim()),
        5 => {
            let p = prediction.to_lowercase();
            if p.contains("no information available") || p.contains("not mentioned") {
                1.0
            } else {
                0.0
            }
        }
        _ => f1_score(prediction, gold),
    }
}

// ---------------------------------------------------------------------------------------
// Porter stemmer, as NLTK's `PorterStemmer()` (its default `NLTK_EXTENSIONS` mode)
// ---------------------------------------------------------------------------------------

/// Words NLTK maps straight to a stem, bypassing the steps.
const IRREGULAR_FORMS: &[(&str, &str)] = &[
    ("sky", "sky"),
    ("skies", "sky"),
    ("dying", "die"),
    ("lying", "lie"),
    ("tying", "tie"),
    ("news", "news"),
    ("innings", "inning"),
    ("inning", "inning"),
    ("outings", "outing"),
    ("outing", "outing"),
    ("cannings", "canning"),
    ("canning", "canning"),
    ("howe", "howe"),
    ("proceed", "proceed"),
    ("exceed", "exceed"),
    ("succeed", "succeed"),
];

/// Stems one word with the Porter (1980) algorithm as NLTK's `PorterStemmer()` runs it
/// (the one LoCoMo's F1 uses), which differs from the paper in a few documented places:
/// a table of irregular forms (`dying` → `die`, `skies` → `sky`, ...), words of one or two
/// characters left as they are, `ies`/`ied` → `ie` in four-letter words (`dies` → `die`)
/// and `ied` → `i` otherwise, `y` → `i` only after a consonant that is not the word's first
/// letter (`happy` → `happi`, `enjoy` → `enjoy`), `alli` → `al` tried first and step 2
/// rerun, `bli` → `ble`, `fulli` → `ful`, `logi` → `log`, and the `*o` test also true of
/// a two-letter vowel-consonant stem. The word is lower-cased first; any character other
/// than `a e i o u y` counts as a consonant.
pub fn porter_stem(word: &str) -> String {
    let lower = word.to_lowercase();
    if let Some((_, stem)) = IRREGULAR_FORMS.iter().find(|(w, _)| *w == lower) {
        return (*stem).to_owned();
    }
    let w: Vec<char> = lower.chars().collect();
    if w.len() <= 2 {
        return lower;
    }
    let w = step1a(w);
    let w = step1b(w);
    let w = step1c(w);
    let w = step2(w);
    let w = step3(w);
    let w = step4(w);
    let w = step5a(w);
    let w = step5b(w);
    w.into_iter().collect()
}

/// Whether `w[i]` is a consonant: not `a e i o u`, and a `y` only at the start or after a
/// vowel.
fn is_consonant(w: &[char], i: usize) -> bool {
    match w[i] {
        'a' | 'e' | 'i' | 'o' | 'u' => false,
        'y' => {
            // A run of y's alternates, starting from what precedes the run.
            let mut start = i;
            while start > 0 && w[start - 1] == 'y' {
                start -= 1;
            }
            let first_is_consonant =
                start == 0 || matches!(w[start - 1], 'a' | 'e' | 'i' | 'o' | 'u');
            first_is_consonant == (i - start).is_multiple_of(2)
        }
        _ => true,
    }
}

/// The measure m of a stem, `[C](VC){m}[V]`: how many vowel-consonant transitions it has.
fn measure(w: &[char]) -> usize {
    (1..w.len())
        .filter(|&i| !is_consonant(w, i - 1) && is_consonant(w, i))
        .count()
}

fn contains_vowel(w: &[char]) -> bool {
    (0..w.len()).any(|i| !is_consonant(w, i))
}

/// `*d`: the word ends with a double consonant.
fn ends_double_consonant(w: &[char]) -> bool {
    let n = w.len();
    n >= 2 && w[n - 1] == w[n - 2] && is_consonant(w, n - 1)
}

/// `*o`: the word ends consonant-vowel-consonant, the last not `w`, `x` or `y`; or (NLTK)
/// it is a vowel and a consonant.
fn ends_cvc(w: &[char]) -> bool {
    let n = w.len();
    (n >= 3
        && is_consonant(w, n - 3)
        && !is_consonant(w, n - 2)
        && is_consonant(w, n - 1)
        && !matches!(w[n - 1], 'w' | 'x' | 'y'))
        || (n == 2 && !is_consonant(w, 0) && is_consonant(w, 1))
}

fn ends_with(w: &[char], suffix: &str) -> bool {
    let n = suffix.chars().count();
    n <= w.len() && w[w.len() - n..].iter().copied().eq(suffix.chars())
}

/// `w` less its last `n` characters, plus `tail`.
fn replace_end(w: &[char], n: usize, tail: &str) -> Vec<char> {
    let mut out = w[..w.len() - n].to_vec();
    out.extend(tail.chars());
    out
}

/// When a rule's suffix may go.
#[derive(Clone, Copy)]
enum Cond {
    Always,
    /// m(stem) > 0
    Measure0,
    /// m(stem) > 1
    Measure1,
    /// m(stem) > 1 and the stem ends in `s` or `t` (`ion`)
    MeasureST,
    /// m of the word less `ogi` > 0 (NLTK's `logi` rule keeps the `l` with the stem)
    Logi,
}

/// NLTK's `_apply_rule_list`: the first rule whose suffix the word ends with decides; if its
/// condition fails, no later rule is tried.
fn apply_rules(w: Vec<char>, rules: &[(&str, &str, Cond)]) -> Vec<char> {
    for &(suffix, replacement, cond) in rules {
        if !ends_with(&w, suffix) {
            continue;
        }
        let n = suffix.chars().count();
        let stem = &w[..w.len() - n];
        let ok = match cond {
            Cond::Always => true,
            Cond::Measure0 => measure(stem) > 0,
            Cond::Measure1 => measure(stem) > 1,
            Cond::MeasureST => measure(stem) > 1 && matches!(stem.last(), Some('s' | 't')),
            Cond::Logi => measure(&w[..w.len() - 3]) > 0,
        };
        return if ok {
            replace_end(&w, n, replacement)
        } else {
            w
        };
    }
    w
}

/// Plurals: `sses` → `ss`, `ies` → `i` (`ie` in a four-letter word), `ss` stays, `s` goes.
fn step1a(w: Vec<char>) -> Vec<char> {
    if w.len() == 4 && ends_with(&w, "ies") {
        return replace_end(&w, 3, "ie");
    }
    apply_rules(
        w,
        &[
            ("sses", "ss", Cond::Always),
            ("ies", "i", Cond::Always),
            ("ss", "ss", Cond::Always),
            ("s", "", Cond::Always),
        ],
    )
}

/// `-eed`, `-ed`, `-ing`, and the tidying after the last two.
fn step1b(w: Vec<char>) -> Vec<char> {
    if ends_with(&w, "ied") {
        let tail = if w.len() == 4 { "ie" } else { "i" };
        return replace_end(&w, 3, tail);
    }
    if ends_with(&w, "eed") {
        return if measure(&w[..w.len() - 3]) > 0 {
            replace_end(&w, 3, "ee")
        } else {
            w
        };
    }
    let stem = ["ed", "ing"].iter().find_map(|suffix| {
        let n = suffix.len();
        (ends_with(&w, suffix) && contains_vowel(&w[..w.len() - n]))
            .then(|| w[..w.len() - n].to_vec())
    });
    let Some(stem) = stem else {
        return w;
    };
    if ends_with(&stem, "at") || ends_with(&stem, "bl") || ends_with(&stem, "iz") {
        return replace_end(&stem, 0, "e");
    }
    if ends_double_consonant(&stem) {
        return if matches!(stem.last(), Some('l' | 's' | 'z')) {
            stem
        } else {
            stem[..stem.len() - 1].to_vec()
        };
    }
    if measure(&stem) == 1 && ends_cvc(&stem) {
        return replace_end(&stem, 0, "e");
    }
    stem
}

/// `y` → `i` after a consonant that is not the word's first letter.
fn step1c(w: Vec<char>) -> Vec<char> {
    let n = w.len();
    if n > 2 && w[n - 1] == 'y' && is_consonant(&w[..n - 1], n - 2) {
        return replace_end(&w, 1, "i");
    }
    w
}

/// Double suffixes to single ones (`-ational` → `-ate`, ...), when m(stem) > 0.
fn step2(w: Vec<char>) -> Vec<char> {
    if ends_with(&w, "alli") && measure(&w[..w.len() - 4]) > 0 {
        return step2(replace_end(&w, 4, "al"));
    }
    use Cond::Measure0 as M;
    apply_rules(
        w,
        &[
            ("ational", "ate", M),
            ("tional", "tion", M),
            ("enci", "ence", M),
            ("anci", "ance", M),
            ("izer", "ize", M),
            ("bli", "ble", M),
            ("alli", "al", M),
            ("entli", "ent", M),
            ("eli", "e", M),
            ("ousli", "ous", M),
            ("ization", "ize", M),
            ("ation", "ate", M),
            ("ator", "ate", M),
            ("alism", "al", M),
            ("iveness", "ive", M),
            ("fulness", "ful", M),
            ("ousness", "ous", M),
            ("aliti", "al", M),
            ("iviti", "ive", M),
            ("biliti", "ble", M),
            ("fulli", "ful", M),
            ("logi", "log", Cond::Logi),
        ],
    )
}

/// `-icate`, `-ative`, `-ful`, `-ness`, ..., when m(stem) > 0.
fn step3(w: Vec<char>) -> Vec<char> {
    use Cond::Measure0 as M;
    apply_rules(
        w,
        &[
            ("icate", "ic", M),
            ("ative", "", M),
            ("alize", "al", M),
            ("iciti", "ic", M),
            ("ical", "ic", M),
            ("ful", "", M),
            ("ness", "", M),
        ],
    )
}

/// `-ant`, `-ence`, `-ment`, ..., when m(stem) > 1.
fn step4(w: Vec<char>) -> Vec<char> {
    use Cond::Measure1 as M;
    apply_rules(
        w,
        &[
            ("al", "", M),
            ("ance", "", M),
            ("ence", "", M),
            ("er", "", M),
            ("ic", "", M),
            ("able", "", M),
            ("ible", "", M),
            ("ant", "", M),
            ("ement", "", M),
            ("ment", "", M),
            ("ent", "", M),
            ("ion", "", Cond::MeasureST),
            ("ou", "", M),
            ("ism", "", M),
            ("ate", "", M),
            ("iti", "", M),
            ("ous", "", M),
            ("ive", "", M),
            ("ize", "", M),
        ],
    )
}

/// A final `e` goes when m > 1, or m = 1 and the stem does not end `*o`.
fn step5a(w: Vec<char>) -> Vec<char> {
    if ends_with(&w, "e") {
        let stem = &w[..w.len() - 1];
        let m = measure(stem);
        if m > 1 || (m == 1 && !ends_cvc(stem)) {
            return stem.to_vec();
        }
    }
    w
}

/// `ll` → `l` when m > 1.
fn step5b(w: Vec<char>) -> Vec<char> {
    if ends_with(&w, "ll") && measure(&w[..w.len() - 1]) > 1 {
        return w[..w.len() - 1].to_vec();
    }
    w
}

// ---------------------------------------------------------------------------------------
// Prompts and the LLM judge
// ---------------------------------------------------------------------------------------

/// The system prompt each benchmark question is answered with; `{today}` is the date the
/// question is asked on (the conversation's last session).
/// Short answers keep token F1 meaningful; the fixed "not mentioned" phrase is what LoCoMo
/// scores as the right answer to an adversarial question.
pub const ANSWER_PROMPT: &str = "\
You answer questions about a long conversation between two people, from your memory of \
that conversation.

- Answer with a short phrase that names the fact asked for: a few words, not a sentence, \
with no explanation.
- Give dates as dates (for example \"2 March 2021\" or \"October 2019\"), never as \"yesterday\" \
or \"last week\": work them out from when things were said.
- If the conversation does not say, answer exactly: Not mentioned in the conversation

Today's date is {today}.";

/// The usual lenient LLM judge of published memory systems' LoCoMo results: the generated
/// answer is CORRECT when it is about the same fact as the gold answer, whatever its
/// length, wording or date format. A template with `{question}`, `{gold}` and `{answer}`,
/// for [`judge_messages`]; the judge replies in JSON, read by [`parse_judge`].
pub const JUDGE_PROMPT: &str = "\
Grade an answer to a question about a conversation. You are given the question, the gold \
answer (the reference) and the generated answer to grade.

Label the generated answer CORRECT if it touches on the same topic or fact as the gold \
answer, and WRONG if it does not. Be generous: a longer answer, different wording or extra \
detail is fine as long as it refers to what the gold answer says. Dates and times may be \
written in any format (\"2 March 2021\", \"March 2nd, 2021\", \"2021-03-02\") or relative to \
another date, as long as they refer to the same date or period as the gold answer. An \
answer that says the information is not available is WRONG.

Question: {question}
Gold answer: {gold}
Generated answer: {answer}

Reply with JSON only, giving a one-sentence reason and then the label: \
{\"reason\": \"...\", \"label\": \"CORRECT\"} or {\"reason\": \"...\", \"label\": \"WRONG\"}";

/// A strict LLM judge: like [`JUDGE_PROMPT`], but the generated answer must state the gold
/// fact; a vague, hedged or partial answer (a broader category, several candidates,
/// "around" or "maybe" something, some of several items) is WRONG. Same placeholders and
/// reply.
pub const STRICT_JUDGE_PROMPT: &str = "\
Grade an answer to a question about a conversation. You are given the question, the gold \
answer (the reference) and the generated answer to grade.

Label the generated answer CORRECT only if it states the fact the gold answer gives, and \
WRONG otherwise. Wording, length and extra correct detail do not matter, and dates may be \
written in any format (\"2 March 2021\", \"March 2nd, 2021\", \"2021-03-02\") as long as they \
name the same date. But a vague, hedged or partial answer is WRONG: one that names only a \
broader category than the gold answer (\"a pet\" for \"a dog\", \"in 2021\" for \"2 March \
2021\"), offers several candidates of which the gold answer is one, says \"around\", \
\"maybe\", \"probably\" or the like instead of committing to the fact, or gives only some \
of the things a gold answer lists. An answer that says the information is not available \
is WRONG.

Question: {question}
Gold answer: {gold}
Generated answer: {answer}

Reply with JSON only, giving a one-sentence reason and then the label: \
{\"reason\": \"...\", \"label\": \"CORRECT\"} or {\"reason\": \"...\", \"label\": \"WRONG\"}";

/// The OpenAI chat messages that ask a judge about one answer: `prompt` (a judge template,
/// [`JUDGE_PROMPT`] or [`STRICT_JUDGE_PROMPT`]) with the question, gold answer and generated
/// answer filled in, as a single user message.
pub fn judge_messages(prompt: &str, question: &str, gold: &str, answer: &str) -> Value {
    let content = fill(
        prompt,
        &[
            ("{question}", question),
            ("{gold}", gold),
            ("{answer}", answer),
        ],
    );
    json!([{ "role": "user", "content": content }])
}

/// Reads a judge's verdict: `Some(true)` for CORRECT, `Some(false)` for WRONG. The label is
/// taken from a JSON object's `"label"` (the reply may wrap the object in prose or a code
/// fence; the last object with a recognised label wins); failing that, from the last
/// occurrence of the word CORRECT or WRONG in the text, case-insensitive and as a whole word
/// ("incorrect" is neither). `None` when neither is found.
pub fn parse_judge(text: &str) -> Option<bool> {
    let read_label = |label: &str| match label.trim().to_ascii_uppercase().as_str() {
        "CORRECT" => Some(true),
        "WRONG" => Some(false),
        _ => None,
    };
    let from_json = text
        .match_indices('{')
        .filter_map(|(i, _)| {
            serde_json::Deserializer::from_str(&text[i..])
                .into_iter::<Value>()
                .next()?
                .ok()
        })
        .filter_map(|v| v.get("label")?.as_str().and_then(read_label))
        .next_back();
    if from_json.is_some() {
        return from_json;
    }
    text.split(|c: char| !c.is_alphanumeric())
        .filter_map(read_label)
        .next_back()
}

/// Fills a template's placeholders in one pass, so text filled in is never read as a
/// placeholder itself.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    'scan: while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        for (key, value) in values {
            if let Some(after) = rest.strip_prefix(key) {
                out.push_str(value);
                rest = after;
                continue 'scan;
            }
        }
        out.push('{');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

/// A short name for a prompt's text, recorded with results so runs with different prompts
/// are not compared by mistake: the first 12 hex digits of its SHA-256.
pub fn prompt_hash(text: &str) -> String {
    let mut hex = format!("{:x}", Sha256::digest(text.as_bytes()));
    hex.truncate(12);
    hex
}

// ---------------------------------------------------------------------------------------
// Sampling
// ---------------------------------------------------------------------------------------

/// Picks `n` questions spread over the categories in proportion to how many each has, for a
/// run on a subset. `questions_by_category` gives each category's number of questions; the
/// result gives, for every category in it, the positions (0-based, in that category's own
/// order) of its picked questions, sorted.
///
/// Each category's share of `n` is its exact proportional share rounded by largest
/// remainder (ties to the larger category, then the lower category number). When `n` is at
/// least the number of non-empty categories, each gets at least one pick: one taken from
/// the category with the most (ties to the lower number). `n` at or above the total picks
/// every question. Within a category the picks are drawn without replacement by a seeded
/// generator (SplitMix64), so a seed always gives the same sample, and a category's picks
/// depend only on the seed, the category and its share.
pub fn stratified_sample(
    questions_by_category: &BTreeMap<u8, usize>,
    n: usize,
    seed: u64,
) -> BTreeMap<u8, Vec<usize>> {
    let quotas = category_quotas(questions_by_category, n);
    questions_by_category
        .iter()
        .map(|(&category, &count)| {
            let quota = quotas.get(&category).copied().unwrap_or(0);
            let mut rng = SplitMix64(seed ^ (u64::from(category) + 1).wrapping_mul(GOLDEN_GAMMA));
            // A partial Fisher-Yates shuffle: the first `quota` places are the sample.
            let mut positions: Vec<usize> = (0..count).collect();
            for i in 0..quota {
                let j = i + rng.below((count - i) as u64) as usize;
                positions.swap(i, j);
            }
            positions.truncate(quota);
            positions.sort_unstable();
            (category, positions)
        })
        .collect()
}

/// How many questions each category gives to a sample of `n` (see [`stratified_sample`]).
fn category_quotas(counts: &BTreeMap<u8, usize>, n: usize) -> BTreeMap<u8, usize> {
    let total: usize = counts.values().sum();
    if n >= total {
        return counts.clone();
    }
    // Exact share n·count/total: whole part now, the remainders decide the rest.
    let mut quotas: BTreeMap<u8, usize> = BTreeMap::new();
    let mut remainders = Vec::new();
    for (&category, &count) in counts {
        let scaled = n as u128 * count as u128;
        quotas.insert(category, (scaled / total as u128) as usize);
        remainders.push((scaled % total as u128, count, category));
    }
    let left = n - quotas.values().sum::<usize>();
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    for &(_, _, category) in remainders.iter().take(left) {
        *quotas
            .get_mut(&category)
            .expect("every category has a quota") += 1;
    }
    // At least one per non-empty category, when there are enough picks to go round. A
    // category with none exists only if another has two or more, since the quotas sum to n.
    let non_empty = counts.values().filter(|&&c| c > 0).count();
    if n >= non_empty {
        let starved: Vec<u8> = counts
            .iter()
            .filter(|&(c, &count)| count > 0 && quotas[c] == 0)
            .map(|(&c, _)| c)
            .collect();
        for category in starved {
            let (&richest, _) = quotas
                .iter()
                .rev()
                .max_by_key(|&(_, &q)| q)
                .expect("some category has picks");
            *quotas.get_mut(&richest).expect("present") -= 1;
            *quotas.get_mut(&category).expect("present") += 1;
        }
    }
    quotas
}

const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64 (Steele, Lea and Flood): small, fast, and good enough to shuffle with.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw from `0..bound` (`bound` > 0), by rejection so no value is favoured.
    fn below(&mut self, bound: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % bound;
        loop {
            let x = self.next();
            if x < zone {
                return x % bound;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn normalisation_follows_locomo() {
        assert_eq!(
            normalize_answer("The cat and a dog, an apple!"),
            "cat dog apple"
        );
        assert_eq!(normalize_answer("Hello,world"), "helloworld");
        assert_eq!(normalize_answer("  Mother's   Day\t\n"), "mothers day");
        // Whole words only; punctuation goes first, so "a.m." is the word "am".
        assert_eq!(normalize_answer("Theater and Andes"), "theater andes");
        assert_eq!(normalize_answer("9 a.m. (A-B)"), "9 am ab");
        assert_eq!(normalize_answer("THE Band"), "band");
        assert_eq!(normalize_answer("a"), "");
        assert_eq!(normalize_answer("Café the crème"), "café crème");
        assert_eq!(normalize_answer(""), "");
    }

    #[test]
    fn porter_classic_examples() {
        // Porter's paper's examples, with NLTK's outputs where it departs from them.
        for (word, stem) in [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("ties", "tie"), // NLTK: four-letter -ies
            ("caress", "caress"),
            ("cats", "cat"),
            ("feed", "feed"),
            ("agreed", "agre"),
            ("plastered", "plaster"),
            ("bled", "bled"),
            ("motoring", "motor"),
            ("sing", "sing"),
            ("conflated", "conflat"),
            ("troubled", "troubl"),
            ("sized", "size"),
            ("hopping", "hop"),
            ("tanned", "tan"),
            ("falling", "fall"),
            ("hissing", "hiss"),
            ("fizzed", "fizz"),
            ("failing", "fail"),
            ("filing", "file"),
            ("happy", "happi"),
            ("sky", "sky"),
            ("relational", "relat"),
            ("conditional", "condit"),
            ("rational", "ration"),
            ("valenci", "valenc"),
            ("hesitanci", "hesit"),
            ("digitizer", "digit"),
            ("conformabli", "conform"),
            ("radicalli", "radic"),
            ("differentli", "differ"),
            ("vileli", "vile"),
            ("analogousli", "analog"),
            ("vietnamization", "vietnam"),
            ("predication", "predic"),
            ("operator", "oper"),
            ("feudalism", "feudal"),
            ("decisiveness", "decis"),
            ("hopefulness", "hope"),
            ("callousness", "callous"),
            ("formaliti", "formal"),
            ("sensitiviti", "sensit"),
            ("sensibiliti", "sensibl"),
            ("triplicate", "triplic"),
            ("formative", "form"),
            ("formalize", "formal"),
            ("electriciti", "electr"),
            ("electrical", "electr"),
            ("hopeful", "hope"),
            ("goodness", "good"),
            ("revival", "reviv"),
            ("allowance", "allow"),
            ("inference", "infer"),
            ("airliner", "airlin"),
            ("gyroscopic", "gyroscop"),
            ("adjustable", "adjust"),
            ("defensible", "defens"),
            ("irritant", "irrit"),
            ("replacement", "replac"),
            ("adjustment", "adjust"),
            ("dependent", "depend"),
            ("adoption", "adopt"),
            ("homologou", "homolog"),
            ("communism", "commun"),
            ("activate", "activ"),
            ("angulariti", "angular"),
            ("homologous", "homolog"),
            ("effective", "effect"),
            ("bowdlerize", "bowdler"),
            ("probate", "probat"),
            ("rate", "rate"),
            ("cease", "ceas"),
            ("controll", "control"),
            ("roll", "roll"),
            ("generalizations", "gener"),
            ("oscillators", "oscil"),
        ] {
            assert_eq!(porter_stem(word), stem, "{word}");
        }
    }

    #[test]
    fn porter_nltk_extensions() {
        for (word, stem) in [
            ("dying", "die"),
            ("skies", "sky"),
            ("news", "news"),
            ("dies", "die"),
            ("flies", "fli"),
            ("died", "die"),
            ("spied", "spi"),
            ("enjoy", "enjoy"),
            ("spy", "spi"),
            ("by", "by"),
            ("is", "is"),
            ("as", "as"),
            ("yes", "ye"),
            ("likely", "like"),
            ("may", "may"),
            ("running", "run"),
            ("studies", "studi"),
            ("geology", "geolog"),
            ("Running", "run"),
            ("2023", "2023"),
            ("yyyy", "yyyi"),
            ("sayying", "sayi"),
        ] {
            assert_eq!(porter_stem(word), stem, "{word}");
        }
    }

    #[test]
    fn f1_worked_examples() {
        // Same tokens in another order and format.
        assert!(close(f1_score("2 March 2021", "March 2, 2021"), 1.0));
        // {2022} against {in, 2022}: P = 1, R = 1/2, F1 = 2/3 ("in" is not an article).
        assert!(close(f1_score("in 2022", "2022"), 2.0 / 3.0));
        assert!(close(f1_score("2022", "in 2022"), 2.0 / 3.0));
        assert!(close(f1_score("The year 2022.", "2022"), 2.0 / 3.0));
        // {red, car} against {red, bike}: one in common, P = R = 1/2.
        assert!(close(f1_score("the red car", "a red bike"), 0.5));
        // Multiplicity: {dog×2, cat} & {dog, cat×2} = 2 common, P = R = 2/3.
        assert!(close(f1_score("dog dog cat", "dog cat cat"), 2.0 / 3.0));
        // Stemming: running → run, shoes → shoe.
        assert!(close(f1_score("Running shoes", "run shoe"), 1.0));
        // {paint} against {paint, at, sunset} ("at" stays): P = 1, R = 1/3, F1 = 1/2.
        assert!(close(f1_score("painting", "painting at sunset"), 0.5));
        assert_eq!(f1_score("", "anything"), 0.0);
        assert_eq!(f1_score("anything", ""), 0.0);
        assert_eq!(f1_score("the", "a"), 0.0);
        assert_eq!(f1_score("cat", "dog"), 0.0);
    }

    #[test]
    fn multi_answer_means_best_match_per_gold_part() {
        assert!(close(
            multi_answer_f1("painting, hiking, swimming", "Hiking, painting"),
            1.0
        ));
        // beach: 1; mountains: 0 → 0.5.
        assert!(close(multi_answer_f1("beach", "beach, mountains"), 0.5));
        // "pottery class": best 2/3 (against "pottery"); "camping trip": 1 → (2/3 + 1) / 2.
        assert!(close(
            multi_answer_f1("pottery, camping trip", "pottery class, camping trip"),
            (2.0 / 3.0 + 1.0) / 2.0
        ));
        assert_eq!(multi_answer_f1("", "a, b"), 0.0);
        // Without commas it is plain F1.
        assert!(close(multi_answer_f1("red car", "red bike"), 0.5));
    }

    #[test]
    fn score_by_category() {
        let gold = "Likely yes; she enjoys hiking";
        // 3: only "likely yes" counts → {like, ye} against {ye}: P = 1, R = 1/2.
        assert!(close(score_f1(3, "yes", gold), 2.0 / 3.0));
        assert!(close(score_f1(3, "Likely yes", gold), 1.0));
        // 4: all of it (";" is punctuation) → 5 gold tokens, P = 1, R = 1/5.
        assert!(close(score_f1(4, "yes", gold), 1.0 / 3.0));
        assert!(close(score_f1(2, "2 March 2021", "March 2, 2021"), 1.0));
        assert!(close(score_f1(1, "beach", "beach, mountains"), 0.5));
        // 5: the phrase, not the gold answer.
        assert_eq!(score_f1(5, "Not mentioned in the conversation", "x"), 1.0);
        assert_eq!(score_f1(5, "NO INFORMATION AVAILABLE.", "x"), 1.0);
        assert_eq!(score_f1(5, "That was never mentioned", "x"), 0.0);
        assert_eq!(score_f1(5, "It is not mentioned.", "x"), 1.0);
        assert_eq!(score_f1(5, "x", "x"), 0.0);
    }

    #[test]
    fn judge_messages_fill_the_template_once() {
        let messages = judge_messages(
            "Q: {question} G: {gold} A: {answer} {\"label\": \"CORRECT\"}",
            "What is {gold}?",
            "a dog",
            "{answer}",
        );
        assert_eq!(
            messages,
            json!([{
                "role": "user",
                "content": "Q: What is {gold}? G: a dog A: {answer} {\"label\": \"CORRECT\"}"
            }])
        );
        for prompt in [JUDGE_PROMPT, STRICT_JUDGE_PROMPT] {
            let text = judge_messages(prompt, "QQ", "GG", "AA")[0]["content"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(text.contains("Question: QQ\nGold answer: GG\nGenerated answer: AA"));
            assert!(!text.contains("{question}") && !text.contains("{gold}"));
        }
        let prompt = fill(ANSWER_PROMPT, &[("{today}", "2 March 2021")]);
        assert!(prompt.ends_with("Today's date is 2 March 2021."));
        assert!(prompt.contains("Not mentioned in the conversation"));
    }

    #[test]
    fn judge_verdicts() {
        assert_eq!(parse_judge(r#"{"label": "CORRECT"}"#), Some(true));
        assert_eq!(
            parse_judge(r#"{"reason": "x", "label": "wrong"}"#),
            Some(false)
        );
        assert_eq!(
            parse_judge(
                "Sure.\n```json\n{\"reason\": \"Not CORRECT.\", \"label\": \"WRONG\"}\n```"
            ),
            Some(false)
        );
        // The JSON label wins over words around it.
        assert_eq!(
            parse_judge(r#"WRONG? No: {"label": "CORRECT"}"#),
            Some(true)
        );
        // Free text: the last CORRECT/WRONG word.
        assert_eq!(
            parse_judge("At first it looks wrong, but it is correct."),
            Some(true)
        );
        assert_eq!(parse_judge("Label: WRONG"), Some(false));
        // A JSON label that is neither: the words decide.
        assert_eq!(parse_judge(r#"{"label": "PARTIAL"} so WRONG"#), Some(false));
        assert_eq!(parse_judge("The answer is incorrect."), None);
        assert_eq!(parse_judge("{not json"), None);
        assert_eq!(parse_judge(""), None);
    }

    #[test]
    fn prompt_hashes() {
        // sha256("") = e3b0c44298fc1c149afbf4c8996fb924...
        assert_eq!(prompt_hash(""), "e3b0c44298fc");
        assert_eq!(prompt_hash(JUDGE_PROMPT).len(), 12);
        assert_ne!(prompt_hash(JUDGE_PROMPT), prompt_hash(STRICT_JUDGE_PROMPT));
    }

    fn locomo_counts() -> BTreeMap<u8, usize> {
        BTreeMap::from([(1, 282), (2, 321), (3, 96), (4, 841), (5, 446)])
    }

    fn sizes(sample: &BTreeMap<u8, Vec<usize>>) -> Vec<(u8, usize)> {
        sample.iter().map(|(&c, v)| (c, v.len())).collect()
    }

    #[test]
    fn sample_is_proportional_by_largest_remainder() {
        // Shares of 100: 14.20, 16.16, 4.83, 42.35, 22.46 → floors 98; the two largest
        // remainders (.83, .46) take the last two.
        let sample = stratified_sample(&locomo_counts(), 100, 7);
        assert_eq!(
            sizes(&sample),
            vec![(1, 14), (2, 16), (3, 5), (4, 42), (5, 23)]
        );
        for (c, picks) in &sample {
            let count = locomo_counts()[c];
            assert!(
                picks.windows(2).all(|w| w[0] < w[1]),
                "sorted, no duplicates"
            );
            assert!(picks.iter().all(|&i| i < count));
        }
    }

    #[test]
    fn sample_gives_each_category_one_when_it_can() {
        let counts = BTreeMap::from([(1, 1000), (2, 1), (3, 0)]);
        // Shares 9.99 and 0.01: 10 and 0, then one moves to category 2.
        assert_eq!(
            sizes(&stratified_sample(&counts, 10, 1)),
            vec![(1, 9), (2, 1), (3, 0)]
        );
        // Fewer picks than categories: by remainder, ties to the lower category.
        let even = BTreeMap::from([(1, 5), (2, 5), (3, 5)]);
        assert_eq!(
            sizes(&stratified_sample(&even, 2, 1)),
            vec![(1, 1), (2, 1), (3, 0)]
        );
        assert_eq!(
            sizes(&stratified_sample(&even, 0, 1)),
            vec![(1, 0), (2, 0), (3, 0)]
        );
        // Asking for everything (or more) takes everything.
        let all = stratified_sample(&even, 99, 1);
        assert!(all.values().all(|v| *v == vec![0, 1, 2, 3, 4]));
        assert!(stratified_sample(&BTreeMap::new(), 5, 1).is_empty());
    }

    #[test]
    fn sample_is_deterministic_per_seed() {
        let a = stratified_sample(&locomo_counts(), 200, 42);
        assert_eq!(a, stratified_sample(&locomo_counts(), 200, 42));
        assert_ne!(a, stratified_sample(&locomo_counts(), 200, 43));
        assert_eq!(a.values().map(Vec::len).sum::<usize>(), 200);
        // A whole category drawn one by one is a permutation: every position once.
        let counts = BTreeMap::from([(4, 50)]);
        let mut rng = SplitMix64(9);
        let mut seen = [false; 50];
        for _ in 0..10_000 {
            seen[rng.below(50) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(
            stratified_sample(&counts, 50, 3)[&4],
            (0..50).collect::<Vec<_>>()
        );
    }
}
