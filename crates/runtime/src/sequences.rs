//! A served stage of a decoder: one part in its session and the KV caches of the sequences
//! it holds, keyed by sequence. A step brings the small per-step inputs and the hidden state
//! from the stage before; the stage adds each state input from that sequence's cache (empty
//! at its first step), keeps each state output for the next step, and answers the rest. So a
//! layer's cache never leaves the process that runs its layer.
//!
//! The stage is bounded: at most `max_sequences` held at once, `max_context` tokens each and
//! `max_bytes` of cache in all. A step past a bound is refused with the reason (HTTP's 429 or
//! 413 where a server answers it) and the stage is left as it was. A sequence left idle past
//! `max_idle` (its client gone without a word) gives its place to a new one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cleave_ir::{grows, Dim, ElemType, StatePair, TensorType};

use crate::decode::empty_state;
use crate::error::RuntimeError;
use crate::tensor::HostTensor;
use crate::Session;

/// How much a stage holds at most; 0 is no bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub max_sequences: usize,
    pub max_context: usize,
    pub max_bytes: u64,
    /// A sequence idle this long is evicted when a new one needs its place (zero: never).
    pub max_idle: Duration,
}

/// Why a step did not run.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The stage holds all the sequences or cache bytes it may: try again later (429).
    #[error("{0}")]
    Busy(String),
    /// The sequence would outgrow the context or the cache bytes a stage keeps (413).
    #[error("{0}")]
    TooLong(String),
    /// The step assumes another past than the stage holds for the sequence (its cache was
    /// lost, or a step went missing): the caller replays the sequence's tokens (409).
    #[error("{0}")]
    Mismatch(String),
    /// The part failed; the sequence's cache is as it was before the step.
    #[error(transparent)]
    Run(#[from] RuntimeError),
}

impl StageError {
    /// The HTTP status a server answers this with.
    pub fn status(&self) -> u16 {
        match self {
            StageError::Busy(_) => 429,
            StageError::TooLong(_) => 413,
            StageError::Mismatch(_) => 409,
            StageError::Run(_) => 500,
        }
    }
}

/// One sequence's cache in this stage.
struct Held {
    cache: Vec<(String, HostTensor)>,
    context: usize,
    bytes: u64,
    last: Instant,
}

/// What a stage holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageStats {
    pub sequences: usize,
    /// Tokens of context over every sequence held.
    pub tokens: usize,
    /// Bytes of KV cache over every sequence held.
    pub kv_bytes: u64,
    /// Steps run since the stage opened.
    pub steps: u64,
}

/// One part's session and its sequences' caches.
pub struct Stage {
    session: Box<dyn Session>,
    /// The part's file, which messages name.
    path: PathBuf,
    /// The part's inputs, for the empty cache of a sequence's first step.
    inputs: Vec<(String, TensorType)>,
    /// The pairs whose input this part reads.
    pairs: Vec<StatePair>,
    limits: Limits,
    /// Cache bytes a token of context takes, from the state inputs' declared types (0 where
    /// a type leaves it unknown: then learned from what the stage holds).
    per_token: u64,
    held: HashMap<String, Held>,
    steps: u64,
}

impl Stage {
    /// `pairs` may name state the part does not read (the whole model's list): those are
    /// left to the stages that do.
    pub fn new(
        session: Box<dyn Session>,
        path: &Path,
        inputs: Vec<(String, TensorType)>,
        pairs: &[StatePair],
        limits: Limits,
    ) -> Stage {
        let pairs: Vec<StatePair> = pairs
            .iter()
            .filter(|p| inputs.iter().any(|(n, _)| n == &p.input))
            .cloned()
            .collect();
        let per_token = pairs
            .iter()
            .map(|p| {
                inputs
                    .iter()
                    .find(|(n, _)| n == &p.input)
                    .and_then(|(_, t)| bytes_per_token(t))
            })
            .try_fold(0u64, |sum, b| b.and_then(|b| sum.checked_add(b)))
            .unwrap_or(0);
        Stage {
            session,
            path: path.to_path_buf(),
            inputs,
            pairs,
            limits,
            per_token,
            held: HashMap::new(),
            steps: 0,
        }
    }

