//! Dates in text, resolved and spelled as tokens that lexical search can match.
//!
//! People speak of time relative to when they speak: "yesterday", "last Saturday", "two weeks
//! ago", "next month". A memory's words alone cannot match a question that names the date
//! ("what happened on 7 May 2023?"), and the same date is written many ways ("May 7, 2023",
//! "7th of May", "the day before 8 May"). [`date_tokens`] finds the dates a text mentions,
//! absolute or relative, resolves each against an *anchor* (the day the memory was written,
//! or the day a question is asked), and spells every one as canonical tokens:
//!
//! | granularity | token | example |
//! |---|---|---|
//! | day | `dYYYYMMDD` | `d20230507` |
//! | ISO week | `wYYYYwWW` | `w2023w18` |
//! | month | `mYYYYMM` | `m202305` |
//! | year | `yYYYY` | `y2023` |
//!
//! A day also yields its week, month and year, a week its months and year, a month its year,
//! so a question about "May 2023" matches a memory that said "yesterday" on 8 May 2023. Both
//! sides go through the same function — memories when their lexical key is built
//! ([`crate::index::keys`]), queries when they are searched — so what one side resolves the other
//! can match, and no scoring rule needs to know how anyone phrases a date.
//!
//! A relative expression followed closely by an absolute day ("the week before August 3,
//! 2023", "last Friday, on 23 January 2022") is resolved against that day instead of the
//! anchor. Vague expressions ("a few days ago", "the other day") resolve to a week, not a day.
//! What is not understood is left alone: a wrong date is worse than none.

use std::collections::BTreeSet;

use chrono::{Datelike, Days, Months, NaiveDate, Weekday};

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// Words after which a bare month name is a month ("in May", "since March", "early June").
/// After "last", "next" or "this" it is relative instead ("last May": see `relative_at`).
const BEFORE_A_MONTH: [&str; 13] = [
    "in", "during", "since", "by", "until", "till", "through", "of", "early", "mid", "late",
    "from", "before",
];

/// Words after which a bare year is a year ("in 2022", "since 2019").
const BEFORE_A_YEAR: [&str; 10] = [
    "in", "since", "of", "during", "by", "until", "from", "year", "before", "after",
];

/// A date or period a text mentions, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mention {
    /// One day.
    Day(NaiveDate),
    /// The ISO week (Monday to Sunday) holding this day.
    Week(NaiveDate),
    /// A calendar month: year and month (1-12).
    Month(i32, u32),
    /// A calendar year.
    Year(i32),
}

impl Mention {
    /// The canonical tokens of this mention, coarser granularities included.
    fn tokens(self, out: &mut BTreeSet<String>) {
        match self {
            Mention::Day(day) => {
                out.insert(format!("d{}", day.format("%Y%m%d")));
                Mention::Week(day).tokens(out);
            }
            Mention::Week(day) => {
                let week = day.iso_week();
                out.insert(format!("w{}w{:02}", week.year(), week.week()));
                let monday = monday_of(day);
                let sunday = monday.and_then(|m| m.checked_add_days(Days::new(6)));
                for d in [monday, sunday].into_iter().flatten() {
                    Mention::Month(d.year(), d.month()).tokens(out);
                }
            }
            Mention::Month(year, month) => {
                out.insert(format!("m{year}{month:02}"));
                Mention::Year(year).tokens(out);
            }
            Mention::Year(year) => {
                out.insert(format!("y{year}"));
            }
        }
    }
}

/// The canonical date tokens of `text`, with relative dates resolved against `anchor`,
/// space-separated and sorted (empty when it mentions no date).
pub fn date_tokens(text: &str, anchor: NaiveDate) -> String {
    tokens_of(&mentions(text, anchor))
}

/// The tokens of one day (the date a memory was written), as [`date_tokens`] spells them.
pub fn day_tokens(day: NaiveDate) -> String {
    tokens_of(&[Mention::Day(day)])
}

fn tokens_of(mentions: &[Mention]) -> String {
    let mut tokens = BTreeSet::new();
    for m in mentions {
        m.tokens(&mut tokens);
    }
    tokens.into_iter().collect::<Vec<_>>().join(" ")
}

