//! The write-quality benchmark's judge (`benches/write_quality/judge.rs`) on sentences of its
//! own: whole words, subjects, denial and supposition.

#[path = "../benches/write_quality/judge.rs"]
#[allow(dead_code)]
mod judge;

use judge::{judge_answer, states, verdict, Answered, Claim, People, Verdict};

fn claim(about: &str, says: &[&str]) -> Claim {
    Claim {
        about: about.into(),
        says: says.iter().map(|s| s.to_string()).collect(),
        negated: false,
        why: None,
    }
}

fn denied(about: &str, says: &[&str]) -> Claim {
    Claim {
        negated: true,
        ..claim(about, says)
    }
}

fn people(others: &[&str]) -> People {
    People {
        user_names: vec!["Priya".into()],
        others: others.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn a_claim_about_someone_else_is_not_the_users() {
    let p = people(&["sister", "Marta"]);
    let sister_quit = claim("sister|Marta", &["quit", "smoking"]);
    let user_quit = claim("user", &["quit", "smoking"]);
    assert!(!states("The user quit smoking.", &sister_quit, &p));
    assert!(states("The user quit smoking.", &user_quit, &p));
    assert!(states(
        "The user's sister quit smoking last year.",
        &sister_quit,
        &p
    ));
    assert!(states(
        "Marta, the user's sister, quit smoking.",
        &sister_quit,
        &p
    ));
    assert!(!states("The user's sister quit smoking.", &user_quit, &p));
    // A pronoun carries the person the sentence before named last.
    let p = people(&["coworker", "Dan"]);
    let text = "The user's coworker Dan is from Oslo. He plays golf every Sunday.";
    assert!(states(text, &claim("coworker|Dan", &["golf"]), &p));
    assert!(!states(text, &claim("user", &["golf"]), &p));
    // With no one named before, a sentence is about the user; a name the user gives for
    // themself is the user.
    assert!(states("Golf is a passion.", &claim("user", &["golf"]), &p));
    assert!(states("Priya plays golf.", &claim("user", &["golf"]), &p));
    assert!(states(
        "The user has a sister named Marta.",
        &claim("any", &["sister", "Marta"]),
        &people(&["sister", "Marta"])
    ));
}

#[test]
fn a_denied_word_is_not_stated() {
    let p = people(&["wife", "Anne", "Jane"]);
    let text = "The user's wife is Jane, not Anne.";
    assert!(states(text, &claim("wife|Jane|Anne", &["Jane"]), &p));
    assert!(!states(text, &claim("wife|Jane|Anne", &["Anne"]), &p));
    assert!(states(text, &denied("wife|Jane|Anne", &["Anne"]), &p));
    let p = people(&[]);
    let lives = claim("user", &["lives|live", "Tromsø"]);
    for text in [
        "The user no longer lives in Tromsø.",
        "The user doesn't live in Tromsø anymore.",
        "The user does not live in Tromsø.",
    ] {
        assert!(!states(text, &lives, &p), "{text}");
        assert!(
            states(text, &denied("user", &["lives|live", "Tromsø"]), &p),
            "{text}"
        );
    }
    assert!(states("The user lives in Tromsø.", &lives, &p));
    assert!(states(
        "The user has never been to Iceland.",
        &denied("user", &["Iceland"]),
        &p
    ));
    assert!(!states(
        "The user has never been to Iceland.",
        &claim("user", &["Iceland"]),
        &p
    ));
    // A denial reaches the end of its clause, not the next one.
    let text = "The user does not eat pork, and loves lamb.";
    assert!(states(text, &claim("user", &["lamb"]), &p));
    assert!(!states(text, &claim("user", &["pork"]), &p));
}

#[test]
fn a_supposed_word_is_not_stated() {
    let p = people(&[]);
    let car = claim("user", &["car"]);
    assert!(!states(
        "If the user had a car, they would drive to the coast.",
        &car,
        &p
    ));
    assert!(!states("The user would buy a car someday.", &car, &p));
    assert!(states("The user owns a car.", &car, &p));
    // A claim that names the modal word is stated by it.
    assert!(states(
        "The user would like to live by the sea.",
        &claim("user", &["would", "sea"]),
        &p
    ));
    assert!(!states(
        "The user would like to live by the sea.",
        &claim("user", &["live", "sea"]),
        &p
    ));
}

#[test]
fn numbers_and_words_are_whole() {
    let p = people(&["son"]);
    assert!(!states(
        "The user moved in 2018.",
        &claim("any", &["8"]),
        &p
    ));
    assert!(states(
        "The user's son is 8.",
        &claim("son", &["8|eight"]),
        &p
    ));
    assert!(!states(
        "The user lives on floor 13.",
        &claim("user", &["3"]),
        &p
    ));
    assert!(!states(
        "The user likes cattle.",
        &claim("user", &["cat"]),
        &p
    ));
    assert!(states(
        "The user likes ice cream.",
        &claim("user", &["ice cream"]),
        &p
    ));
    assert!(!states(
        "The user likes ice and cream.",
        &claim("user", &["ice cream"]),
        &p
    ));
    assert!(states(
        "The user eats gluten-free bread.",
        &claim("user", &["gluten-free"]),
        &p
    ));
    assert!(states(
        "The user is allergic to peanuts.",
        &claim("user", &["peanut|peanuts"]),
        &p
    ));
}

#[test]
fn a_false_claim_outweighs_a_true_one() {
    let p = people(&["wife", "Anne", "Jane"]);
    let truth = claim("any", &["wife", "Anne"]);
    let old = claim("wife|Jane|Anne", &["Jane"]);
    let falsehoods = [old];
    assert_eq!(
        verdict("The user's wife is Anne.", &[&truth], &falsehoods, &p),
        Verdict::True
    );
    assert_eq!(
        verdict(
            "The user's wife is Jane. Her name is Anne.",
            &[&truth],
            &falsehoods,
            &p
        ),
        Verdict::False(0)
    );
    assert_eq!(
        verdict("The user likes tea.", &[&truth], &falsehoods, &p),
        Verdict::Unjudged
    );
}

#[test]
fn an_answer_is_right_both_stale_or_none() {
    let nobody = People::default();
    let current = [claim("user", &["Ghent"])];
    let stale = [claim("user", &["live|lives", "Leuven"])];
    let judge = |a: &str, p: &People| judge_answer(a, &current, &stale, p);
    assert_eq!(judge("You live in Ghent now.", &nobody), Answered::Right);
    assert_eq!(
        judge("You moved from Leuven to Ghent.", &nobody),
        Answered::Right
    );
    assert_eq!(judge("You live in Leuven.", &nobody), Answered::Stale);
    assert_eq!(
        judge("You live in Leuven. Or Ghent.", &nobody),
        Answered::Both
    );
    assert_eq!(judge("I don't know.", &nobody), Answered::None);
    // Someone else's city is not the user's: "your" names the user, "sister" someone else.
    let sister = People {
        user_names: vec![],
        others: vec!["sister".into()],
    };
    assert_eq!(
        judge("Your sister lives in Leuven.", &sister),
        Answered::None
    );
    assert_eq!(judge("You live in Leuven.", &sister), Answered::Stale);
}

#[test]
fn a_retraction_is_answered_by_a_denial() {
    let nobody = People::default();
    let current = [denied("user", &["marathon"])];
    let stale = [claim("user", &["marathon"])];
    let judge = |a: &str| judge_answer(a, &current, &stale, &nobody);
    assert_eq!(
        judge("You are not running the marathon anymore."),
        Answered::Right
    );
    assert_eq!(
        judge("You are running the marathon in May."),
        Answered::Stale
    );
}
