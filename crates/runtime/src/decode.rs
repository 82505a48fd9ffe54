//! Generation with a decoder: the prompt in one step (prefill), then one token per step. The
//! runner keeps each state pair's output and feeds it back as that input on the next step,
//! so a layer's KV cache stays where its part runs and never goes back to the caller.
//!
//! Inputs are fed as exporters declare them (Optimum, onnxruntime-genai): `input_ids` [batch,
//! new], `attention_mask` [batch, past + new] of ones, `position_ids` [batch, new] counting
//! on from the past; each state input starts empty along the dims the model leaves open.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use cleave_ir::words::{Arg, Message};
use cleave_ir::{grows, Dim, ElemType, StatePair, TensorType, XorShift64};

use crate::error::RuntimeError;
use crate::runner::{LoadedParts, PartStats};
use crate::tensor::HostTensor;
use crate::Session;

/// What runs one step: the parts of a partition, or the whole model in one session.
pub trait Steps {
    /// Every tensor the step produced, by name, and the bytes that crossed from one part to
    /// another on the way.
    fn step(
        &mut self,
        feeds: Vec<(String, HostTensor)>,
    ) -> Result<(HashMap<String, HostTensor>, u64), RuntimeError>;
}

impl Steps for LoadedParts {
    fn step(
        &mut self,
        feeds: Vec<(String, HostTensor)>,
    ) -> Result<(HashMap<String, HostTensor>, u64), RuntimeError> {
        let mut stats = vec![PartStats::default(); self.sessions.len()];
        let values = self.run_moving(feeds, &mut stats)?;
        Ok((values, stats.iter().map(|s| s.in_bytes).sum()))
    }
}

/// The whole model in one session.
pub struct Whole(pub Box<dyn Session>);

impl Steps for Whole {
    fn step(
        &mut self,
        feeds: Vec<(String, HostTensor)>,
    ) -> Result<(HashMap<String, HostTensor>, u64), RuntimeError> {
        Ok((self.0.run(&feeds)?.into_iter().collect(), 0))
    }
}

/// How the next token is chosen from the logits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0: greedy (the largest logit; the first of equal ones).
    pub temperature: f64,
    /// Keep the k likeliest tokens (0: all).
    pub top_k: usize,
    /// Keep the likeliest tokens whose probabilities first reach p (1: all).
    pub top_p: f64,
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

impl Sampling {
    /// Checks the figures, naming the one out of range.
    pub fn check(&self) -> Result<(), Message> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(Message::about(
                Arg::Temperature,
                self.temperature.to_string(),
                ": give 0 (greedy) or more",
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Message::about(
                Arg::TopP,
                self.top_p.to_string(),
                ": give a fraction in (0, 1]",
            ));
        }
        Ok(())
    }
}

/// The model's declared inputs and outputs, as generation needs them.
#[derive(Clone, Debug)]
pub struct DecoderSpec {
    /// The file errors name (the connection file, or the whole model).
    pub path: std::path::PathBuf,
    pub inputs: Vec<(String, TensorType)>,
    pub outputs: Vec<String>,
    pub state: Vec<StatePair>,
}

impl DecoderSpec {
    /// Whether generation can feed this model: the output that holds the logits, or what
    /// it cannot feed.
    pub fn check(&self) -> Result<String, Message> {
        if !self.inputs.iter().any(|(n, _)| n == "input_ids") {
            return Err(format!(
                "the model has no input 'input_ids' (its inputs: {}); cleave generate feeds decoders exported with input_ids",
                self.inputs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
            ).into());
        }
        for (name, ty) in &self.inputs {
            let state = self.state.iter().any(|p| &p.input == name);
            if !state && !KNOWN.contains(&name.as_str()) {
                return Err(Message::text(format!(
                    "input '{name}' is neither input_ids, attention_mask, position_ids nor a state's input: declare its pair with "
                ))
                .given(Arg::State, format!("{name}=OUTPUT")));
            }
            if !state && !matches!(ty.elem, Some(ElemType::I64 | ElemType::I32) | None) {
                return Err(format!(
                    "input '{name}' is {ty}; cleave generate feeds int64 or int32 token ids"
                )
                .into());
            }
            if state && ty.shape.is_none() {
                return Err(format!(
                    "state input '{name}' has no declared shape, so its empty first value is unknown"
                ).into());
            }
        }
        let logits = if self.outputs.iter().any(|o| o == "logits") {
            "logits".to_string()
        } else {
            self.outputs
                .iter()
                .find(|o| !self.state.iter().any(|p| &p.output == *o))
                .cloned()
                .ok_or("the model has no output besides its state, so no logits")?
        };
        Ok(logits)
    }
}