/// A word of the text: its lower-case form, whether it was capitalised, and the text between
/// it and the previous word.
#[derive(Debug)]
struct Word<'a> {
    lower: String,
    capitalised: bool,
    gap: &'a str,
}

fn split_words(text: &str) -> Vec<Word<'_>> {
    let mut words = Vec::new();
    let mut last_end = 0;
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let raw = &text[s..i];
                words.push(Word {
                    lower: raw.to_lowercase(),
                    capitalised: raw.chars().next().is_some_and(char::is_uppercase),
                    gap: &text[last_end..s],
                });
                last_end = i;
                start = None;
            }
            _ => {}
        }
    }
    words
}

/// Every date `text` mentions, resolved against `anchor`, in order of appearance.
pub fn mentions(text: &str, anchor: NaiveDate) -> Vec<Mention> {
    let words = split_words(text);
    let absolute = absolute_dates(&words, anchor);
    let mut found: Vec<(usize, Mention)> = absolute
        .iter()
        .flat_map(|a| a.mentions.iter().map(move |m| (a.start, *m)))
        .collect();
    for r in relative_dates(&words, &absolute, anchor) {
        found.extend(r.resolved.into_iter().map(|m| (r.start, m)));
    }
    found.sort();
    found.dedup();
    found.into_iter().map(|(_, m)| m).collect()
}

/// A relative date in the text: words `start..start + len`, what it says, and what it
/// resolves to.
struct RelativeDate {
    start: usize,
    len: usize,
    relative: Relative,
    resolved: Vec<Mention>,
}

/// The relative dates among `words`, outside the `absolute` ones, resolved against
/// `anchor`, or against the day named just after one ("the week before August 3").
fn relative_dates(words: &[Word], absolute: &[Absolute], anchor: NaiveDate) -> Vec<RelativeDate> {
    let taken = |i: usize| absolute.iter().any(|a| (a.start..a.end).contains(&i));
    let mut found = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let Some((len, relative)) = (!taken(i)).then(|| relative_at(&words[i..])).flatten() else {
            i += 1;
            continue;
        };
        let named_day = absolute
            .iter()
            .find(|a| a.start >= i + len && a.start <= i + len + 3)
            .and_then(|a| a.day);
        let resolved = relative.resolve(named_day.unwrap_or(anchor));
        found.push(RelativeDate {
            start: i,
            len,
            relative,
            resolved,
        });
        i += len;
    }
    found
}

/// An absolute date in the text: words `start..end`, what it names, and its day if it names
/// one.
struct Absolute {
    start: usize,
    end: usize,
    mentions: Vec<Mention>,
    day: Option<NaiveDate>,
}

fn month_of(word: &str) -> Option<u32> {
    let short = [
        "jan", "feb", "", "apr", "", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    MONTHS
        .iter()
        .position(|m| *m == word)
        .or_else(|| short.iter().position(|m| !m.is_empty() && *m == word))
        .or_else(|| (word == "sept").then_some(8))
        .map(|i| i as u32 + 1)
}

/// "8", "8th", "23rd" as a day of the month.
fn day_number(word: &str) -> Option<u32> {
    let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &word[digits.len()..];
    if !matches!(suffix, "" | "st" | "nd" | "rd" | "th") || digits.is_empty() || digits.len() > 2 {
        return None;
    }
    digits.parse().ok().filter(|d| (1..=31).contains(d))
}

fn year_number(word: &str) -> Option<i32> {
    (word.len() == 4 && (word.starts_with("19") || word.starts_with("20")))
        .then(|| word.parse().ok())
        .flatten()
}

/// Absolute dates: "8 May 2023", "8th of May", "May 8, 2023", "May 2023", "in May",
/// "2023-05-08", "in 2022", "summer 2021".
fn absolute_dates(words: &[Word], anchor: NaiveDate) -> Vec<Absolute> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < words.len() {
        match absolute_at(words, i, anchor) {
            Some(a) => {
                i = a.end;
                found.push(a);
            }
            None => i += 1,
        }
    }
    found
}

