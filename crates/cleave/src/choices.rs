//! The values a request chooses by a word, with the words both faces take: the command line's
//! flag parser lists them in `--help`, the Python package reads its keyword arguments by them,
//! and a word neither knows is refused in each face's terms.

use std::time::Duration;

use cleave_frontend::{ExternalData, RewriteLevel};

use crate::{Arg, Error, Message, Objective};

/// A value chosen by a word.
pub trait Choice: Sized + Copy + Send + Sync + 'static {
    /// The argument that chooses it.
    const ARG: Arg;
    /// Each word, the value it chooses, and what it does (`None`: an old word still taken,
    /// not listed).
    const WORDS: &'static [(&'static str, Self, Option<&'static str>)];

    /// The value `word` chooses.
    fn from_word(word: &str) -> Result<Self, Error> {
        Self::WORDS
            .iter()
            .find(|(w, ..)| *w == word)
            .map(|&(_, v, _)| v)
            .ok_or_else(|| {
                Error::request(Message::about(
                    Self::ARG,
                    word,
                    format!(": choose {}", Self::listed()),
                ))
            })
    }

    /// The words listed, as a sentence: `'basic' or 'device'`.
    fn listed() -> String {
        let words: Vec<String> = Self::WORDS
            .iter()
            .filter(|(.., help)| help.is_some())
            .map(|(w, ..)| format!("'{w}'"))
            .collect();
        match words.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => words.join(""),
        }
    }
}

impl Choice for Objective {
    const ARG: Arg = Arg::Objective;
    const WORDS: &'static [(&'static str, Self, Option<&'static str>)] = &[
        (
            "fewest",
            Objective::Fewest,
            Some("each node on the first device that runs it, cut into the fewest parts"),
        ),
        (
            "latency",
            Objective::Latency,
            Some("each unit where the predicted end-to-end latency is least"),
        ),
        // The Python package's word before `fewest`.
        ("parts", Objective::Fewest, None),
    ];
}

impl Choice for RewriteLevel {
    const ARG: Arg = Arg::Optimize;
    const WORDS: &'static [(&'static str, Self, Option<&'static str>)] = &[
        (
            "basic",
            RewriteLevel::Basic,
            Some("device-independent clean-ups: constant folding, no-op removal, BatchNormalization into Conv"),
        ),
        (
            "device",
            RewriteLevel::Device,
            Some("basic, plus the rewrites the devices' profiles enable"),
        ),
    ];
}

impl Choice for ExternalData {
    const ARG: Arg = Arg::ExternalData;
    const WORDS: &'static [(&'static str, Self, Option<&'static str>)] = &[
        (
            "inline",
            ExternalData::Inline,
            Some("weights inside each part's file"),
        ),
        (
            "shared",
            ExternalData::Shared,
            Some("one weights file that the parts reference by offset"),
        ),
    ];
}

/// The cutting algorithm as chosen by its word; [`AlgorithmChoice::with`] adds its settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlgorithmChoice {
    Default,
    OpenVino,
}

impl Choice for AlgorithmChoice {
    const ARG: Arg = Arg::Algorithm;
    const WORDS: &'static [(&'static str, Self, Option<&'static str>)] = &[
        (
            "default",
            AlgorithmChoice::Default,
            Some("fewest connected parts (never more than ONE's rule or the epoch greedy)"),
        ),
        (
            "openvino",
            AlgorithmChoice::OpenVino,
            Some("OpenVINO's hetero subgraph selection as its design page states it"),
        ),
    ];
}

impl AlgorithmChoice {
    /// The algorithm with its settings: regions no tensor joins in one part, and the
    /// openvino algorithm's time budget in seconds.
    pub fn with(self, allow_disconnected: bool, budget_s: f64) -> Result<crate::Algorithm, Error> {
        Ok(match self {
            AlgorithmChoice::Default => crate::Algorithm::Default { allow_disconnected },
            AlgorithmChoice::OpenVino => {
                if !(budget_s.is_finite() && budget_s > 0.0) {
                    return Err(Error::request(
                        Message::text("the openvino algorithm's budget, ")
                            .then(format!("{budget_s} s, must be positive")),
                    ));
                }
                crate::Algorithm::OpenVino {
                    budget: Duration::from_secs_f64(budget_s),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Face;

    #[test]
    fn words_choose_values_and_unknown_words_are_refused_in_each_faces_terms() {
        assert_eq!(
            Objective::from_word("latency").ok(),
            Some(Objective::Latency)
        );
        assert_eq!(Objective::from_word("parts").ok(), Some(Objective::Fewest));
        assert_eq!(Objective::listed(), "'fewest' or 'latency'");
        let e = RewriteLevel::from_word("fast").unwrap_err();
        assert_eq!(e.to_string(), "--optimize fast: choose 'basic' or 'device'");
        assert_eq!(
            e.worded(Face::Python),
            "optimize=\"fast\": choose 'basic' or 'device'"
        );
        assert!(AlgorithmChoice::OpenVino.with(false, 0.0).is_err());
        assert!(AlgorithmChoice::Default.with(true, f64::NAN).is_ok());
    }
}