    /// The state pairs this stage keeps.
    pub fn pairs(&self) -> &[StatePair] {
        &self.pairs
    }

    /// Runs one step of `sequence`, which feeds `fed` new tokens after `past` tokens of
    /// context (`None`: whatever the stage holds); `feeds` are the part's inputs other than its
    /// state. Answers the part's outputs other than its state. A step at past 0 starts the
    /// sequence afresh (a replay); another past than the stage holds is refused.
    pub fn step(
        &mut self,
        sequence: &str,
        past: Option<usize>,
        fed: usize,
        mut feeds: Vec<(String, HostTensor)>,
    ) -> Result<Vec<(String, HostTensor)>, StageError> {
        match (past, self.held.get(sequence)) {
            (Some(0), Some(_)) => {
                self.held.remove(sequence);
            }
            (Some(p), held) if p != held.map_or(0, |h| h.context) => {
                return Err(StageError::Mismatch(format!(
                    "the stage holds {} tokens of sequence '{sequence}', the step assumes {p}: replay it",
                    held.map_or(0, |h| h.context)
                )))
            }
            _ => {}
        }
        self.admit(sequence, fed)?;
        for (name, t) in feeds.iter_mut() {
            let declared = self.inputs.iter().find(|(n, _)| n == name);
            if let Some((
                _,
                TensorType {
                    elem: Some(ElemType::I32),
                    ..
                },
            )) = declared
            {
                narrow_ids(&self.path, name, t)?;
            }
        }
        let mut held = self.held.remove(sequence).unwrap_or(Held {
            cache: Vec::new(),
            context: 0,
            bytes: 0,
            last: Instant::now(),
        });
        for p in &self.pairs {
            let t = match held.cache.iter().position(|(n, _)| n == &p.input) {
                Some(k) => held.cache.swap_remove(k).1,
                None => {
                    let ty = self
                        .inputs
                        .iter()
                        .find(|(n, _)| n == &p.input)
                        .map(|(_, t)| t.clone())
                        .unwrap_or_default();
                    empty_state(&self.path, &p.input, &ty)?
                }
            };
            feeds.push((p.input.clone(), t));
        }
        let outputs = match self.session.run(&feeds) {
            Ok(o) => o,
            Err(e) => {
                // The run only read the cache: the sequence stays as it was.
                held.cache = feeds
                    .into_iter()
                    .filter(|(n, _)| self.pairs.iter().any(|p| &p.input == n))
                    .collect();
                if held.context > 0 {
                    self.held.insert(sequence.to_string(), held);
                }
                return Err(e.into());
            }
        };
        self.steps += 1;
        let mut answer = Vec::with_capacity(outputs.len());
        let mut cache = Vec::with_capacity(self.pairs.len());
        for (name, t) in outputs {
            match self.pairs.iter().find(|p| p.output == name) {
                Some(p) => cache.push((p.input.clone(), t)),
                None => answer.push((name, t)),
            }
        }
        let bytes = cache.iter().map(|(_, t)| t.data.len() as u64).sum();
        self.held.insert(
            sequence.to_string(),
            Held {
                cache,
                context: held.context.saturating_add(fed),
                bytes,
                last: Instant::now(),
            },
        );
        Ok(answer)
    }

    /// Frees `sequence`'s cache: it ended, was cancelled or is being replayed. Whether the
    /// stage held it.
    pub fn end(&mut self, sequence: &str) -> bool {
        self.held.remove(sequence).is_some()
    }

    /// The context this stage holds for `sequence` (0 where it holds none).
    pub fn context(&self, sequence: &str) -> usize {
        self.held.get(sequence).map_or(0, |h| h.context)
    }