fn absolute_at(words: &[Word], i: usize, anchor: NaiveDate) -> Option<Absolute> {
    let word = |j: usize| words.get(j).map(|w| w.lower.as_str());
    let year_at = |j: usize| word(j).and_then(year_number);
    let day = |start: usize, end: usize, month: u32, d: u32, year: Option<i32>| {
        let date = match year {
            Some(y) => NaiveDate::from_ymd_opt(y, month, d)?,
            None => nearest_day(anchor, month, d)?,
        };
        Some(Absolute {
            start,
            end,
            mentions: vec![Mention::Day(date)],
            day: Some(date),
        })
    };
    let w = word(i)?;
    // 2023-05-08
    if let (Some(y), Some(m), Some(d)) = (year_number(w), word(i + 1), word(i + 2)) {
        if words[i + 1].gap == "-" && words[i + 2].gap == "-" && m.len() == 2 && d.len() == 2 {
            if let (Ok(m), Ok(d)) = (m.parse(), d.parse()) {
                return day(i, i + 3, m, d, Some(y));
            }
        }
    }
    // in 2022
    if let Some(y) = year_number(w) {
        if i > 0 && BEFORE_A_YEAR.contains(&words[i - 1].lower.as_str()) {
            return Some(Absolute {
                start: i,
                end: i + 1,
                mentions: vec![Mention::Year(y)],
                day: None,
            });
        }
    }
    // 8 May 2023, 8th of May
    if let Some(d) = day_number(w) {
        let of = usize::from(word(i + 1) == Some("of"));
        if let Some(m) = word(i + 1 + of).and_then(month_of) {
            let year = year_at(i + 2 + of);
            return day(i, i + 2 + of + usize::from(year.is_some()), m, d, year);
        }
    }
    let m = month_of(w)?;
    // May 8, 2023
    if let Some(d) = word(i + 1).and_then(day_number) {
        let year = year_at(i + 2);
        return day(i, i + 2 + usize::from(year.is_some()), m, d, year);
    }
    // May 2023, May of 2023
    let of = usize::from(word(i + 1) == Some("of"));
    if let Some(y) = year_at(i + 1 + of) {
        return Some(Absolute {
            start: i,
            end: i + 2 + of,
            mentions: vec![Mention::Month(y, m)],
            day: None,
        });
    }
    // "in May"; a bare "may" or "march" is too often a verb.
    let after_preposition = i > 0 && BEFORE_A_MONTH.contains(&words[i - 1].lower.as_str());
    let preceded_by_relative =
        i > 0 && matches!(words[i - 1].lower.as_str(), "last" | "next" | "this");
    let unambiguous = words[i].capitalised && !matches!(w, "may" | "march");
    if (after_preposition || unambiguous) && !preceded_by_relative {
        let (y, m) = nearest_month(anchor, m);
        return Some(Absolute {
            start: i,
            end: i + 1,
            mentions: vec![Mention::Month(y, m)],
            day: None,
        });
    }
    None
}

/// The occurrence of day `d` of `month` nearest to `anchor` (this year, the one before or the
/// one after).
fn nearest_day(anchor: NaiveDate, month: u32, d: u32) -> Option<NaiveDate> {
    [anchor.year() - 1, anchor.year(), anchor.year() + 1]
        .into_iter()
        .filter_map(|y| NaiveDate::from_ymd_opt(y, month, d))
        .min_by_key(|date| (*date - anchor).num_days().abs())
}

fn nearest_month(anchor: NaiveDate, month: u32) -> (i32, u32) {
    let distance = |y: i32| ((y - anchor.year()) * 12 + month as i32 - anchor.month() as i32).abs();
    let year = [anchor.year() - 1, anchor.year(), anchor.year() + 1]
        .into_iter()
        .min_by_key(|&y| distance(y))
        .unwrap_or(anchor.year());
    (year, month)
}