/// What one step did.
#[derive(Clone, Debug)]
pub struct StepReport {
    /// Tokens fed (the prompt at prefill, then one).
    pub fed: usize,
    /// The logits at the last position.
    pub logits: Vec<f32>,
    pub elapsed: Duration,
    /// Bytes handed from part to part in this step.
    pub hop_bytes: u64,
    /// Bytes of cache the parts hold after it.
    pub state_bytes: u64,
}

/// A generation in progress: call [`Generation::next_token`] until it gives `None`.
pub struct Generation<S: Steps> {
    steps: S,
    spec: DecoderSpec,
    logits: String,
    sampling: Sampling,
    rng: XorShift64,
    stop: Vec<i64>,
    max_new: usize,
    /// The tokens the next step feeds: the prompt, then the last token.
    pending: Vec<i64>,
    past: usize,
    produced: usize,
    cache: HashMap<String, HostTensor>,
    done: bool,
    /// One per step, prefill first.
    pub reports: Vec<StepReport>,
}

const KNOWN: [&str; 3] = ["input_ids", "attention_mask", "position_ids"];

impl<S: Steps> Generation<S> {
    /// A generation of at most `max_new` tokens after `prompt`, ending early at a token of
    /// `stop`. Refuses a model it cannot feed, naming the input.
    pub fn new(
        steps: S,
        spec: DecoderSpec,
        prompt: &[i64],
        max_new: usize,
        stop: &[i64],
        sampling: Sampling,
    ) -> Result<Generation<S>, String> {
        sampling.check().map_err(|m| m.to_string())?;
        if prompt.is_empty() {
            return Err("the prompt has no token".into());
        }
        let logits = spec.check().map_err(|m| m.to_string())?;
        Ok(Generation {
            steps,
            logits,
            rng: XorShift64::seeded(sampling.seed),
            sampling,
            stop: stop.to_vec(),
            max_new,
            pending: prompt.to_vec(),
            past: 0,
            produced: 0,
            cache: HashMap::new(),
            done: max_new == 0,
            reports: Vec::new(),
            spec,
        })
    }

    /// The next token, or `None` once `max_new` are out or a stop token came.
    pub fn next_token(&mut self) -> Result<Option<i64>, RuntimeError> {
        if self.done {
            return Ok(None);
        }
        let report = self.forward()?;
        let token = choose(&report.logits, &self.sampling, &mut self.rng);
        self.reports.push(report);
        self.produced += 1;
        self.pending = vec![token];
        self.done = self.produced >= self.max_new || self.stop.contains(&token);
        Ok(Some(token))
    }

    /// The steps, for another generation on the same sessions.
    pub fn into_steps(self) -> S {
        self.steps
    }

    fn forward(&mut self) -> Result<StepReport, RuntimeError> {
        let n = self.pending.len();
        let mut feeds = Vec::with_capacity(self.spec.inputs.len());
        for (name, ty) in &self.spec.inputs {
            let elem = ty.elem.unwrap_or(ElemType::I64);
            let t = match name.as_str() {
                "input_ids" => ids(elem, &[1, n], self.pending.iter().copied()),
                "attention_mask" => {
                    let total = self.past + n;
                    ids(elem, &[1, total], std::iter::repeat_n(1, total))
                }
                "position_ids" => ids(elem, &[1, n], (self.past..self.past + n).map(|p| p as i64)),
                _ => match self.cache.remove(name) {
                    Some(t) => t,
                    None => empty_state(&self.spec.path, name, ty)?,
                },
            };
            feeds.push((name.clone(), t));
        }
        let start = Instant::now();
        let (mut values, hop_bytes) = self.steps.step(feeds)?;
        let elapsed = start.elapsed();
        for p in &self.spec.state {
            let t = values
                .remove(&p.output)
                .ok_or_else(|| RuntimeError::Model {
                    path: self.spec.path.clone(),
                    message: format!("no part produced the state output '{}'", p.output),
                })?;
            self.cache.insert(p.input.clone(), t);
        }
        let logits = values
            .get(&self.logits)
            .ok_or_else(|| RuntimeError::Model {
                path: self.spec.path.clone(),
                message: format!("no part produced the logits '{}'", self.logits),
            })?;
        let all = logits.to_f64().ok_or_else(|| RuntimeError::Model {
            path: self.spec.path.clone(),
            message: format!("'{}' is {}, not logits", self.logits, logits.elem),
        })?;
        let vocab = logits.shape.last().copied().unwrap_or(0);
        if vocab == 0 || all.len() < vocab {
            return Err(RuntimeError::Model {
                path: self.spec.path.clone(),
                message: format!("'{}' has shape {:?}: no logits", self.logits, logits.shape),
            });
        }
        let last: Vec<f32> = all[all.len() - vocab..].iter().map(|&v| v as f32).collect();
        self.past += n;
        Ok(StepReport {
            fed: n,
            logits: last,
            elapsed,
            hop_bytes,
            state_bytes: self.cache.values().map(|t| t.data.len() as u64).sum(),
        })
    }
}