    pub fn stats(&self) -> StageStats {
        StageStats {
            sequences: self.held.len(),
            tokens: self
                .held
                .values()
                .fold(0usize, |n, h| n.saturating_add(h.context)),
            kv_bytes: self
                .held
                .values()
                .fold(0u64, |n, h| n.saturating_add(h.bytes)),
            steps: self.steps,
        }
    }

    /// Refuses a step past the stage's bounds, before anything runs; a new sequence that
    /// finds the stage full takes the place of one idle past `max_idle`.
    fn admit(&mut self, sequence: &str, fed: usize) -> Result<(), StageError> {
        let l = self.limits;
        let own = self.held.get(sequence).map(|h| (h.context, h.bytes));
        if own.is_none() && l.max_sequences > 0 && self.held.len() >= l.max_sequences {
            self.evict_idle();
            if self.held.len() >= l.max_sequences {
                return Err(StageError::Busy(format!(
                    "the stage holds {} sequences, its most: try again when one ends",
                    self.held.len()
                )));
            }
        }
        let (context, bytes) = own.unwrap_or((0, 0));
        let context = context.saturating_add(fed);
        if l.max_context > 0 && context > l.max_context {
            return Err(StageError::TooLong(format!(
                "sequence '{sequence}' would hold {context} tokens, past the stage's context of {}",
                l.max_context
            )));
        }
        if l.max_bytes > 0 {
            let stats = self.stats();
            // Known from the cache's declared types, else as much a token as held now.
            let per_token = match self.per_token {
                0 => stats.kv_bytes.checked_div(stats.tokens as u64).unwrap_or(0),
                n => n,
            };
            let grows_by = per_token.saturating_mul(fed as u64);
            let alone = bytes.saturating_add(grows_by);
            if alone > l.max_bytes {
                return Err(StageError::TooLong(format!(
                    "sequence '{sequence}' would hold {alone} bytes of KV cache, past the stage's {} bytes",
                    l.max_bytes
                )));
            }
            let grown = stats.kv_bytes.saturating_add(grows_by);
            if grown > l.max_bytes {
                return Err(StageError::Busy(format!(
                    "the stage's KV cache would grow to {grown} bytes, past its {} bytes: try again when a sequence ends",
                    l.max_bytes
                )));
            }
        }
        Ok(())
    }

    fn evict_idle(&mut self) {
        let idle = self.limits.max_idle;
        if idle.is_zero() {
            return;
        }
        let now = Instant::now();
        self.held.retain(|_, h| now.duration_since(h.last) < idle);
    }
}

/// Token ids, masks and positions come as int64 (as exporters mostly declare them); a part
/// that declares int32 gets them narrowed, a value past int32 refused.
fn narrow_ids(path: &Path, name: &str, t: &mut HostTensor) -> Result<(), RuntimeError> {
    if t.elem != ElemType::I64 {
        return Ok(());
    }
    let mut data = Vec::with_capacity(t.data.len() / 2);
    for chunk in t.data.chunks_exact(8) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        let v = i32::try_from(i64::from_le_bytes(b)).map_err(|_| RuntimeError::Model {
            path: path.to_path_buf(),
            message: format!(
                "input '{name}' is int32 and {} is past it",
                i64::from_le_bytes(b)
            ),
        })?;
        data.extend_from_slice(&v.to_le_bytes());
    }
    t.elem = ElemType::I32;
    t.data = data;
    Ok(())
}