/// A relative expression, before it is resolved against a day.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Relative {
    /// That many days from the anchor (negative: before it).
    Days(i64),
    /// The week that many weeks from the anchor's.
    Weeks(i64),
    /// The week around a day that many days away (for vague expressions).
    WeekAround(i64),
    Months(i32),
    Years(i32),
    /// The last `weekday` before the anchor (`-1`), or the next one after it (`1`), or the
    /// one on or after it (`0`).
    Weekday(Weekday, i8),
    /// The weekend before the anchor (`-1`) or the coming one (`1`).
    Weekend(i8),
    /// A season (first month 3, 6, 9 or 12): the last one over before the anchor (`-1`),
    /// the one of the anchor's year (`0`), or the next one (`1`).
    Season(u32, i8),
    /// A named month: the last one before the anchor's month (`-1`), the anchor year's
    /// (`0`), or the next one after it (`1`).
    MonthNamed(u32, i8),
    /// A year named with a season ("summer 2021").
    SeasonOf(u32, i32),
}

impl Relative {
    /// Whether this speaks of the present: today, this week, this month, this year.
    fn is_present(self) -> bool {
        matches!(
            self,
            Relative::Days(0) | Relative::Weeks(0) | Relative::Months(0) | Relative::Years(0)
        )
    }

    /// The one day this resolves to, if it names a single day.
    fn day(self, anchor: NaiveDate) -> Option<NaiveDate> {
        match self.resolve(anchor).as_slice() {
            [Mention::Day(day)] => Some(*day),
            _ => None,
        }
    }

    fn resolve(self, anchor: NaiveDate) -> Vec<Mention> {
        let shift_days = |n: i64| {
            if n >= 0 {
                anchor.checked_add_days(Days::new(n as u64))
            } else {
                anchor.checked_sub_days(Days::new(n.unsigned_abs()))
            }
        };
        let shift_months = |n: i32| {
            let first = anchor.with_day(1)?;
            if n >= 0 {
                first.checked_add_months(Months::new(n as u32))
            } else {
                first.checked_sub_months(Months::new(n.unsigned_abs()))
            }
        };
        match self {
            Relative::Days(n) => shift_days(n).map(Mention::Day).into_iter().collect(),
            Relative::Weeks(n) => shift_days(7 * n).map(Mention::Week).into_iter().collect(),
            Relative::WeekAround(n) => shift_days(n).map(Mention::Week).into_iter().collect(),
            Relative::Months(n) => shift_months(n)
                .map(|d| Mention::Month(d.year(), d.month()))
                .into_iter()
                .collect(),
            Relative::Years(n) => vec![Mention::Year(anchor.year() + n)],
            Relative::Weekday(day, direction) => {
                let ahead = (7 + i64::from(day.num_days_from_monday())
                    - i64::from(anchor.weekday().num_days_from_monday()))
                    % 7;
                let offset = match (direction, ahead) {
                    (-1, 0) => -7,
                    (-1, a) => a - 7,
                    (1, 0) => 7,
                    (_, a) => a,
                };
                shift_days(offset).map(Mention::Day).into_iter().collect()
            }
            Relative::Weekend(direction) => {
                let saturday = match (direction, anchor.weekday()) {
                    // Said on a Sunday, "last weekend" is the one before this one.
                    (-1, Weekday::Sun) => shift_days(-8),
                    (-1, _) => Relative::Weekday(Weekday::Sat, -1).day(anchor),
                    (_, Weekday::Sun) => shift_days(-1),
                    (_, _) => Relative::Weekday(Weekday::Sat, 0).day(anchor),
                };
                saturday
                    .into_iter()
                    .flat_map(|sat| {
                        let sunday = sat.checked_add_days(Days::new(1));
                        std::iter::once(Mention::Day(sat)).chain(sunday.map(Mention::Day))
                    })
                    .collect()
            }
            Relative::Season(first, direction) => {
                let start = |y: i32| NaiveDate::from_ymd_opt(y, first, 1);
                let year = anchor.year();
                let year = match direction {
                    // The last season that is over: it ended before the anchor's month.
                    -1 => {
                        let ends_after = |y: i32| {
                            start(y).is_some_and(|s| {
                                s.checked_add_months(Months::new(3))
                                    .is_some_and(|e| e > anchor)
                            })
                        };
                        if ends_after(year) {
                            year - 1
                        } else {
                            year
                        }
                    }
                    1 => {
                        if start(year).is_some_and(|s| s > anchor) {
                            year
                        } else {
                            year + 1
                        }
                    }
                    _ => year,
                };
                season_months(first, year)
            }
            Relative::SeasonOf(first, year) => season_months(first, year),
            Relative::MonthNamed(month, direction) => {
                let year = anchor.year();
                let year = match direction {
                    -1 if month >= anchor.month() => year - 1,
                    1 if month <= anchor.month() => year + 1,
                    _ => year,
                };
                vec![Mention::Month(year, month)]
            }
        }
    }
}