fn ids(elem: ElemType, shape: &[usize], values: impl Iterator<Item = i64>) -> HostTensor {
    let data = match elem {
        ElemType::I32 => values.flat_map(|v| (v as i32).to_le_bytes()).collect(),
        _ => values.flat_map(i64::to_le_bytes).collect(),
    };
    HostTensor {
        elem: if elem == ElemType::I32 {
            ElemType::I32
        } else {
            ElemType::I64
        },
        shape: shape.to_vec(),
        data,
    }
}

/// A state input before the first step: batch 1, nothing along the dims that grow.
pub(crate) fn empty_state(
    path: &std::path::Path,
    name: &str,
    ty: &TensorType,
) -> Result<HostTensor, RuntimeError> {
    let dims = ty.shape.as_deref().unwrap_or_default();
    let elem = ty.elem.ok_or_else(|| RuntimeError::Model {
        path: path.to_path_buf(),
        message: format!("state input '{name}' has no element type"),
    })?;
    let shape: Vec<usize> = dims
        .iter()
        .enumerate()
        .map(|(k, d)| match d {
            Dim::Fixed(n) => usize::try_from(*n).unwrap_or(0),
            _ if grows(dims, k) => 0,
            _ => 1,
        })
        .collect();
    let width = elem.bits().map_or(1, |b| (b as usize).div_ceil(8));
    let mut t = HostTensor {
        elem,
        shape,
        data: Vec::new(),
    };
    // Fixed dims that make a non-empty state need values: zeros.
    let bytes = t.byte_len(width).ok_or_else(|| RuntimeError::Model {
        path: path.to_path_buf(),
        message: format!("state input '{name}': its declared shape overflows"),
    })?;
    t.data = vec![0; bytes];
    Ok(t)
}

/// The token `sampling` picks from `logits`.
pub fn choose(logits: &[f32], sampling: &Sampling, rng: &mut XorShift64) -> i64 {
    let greedy = || {
        let mut best = 0;
        for (i, &v) in logits.iter().enumerate() {
            if v > logits[best] {
                best = i;
            }
        }
        best as i64
    };
    if sampling.temperature == 0.0 || logits.is_empty() {
        return greedy();
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if sampling.top_k > 0 {
        order.truncate(sampling.top_k);
    }
    let top = f64::from(logits[order[0]]);
    let mut probs: Vec<f64> = order
        .iter()
        .map(|&i| ((f64::from(logits[i]) - top) / sampling.temperature).exp())
        .collect();
    let sum: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= sum);
    let mut kept = 0.0;
    let mut n = 0;
    while n < probs.len() {
        kept += probs[n];
        n += 1;
        if kept >= sampling.top_p {
            break;
        }
    }
    let r = rng.unit() * kept;
    let mut acc = 0.0;
    for (k, p) in probs[..n].iter().enumerate() {
        acc += p;
        if r < acc {
            return order[k] as i64;
        }
    }
    order[n - 1] as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_largest() {
        let s = Sampling::default();
        let mut rng = XorShift64::seeded(0);
        assert_eq!(choose(&[0.1, 3.0, 3.0, -1.0], &s, &mut rng), 1);
    }

    #[test]
    fn sampling_keeps_to_top_k_and_top_p_and_repeats_with_its_seed() {
        let logits = [2.0, 1.9, 1.8, -5.0, 0.0];
        let draw = |top_k, top_p, seed| {
            let s = Sampling {
                temperature: 1.0,
                top_k,
                top_p,
                seed,
            };
            let mut rng = XorShift64::seeded(seed);
            (0..200)
                .map(|_| choose(&logits, &s, &mut rng))
                .collect::<Vec<_>>()
        };
        let k2 = draw(2, 1.0, 7);
        assert!(k2.iter().all(|&t| t == 0 || t == 1));
        assert!(k2.contains(&0) && k2.contains(&1));
        // The top two hold about 0.62 of the mass: p = 0.5 keeps both, no more.
        assert!(draw(0, 0.5, 7).iter().all(|&t| t == 0 || t == 1));
        assert!(draw(0, 1.0, 7).contains(&4));
        assert_eq!(draw(0, 1.0, 9), draw(0, 1.0, 9));
        assert_ne!(draw(0, 1.0, 9), draw(0, 1.0, 10));
    }

    #[test]
    fn a_state_starts_empty_along_its_open_dims() {
        let ty = TensorType {
            elem: Some(ElemType::F32),
            shape: Some(vec![
                Dim::Param("batch".into()),
                Dim::Fixed(2),
                Dim::Param("past".into()),
                Dim::Fixed(8),
            ]),
        };
        let t = empty_state(std::path::Path::new("m"), "k", &ty).unwrap();
        assert_eq!(t.shape, vec![1, 2, 0, 8]);
        assert!(t.data.is_empty());
    }
}