/// Cache bytes one more token of context adds to a state input of type `ty` at batch 1, or
/// `None` where the type does not say.
fn bytes_per_token(ty: &TensorType) -> Option<u64> {
    let dims = ty.shape.as_deref()?;
    let width = u64::from(ty.elem?.bits()?).div_ceil(8);
    let mut n = width;
    let mut growing = 0;
    for (k, d) in dims.iter().enumerate() {
        match d {
            Dim::Fixed(v) => n = n.checked_mul(u64::try_from(*v).ok()?)?,
            _ if grows(dims, k) => growing += 1,
            _ => {}
        }
    }
    (growing == 1).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "layer": `present = concat(past, x)` along the sequence, `y = x + 1`.
    struct Concat;

    impl Session for Concat {
        fn run(
            &mut self,
            inputs: &[(String, HostTensor)],
        ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
            let here = std::path::Path::new("concat");
            let x = RuntimeError::given(inputs, "x", here)?;
            let mut present = RuntimeError::given(inputs, "past", here)?.clone();
            present.shape[1] += x.shape[1];
            present.data.extend_from_slice(&x.data);
            let mut y = x.clone();
            y.data.iter_mut().for_each(|b| *b = b.wrapping_add(1));
            Ok(vec![("present".into(), present), ("y".into(), y)])
        }
    }

    fn stage(limits: Limits) -> Stage {
        let ty = |dims: Vec<Dim>| TensorType {
            elem: Some(ElemType::U8),
            shape: Some(dims),
        };
        Stage::new(
            Box::new(Concat),
            Path::new("stage_part"),
            vec![
                (
                    "x".into(),
                    ty(vec![Dim::Fixed(1), Dim::Param("new".into())]),
                ),
                (
                    "past".into(),
                    ty(vec![Dim::Fixed(1), Dim::Param("past".into())]),
                ),
            ],
            &[
                StatePair {
                    input: "past".into(),
                    output: "present".into(),
                },
                StatePair {
                    input: "other".into(),
                    output: "other_out".into(),
                },
            ],
            limits,
        )
    }

    fn x(values: &[u8]) -> Vec<(String, HostTensor)> {
        vec![(
            "x".into(),
            HostTensor {
                elem: ElemType::U8,
                shape: vec![1, values.len()],
                data: values.to_vec(),
            },
        )]
    }

    #[test]
    fn each_sequence_keeps_its_own_cache_and_only_the_rest_is_answered() {
        let mut s = stage(Limits::default());
        assert_eq!(
            s.pairs().len(),
            1,
            "a pair the part does not read is not its"
        );
        assert_eq!(s.per_token, 1, "u8 [1, past]: a byte a token");
        let a = s.step("a", None, 3, x(&[1, 2, 3])).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].0, "y");
        assert_eq!(a[0].1.data, vec![2, 3, 4]);
        s.step("b", Some(0), 1, x(&[9])).unwrap();
        s.step("a", Some(3), 1, x(&[4])).unwrap();
        assert_eq!(s.context("a"), 4);
        assert_eq!(s.context("b"), 1);
        assert_eq!(
            s.stats(),
            StageStats {
                sequences: 2,
                tokens: 5,
                kv_bytes: 5,
                steps: 3
            }
        );
        // a's cache is 1,2,3,4: one more step sees all of it.
        s.step("a", None, 1, x(&[5])).unwrap();
        assert_eq!(s.held["a"].cache[0].1.data, vec![1, 2, 3, 4, 5]);
        assert!(s.end("a"));
        assert!(!s.end("a"));
        assert_eq!(s.stats().sequences, 1);
    }

    #[test]
    fn steps_past_the_bounds_are_refused_and_change_nothing() {
        let mut s = stage(Limits {
            max_sequences: 2,
            max_context: 4,
            ..Limits::default()
        });
        s.step("a", None, 3, x(&[1, 2, 3])).unwrap();
        let long = s.step("a", None, 2, x(&[4, 5])).unwrap_err();
        assert_eq!(long.status(), 413);
        assert!(long.to_string().contains("5 tokens"), "{long}");
        assert_eq!(s.context("a"), 3);
        s.step("b", None, 1, x(&[1])).unwrap();
        let busy = s.step("c", None, 1, x(&[1])).unwrap_err();
        assert_eq!(busy.status(), 429);
        s.end("b");
        s.step("c", None, 1, x(&[1])).unwrap();

        // Bytes: known a token from the declared type, so even the first sequence is bounded.
        let mut s = stage(Limits {
            max_bytes: 6,
            ..Limits::default()
        });
        assert_eq!(s.step("a", None, 7, x(&[0; 7])).unwrap_err().status(), 413);
        s.step("a", None, 4, x(&[1, 2, 3, 4])).unwrap();
        assert_eq!(
            s.step("b", None, 3, x(&[1, 2, 3])).unwrap_err().status(),
            429
        );
        s.step("b", None, 2, x(&[1, 2])).unwrap();
        assert_eq!(s.stats().kv_bytes, 6);
        // Alone past the budget is too long (413), not a wait for others (429).
        s.end("b");
        assert_eq!(
            s.step("a", None, 3, x(&[1, 2, 3])).unwrap_err().status(),
            413
        );
    }

    #[test]
    fn a_step_that_assumes_another_past_is_refused_and_past_zero_starts_afresh() {
        let mut s = stage(Limits::default());
        s.step("a", Some(0), 2, x(&[1, 2])).unwrap();
        let e = s.step("a", Some(5), 1, x(&[3])).unwrap_err();
        assert_eq!(e.status(), 409);
        assert!(e.to_string().contains("holds 2 tokens"), "{e}");
        assert_eq!(s.step("b", Some(1), 1, x(&[3])).unwrap_err().status(), 409);
        // A replay: the old cache goes, the new one is the replayed tokens.
        s.step("a", Some(0), 3, x(&[7, 8, 9])).unwrap();
        assert_eq!(s.held["a"].cache[0].1.data, vec![7, 8, 9]);
    }

    #[test]
    fn a_failed_run_leaves_the_sequence_as_it_was() {
        let mut s = stage(Limits::default());
        s.step("a", None, 2, x(&[1, 2])).unwrap();
        let err = s.step("a", None, 1, Vec::new()).unwrap_err();
        assert_eq!(err.status(), 500);
        assert_eq!(s.context("a"), 2);
        s.step("a", Some(2), 1, x(&[3])).unwrap();
        assert_eq!(s.held["a"].cache[0].1.data, vec![1, 2, 3]);
        // A first step that fails holds nothing.
        assert!(s.step("b", None, 1, Vec::new()).is_err());
        assert_eq!(s.context("b"), 0);
        assert_eq!(s.stats().sequences, 1);
    }

    #[test]
    fn int64_ids_are_narrowed_for_a_part_that_declares_int32() {
        let ids = |v: &[i64]| HostTensor {
            elem: ElemType::I64,
            shape: vec![1, v.len()],
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let mut t = ids(&[1, -2, 70000]);
        narrow_ids(Path::new("stage_part"), "input_ids", &mut t).unwrap();
        assert_eq!(t.elem, ElemType::I32);
        assert_eq!(t.shape, vec![1, 3]);
        let back: Vec<i32> = t
            .data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(back, vec![1, -2, 70000]);
        let mut big = ids(&[1 << 40]);
        let e = narrow_ids(Path::new("stage_part"), "input_ids", &mut big).unwrap_err();
        assert!(e.to_string().contains("1099511627776 is past it"), "{e}");
    }

    #[test]
    fn a_sequence_idle_past_max_idle_gives_its_place() {
        let mut s = stage(Limits {
            max_sequences: 1,
            max_idle: Duration::from_millis(20),
            ..Limits::default()
        });
        s.step("a", None, 1, x(&[1])).unwrap();
        assert_eq!(s.step("b", None, 1, x(&[1])).unwrap_err().status(), 429);
        std::thread::sleep(Duration::from_millis(30));
        s.step("b", None, 1, x(&[1])).unwrap();
        assert_eq!(s.context("a"), 0);
    }
}