/// The three months of a season starting in month `first` of `year` (winter runs into the
/// next year).
fn season_months(first: u32, year: i32) -> Vec<Mention> {
    (0..3)
        .map(|k| {
            let m = first + k;
            if m > 12 {
                Mention::Month(year + 1, m - 12)
            } else {
                Mention::Month(year, m)
            }
        })
        .collect()
}

fn weekday_of(word: &str) -> Option<Weekday> {
    Some(match word {
        "monday" => Weekday::Mon,
        "tuesday" => Weekday::Tue,
        "wednesday" => Weekday::Wed,
        "thursday" => Weekday::Thu,
        "friday" => Weekday::Fri,
        "saturday" => Weekday::Sat,
        "sunday" => Weekday::Sun,
        _ => return None,
    })
}

fn season_of(word: &str) -> Option<u32> {
    Some(match word {
        "spring" => 3,
        "summer" => 6,
        "fall" | "autumn" => 9,
        "winter" => 12,
        _ => return None,
    })
}

/// A count in words or digits: "two", "3", "a", "a couple of".
fn count_at(words: &[&str]) -> Option<(usize, i64, bool)> {
    let small = |w: &str| -> Option<i64> {
        Some(match w {
            "a" | "an" | "one" => 1,
            "two" => 2,
            "three" => 3,
            "four" => 4,
            "five" => 5,
            "six" => 6,
            "seven" => 7,
            "eight" => 8,
            "nine" => 9,
            "ten" => 10,
            "eleven" => 11,
            "twelve" => 12,
            _ => w.parse().ok().filter(|n| (1..=100).contains(n))?,
        })
    };
    match words {
        ["a", "couple", "of", ..] | ["a", "couple", ..] => {
            Some((if words.get(2) == Some(&"of") { 3 } else { 2 }, 2, true))
        }
        ["a", "few", ..] | ["few", ..] | ["several", ..] => {
            Some((if words[0] == "a" { 2 } else { 1 }, 3, true))
        }
        [w, ..] => small(w).map(|n| (1, n, false)),
        [] => None,
    }
}

/// The relative expression starting at the first of `words`, if any: how many words it
/// spans and what it says.
fn relative_at(words: &[Word]) -> Option<(usize, Relative)> {
    let w: Vec<&str> = words.iter().take(6).map(|w| w.lower.as_str()).collect();
    use Relative::*;
    let simple = match w.as_slice() {
        ["day", "before", "yesterday", ..] => Some((3, Days(-2))),
        ["day", "after", "tomorrow", ..] => Some((3, Days(2))),
        ["today" | "tonight", ..] => Some((1, Days(0))),
        ["this", "morning" | "afternoon" | "evening", ..] => Some((2, Days(0))),
        ["yesterday", ..] => Some((1, Days(-1))),
        ["last", "night", ..] => Some((2, Days(-1))),
        ["tomorrow", ..] => Some((1, Days(1))),
        ["the", "day", "before", ..] => Some((3, Days(-1))),
        ["the", "day", "after", ..] => Some((3, Days(1))),
        ["the", "other", "day", ..] => Some((3, WeekAround(-3))),
        ["last" | "past" | "previous", "week", ..] => Some((2, Weeks(-1))),
        ["the", "week", "before", ..] => Some((3, Weeks(-1))),
        ["this", "week", ..] => Some((2, Weeks(0))),
        ["next" | "coming", "week", ..] => Some((2, Weeks(1))),
        ["the", "week", "after", ..] => Some((3, Weeks(1))),
        ["last" | "past" | "previous", "weekend", ..] => Some((2, Weekend(-1))),
        ["this", "past", "weekend", ..] => Some((3, Weekend(-1))),
        ["the", "weekend", "before", ..] => Some((3, Weekend(-1))),
        ["this" | "next" | "coming", "weekend", ..] => Some((2, Weekend(1))),
        ["last" | "past" | "previous", "month", ..] => Some((2, Months(-1))),
        ["the", "month", "before", ..] => Some((3, Months(-1))),
        ["this", "month", ..] => Some((2, Months(0))),
        ["next" | "coming", "month", ..] => Some((2, Months(1))),
        ["last" | "past" | "previous", "year", ..] => Some((2, Years(-1))),
        ["the", "year", "before", ..] => Some((3, Years(-1))),
        ["this", "year", ..] => Some((2, Years(0))),
        ["next" | "coming", "year", ..] => Some((2, Years(1))),
        _ => None,
    };
    if simple.is_some() {
        return simple;
    }
    // last Saturday, this Friday, next Monday, the Sunday before
    let direction = |w: &str| match w {
        "last" | "past" | "previous" => Some(-1),
        "this" => Some(0),
        "next" | "coming" => Some(1),
        _ => None,
    };
    if let [first, second, ..] = w.as_slice() {
        if let (Some(d), Some(day)) = (direction(first), weekday_of(second)) {
            return Some((2, Weekday(day, d)));
        }
        if let (Some(d), Some(month)) = (direction(first), month_of(second)) {
            return Some((2, MonthNamed(month, d)));
        }
        if let (Some(d), Some(season)) = (direction(first), season_of(second)) {
            return Some((2, Season(season, d)));
        }
        if let (Some(season), Some(year)) = (season_of(first), year_number(second)) {
            return Some((2, SeasonOf(season, year)));
        }
    }
    if let ["the", day, "before", ..] = w.as_slice() {
        if let Some(day) = weekday_of(day) {
            return Some((3, Weekday(day, -1)));
        }
    }
    if let ["summer" | "spring" | "winter" | "fall" | "autumn", "of", year, ..] = w.as_slice() {
        if let (Some(season), Some(year)) = (season_of(w[0]), year_number(year)) {
            return Some((3, SeasonOf(season, year)));
        }
    }
    // two weeks ago, 3 days before, in a month
    let (lead, sign) = match w.first() {
        Some(&"in") => (1, 1),
        _ => (0, 0),
    };
    let (count_len, n, vague) = count_at(&w[lead..])?;
    let unit = *w.get(lead + count_len)?;
    let after = w.get(lead + count_len + 1).copied();
    let sign = match (sign, after) {
        (1, _) => 1,
        (_, Some("ago" | "before" | "earlier")) => -1,
        (_, Some("after" | "later")) => 1,
        _ => return None,
    };
    let len = lead + count_len + 1 + usize::from(lead == 0);
    let relative = match unit.trim_end_matches('s') {
        "day" if vague => WeekAround(sign * n),
        "day" => Days(sign * n),
        "week" if vague => WeekAround(sign * 7 * n),
        "week" => Weeks(sign * n),
        "month" => Months((sign * n) as i32),
        "year" => Years((sign * n) as i32),
        _ => return None,
    };
    // "in two weeks" is a time from the anchor; "in a few days" is too vague to place.
    if lead == 1 && vague {
        return None;
    }
    Some((len, relative))
}

/// The Monday of `day`'s week. Checked: a hand-edited date may sit at the end of the
/// calendar.
fn monday_of(day: NaiveDate) -> Option<NaiveDate> {
    day.checked_sub_days(Days::new(day.weekday().num_days_from_monday().into()))
}

/// A day as people write it: "5 July 2023".
pub fn spell_day(day: NaiveDate) -> String {
    day.format("%-d %B %Y").to_string()
}

impl Mention {
    /// This mention as people write it: "5 July 2023", "the week of 29 May 2023" (its
    /// Monday), "June 2023", "2022".
    fn spelled(self) -> String {
        match self {
            Mention::Day(day) => spell_day(day),
            Mention::Week(day) => {
                format!("the week of {}", spell_day(monday_of(day).unwrap_or(day)))
            }
            Mention::Month(year, month) => match NaiveDate::from_ymd_opt(year, month, 1) {
                Some(first) => first.format("%B %Y").to_string(),
                None => format!("{year}-{month:02}"),
            },
            Mention::Year(year) => year.to_string(),
        }
    }
}

/// The relative time expressions of `text` that point away from `anchor` ("yesterday", "last
/// week", "two weeks ago"; not "today"), each with what it resolves to, spelled as people
/// write dates: `("yesterday", "5 July 2023")`. What a reader of an old memory cannot work out
/// without a calendar, and what a small model gets wrong when it tries.
pub fn resolved_phrases(text: &str, anchor: NaiveDate) -> Vec<(String, String)> {
    let words = split_words(text);
    let absolute = absolute_dates(&words, anchor);
    let mut phrases: Vec<(String, String)> = Vec::new();
    for r in relative_dates(&words, &absolute, anchor) {
        if r.relative.is_present() || r.resolved.is_empty() {
            continue;
        }
        let phrase: Vec<&str> = words[r.start..r.start + r.len]
            .iter()
            .map(|w| w.lower.as_str())
            .collect();
        let spelled: Vec<String> = r.resolved.into_iter().map(Mention::spelled).collect();
        let entry = (phrase.join(" "), spelled.join(" and "));
        if !phrases.contains(&entry) {
            phrases.push(entry);
        }
    }
    phrases
}

/// True when the text names a date other than the present ("in May", "last week", "on 3
/// June"; not "today" or "this week"): such a query asks about that time, not about now.
pub fn names_a_date(text: &str) -> bool {
    // Whether a date is named does not depend on the day it is resolved against.
    let any_day = NaiveDate::from_ymd_opt(2000, 6, 15).unwrap_or_default();
    let words = split_words(text);
    !absolute_dates(&words, any_day).is_empty()
        || (0..words.len()).any(|i| relative_at(&words[i..]).is_some_and(|(_, r)| !r.is_present()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap()
    }

    /// 8 May 2023 was a Monday.
    fn on_8_may(text: &str) -> Vec<Mention> {
        mentions(text, day(2023, 5, 8))
    }

    #[test]
    fn relative_phrases_are_resolved_and_spelled_as_people_write_dates() {
        let resolved = |text: &str| resolved_phrases(text, day(2023, 5, 8));
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            resolved("Yesterday I signed up, and last week I quit."),
            vec![
                pair("yesterday", "7 May 2023"),
                pair("last week", "the week of 1 May 2023")
            ]
        );
        assert_eq!(
            resolved("We adopted her two weeks ago, last month we moved"),
            vec![
                pair("two weeks ago", "the week of 24 April 2023"),
                pair("last month", "April 2023")
            ]
        );
        assert_eq!(
            resolved("last weekend"),
            vec![pair("last weekend", "6 May 2023 and 7 May 2023")]
        );
        // Against the day named right after it, not the anchor.
        assert_eq!(
            resolved("the day before 3 June 2023"),
            vec![pair("the day before", "2 June 2023")]
        );
        // The present, absolute dates and words that only look like dates give nothing.
        for text in [
            "today is fine",
            "on 7 May 2023",
            "this week",
            "May I ask?",
            "in 2019",
        ] {
            assert_eq!(resolved(text), vec![], "{text}");
        }
    }

    #[test]
    fn absolute_dates_are_read_in_every_common_spelling() {
        let may_7 = vec![Mention::Day(day(2023, 5, 7))];
        for text in [
            "on 7 May 2023",
            "on May 7, 2023",
            "on the 7th of May",
            "May 7th",
            "7 may, 2023",
            "2023-05-07",
        ] {
            assert_eq!(on_8_may(text), may_7, "{text}");
        }
        assert_eq!(on_8_may("in May 2022"), vec![Mention::Month(2022, 5)]);
        assert_eq!(on_8_may("back in 2019"), vec![Mention::Year(2019)]);
        assert_eq!(on_8_may("in December"), vec![Mention::Month(2022, 12)]);
        assert_eq!(on_8_may("in July"), vec![Mention::Month(2023, 7)]);
        assert_eq!(on_8_may("Aug 3"), vec![Mention::Day(day(2023, 8, 3))]);
    }

    #[test]
    fn words_that_only_look_like_dates_are_left_alone() {
        for text in [
            "May I ask you something?",
            "we march on",
            "I have 2000 followers",
            "it took 3 days",
            "the 2nd one",
            "the weekend was long",
        ] {
            assert_eq!(on_8_may(text), vec![], "{text}");
        }
        // No such day: only the month is left.
        assert_eq!(on_8_may("31 February"), vec![Mention::Month(2023, 2)]);
    }

    #[test]
    fn relative_expressions_resolve_against_the_anchor() {
        let cases = [
            ("I went yesterday", vec![Mention::Day(day(2023, 5, 7))]),
            ("tonight", vec![Mention::Day(day(2023, 5, 8))]),
            ("last Saturday", vec![Mention::Day(day(2023, 5, 6))]),
            ("last Monday", vec![Mention::Day(day(2023, 5, 1))]),
            ("next Monday", vec![Mention::Day(day(2023, 5, 15))]),
            ("this Friday", vec![Mention::Day(day(2023, 5, 12))]),
            ("two weeks ago", vec![Mention::Week(day(2023, 4, 24))]),
            ("3 days ago", vec![Mention::Day(day(2023, 5, 5))]),
            ("a few days ago", vec![Mention::Week(day(2023, 5, 5))]),
            ("next month", vec![Mention::Month(2023, 6)]),
            ("last year", vec![Mention::Year(2022)]),
            ("5 years ago", vec![Mention::Year(2018)]),
            ("in two weeks", vec![Mention::Week(day(2023, 5, 22))]),
            ("last May", vec![Mention::Month(2022, 5)]),
            (
                "last weekend",
                vec![Mention::Day(day(2023, 5, 6)), Mention::Day(day(2023, 5, 7))],
            ),
            (
                "last summer",
                vec![
                    Mention::Month(2022, 6),
                    Mention::Month(2022, 7),
                    Mention::Month(2022, 8),
                ],
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(on_8_may(text), expected, "{text}");
        }
    }

    #[test]
    fn a_relative_expression_before_a_named_day_is_resolved_against_that_day() {
        // 3 August 2023 was a Thursday; the week before it is ISO week 30.
        assert_eq!(
            on_8_may("What did Ruth plan for the week before August 3, 2023?"),
            vec![
                Mention::Week(day(2023, 7, 27)),
                Mention::Day(day(2023, 8, 3)),
            ]
        );
        assert_eq!(
            on_8_may("What did Marek repair last Friday on 23 January, 2022?"),
            vec![
                Mention::Day(day(2022, 1, 21)),
                Mention::Day(day(2022, 1, 23)),
            ]
        );
    }

    #[test]
    fn both_sides_meet_on_the_same_tokens() {
        // Said on 8 May: "yesterday"; asked later: "on May 7, 2023".
        let memory = date_tokens("I fixed the fence yesterday", day(2023, 5, 8));
        let query = date_tokens("What happened on May 7, 2023?", day(2023, 10, 1));
        assert_eq!(memory, "d20230507 m202305 w2023w18 y2023");
        assert_eq!(memory, query);
        assert!(date_tokens("in May 2023", day(2024, 1, 1))
            .split(' ')
            .all(|t| memory.contains(t)));
        assert_eq!(
            day_tokens(day(2023, 5, 8)),
            "d20230508 m202305 w2023w19 y2023"
        );
        assert_eq!(date_tokens("no date here", day(2023, 5, 8)), "");
    }

    #[test]
    fn the_ends_of_the_calendar_do_not_panic() {
        // A hand-edited created_at may be anything chrono can hold.
        for anchor in [NaiveDate::MIN, NaiveDate::MAX] {
            for text in [
                "yesterday and tomorrow, last weekend, next weekend, this Sunday",
                "in 3 weeks, 5 years ago, next month, last summer, next winter",
                "on 31 December, in January",
            ] {
                let _ = date_tokens(text, anchor);
            }
            let _ = day_tokens(anchor);
        }
    }

    #[test]
    fn dates_other_than_the_present_are_named() {
        assert!(names_a_date("what did I do last week?"));
        assert!(names_a_date("in July 2023"));
        assert!(!names_a_date("May I know what she does now?"));
        assert!(!names_a_date("what does she do today?"));
        assert!(!names_a_date("what is she reading this week?"));
    }
}
