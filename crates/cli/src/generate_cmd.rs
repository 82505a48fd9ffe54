//! `cleave generate`: tokens from a decoder's parts, in process, streamed as they come.

use std::io::Write;

use cleave::runtime::decode::{Generation, Sampling, Steps};
use cleave::GenerateRequest;

use crate::run_cmd::{engines, load_decoder_parts, runtime_fail};
use crate::Fail;

/// What to generate, as `generate` and `verify --generate` take it.
#[derive(clap::Args, Debug, Clone)]
pub struct PromptArgs {
    /// The prompt as token ids, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "ID,ID,...", default_values_t = [1i64, 2, 3])]
    pub prompt_ids: Vec<i64>,
    /// The prompt as text, encoded by the tokenizer (then the tokens are printed as text).
    #[arg(long, value_name = "TEXT", conflicts_with = "prompt_ids")]
    pub prompt: Option<String>,
    /// The tokenizer (Hugging Face's tokenizer.json) for --prompt. Default: tokenizer.json
    /// beside the source model.
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<std::path::PathBuf>,
}

/// How tokens are sampled.
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// 0 takes the likeliest token (greedy); above 0 samples from softmax(logits / T).
    #[arg(long, default_value_t = 0.0, value_name = "T")]
    pub temperature: f64,
    /// Sample among the K likeliest tokens only (0: all).
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub top_k: usize,
    /// Sample among the likeliest tokens whose probabilities first reach P (1: all).
    #[arg(long, default_value_t = 1.0, value_name = "P")]
    pub top_p: f64,
    /// Seed of the sampler: the same seed gives the same tokens.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl SamplingArgs {
    pub fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
        }
    }
}

impl PromptArgs {
    /// The tokenizer for text: `--tokenizer`, else the one beside the source when the
    /// prompt is text (where none is, the error says where it was looked for).
    pub fn codec(&self, conn: &std::path::Path) -> Result<Option<cleave::TextCodec>, Fail> {
        let path = match (&self.tokenizer, &self.prompt) {
            (Some(p), _) => p.clone(),
            (None, None) => return Ok(None),
            (None, Some(_)) => match cleave::TextCodec::beside(conn)? {
                Some(p) => p,
                None => {
                    let source = cleave::conn_source_path(conn)?;
                    let source = source.canonicalize().unwrap_or(source);
                    return Err(Fail::usage(format!(
                        "--prompt needs a tokenizer: none at {}; give --tokenizer FILE or --prompt-ids",
                        source.with_file_name("tokenizer.json").display()
                    )));
                }
            },
        };
        Ok(Some(cleave::TextCodec::load(&path)?))
    }

    pub fn request(
        &self,
        max_new_tokens: usize,
        sampling: Sampling,
        state: &[String],
        codec: Option<&cleave::TextCodec>,
    ) -> Result<GenerateRequest, Fail> {
        let prompt = match (&self.prompt, codec) {
            (Some(text), Some(c)) => c.encode(text)?,
            _ => self.prompt_ids.clone(),
        };
        Ok(GenerateRequest {
            prompt,
            max_new_tokens,
            stop: Vec::new(),
            sampling,
            state: crate::setup::parse_state(state)?,
        })
    }
}

/// What a whole generation measured: prefill, then each decode step.
pub struct Measured {
    pub tokens: Vec<i64>,
    pub prefill_ms: f64,
    pub decode_ms: Vec<f64>,
    /// Bytes from part to part per decode step.
    pub hop_bytes: Vec<u64>,
    pub state_bytes: u64,
}

impl Measured {
    pub fn per_token_ms(&self) -> f64 {
        median(&self.decode_ms)
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n => v[n / 2],
    }
}

/// Runs `g` to its end, calling `each` with every token as it comes.
pub fn drive<S: Steps>(g: &mut Generation<S>, mut each: impl FnMut(i64)) -> Result<Measured, Fail> {
    let mut tokens = Vec::new();
    while let Some(t) = g.next_token().map_err(runtime_fail)? {
        each(t);
        tokens.push(t);
    }
    Ok(measured(g, tokens))
}

/// What `g`'s steps measured, with the `tokens` it gave.
pub fn measured<S: Steps>(g: &Generation<S>, tokens: Vec<i64>) -> Measured {
    let ms = |r: &cleave::runtime::decode::StepReport| r.elapsed.as_secs_f64() * 1e3;
    let (first, rest) = g
        .reports
        .split_first()
        .map_or((None, &[][..]), |(f, r)| (Some(f), r));
    Measured {
        tokens,
        prefill_ms: first.map_or(0.0, ms),
        decode_ms: rest.iter().map(ms).collect(),
        hop_bytes: rest.iter().map(|r| r.hop_bytes).collect(),
        state_bytes: g.reports.last().map_or(0, |r| r.state_bytes),
    }
}

pub fn main(a: Args) -> Result<(), Fail> {
    let map = engines(&a.engine.engines)?;
    let codec = a.prompt.codec(&a.conn)?;
    let req = a.prompt.request(
        a.max_new_tokens,
        a.sampling.sampling(),
        &a.state,
        codec.as_ref(),
    )?;
    // Text out where the prompt came in as text.
    let text = codec.as_ref().filter(|_| a.prompt.prompt.is_some());
    let req = GenerateRequest {
        stop: a.stop_ids.clone(),
        ..req
    };
    let spec = cleave::decoder_spec(&a.conn, &req.state)?;
    let parts = load_decoder_parts(&a.conn, &map)?;
    let n_parts = parts.sessions.len();
    let mut g = cleave::generation(parts, spec, &req)?;
    let mut out = std::io::stdout().lock();
    let mut so_far: Vec<i64> = Vec::new();
    let mut shown = String::new();
    let mut failed = None;
    let m = drive(&mut g, |t| {
        so_far.push(t);
        if a.json {
            return;
        }
        // A closed stdout ends nothing here: the summary still goes to stderr.
        match text {
            // The text so far, decoded whole (a token may only complete a character with the
            // next): print what it adds.
            Some(c) => match c.decode(&so_far) {
                Ok(now) => {
                    let new = now.strip_prefix(shown.as_str()).unwrap_or(&now);
                    let _ = write!(out, "{new}");
                    shown = now;
                }
                Err(e) => failed = Some(e),
            },
            None => {
                let _ = write!(out, "{t} ");
            }
        }
        let _ = out.flush();
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    if a.json {
        let v = serde_json::json!({
            "tokens": m.tokens,
            "parts": n_parts,
            "prompt_tokens": req.prompt.len(),
            "prefill_ms": m.prefill_ms,
            "per_token_ms": m.per_token_ms(),
            "hop_bytes_per_token": m.hop_bytes,
            "state_bytes": m.state_bytes,
            "text": match text {
                Some(c) => Some(c.decode(&m.tokens)?),
                None => None,
            },
        });
        let _ = writeln!(out, "{v}");
    } else {
        let _ = writeln!(out);
        eprintln!(
            "{} tokens from {n_parts} parts: prefill of {} in {:.2} ms, then {:.2} ms a token (median); {} bytes between parts per token, {} bytes of cache held in the parts",
            m.tokens.len(),
            req.prompt.len(),
            m.prefill_ms,
            m.per_token_ms(),
            m.hop_bytes.iter().max().copied().unwrap_or(0),
            m.state_bytes
        );
    }
    Ok(())
}

// `cleave generate`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// A decoder's partition (stem.conn.json).
    pub conn: std::path::PathBuf,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// The most tokens to generate.
    #[arg(long, default_value_t = 16, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=100_000))]
    pub max_new_tokens: usize,
    /// Tokens that end the generation (the end-of-sequence id), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "ID,...")]
    pub stop_ids: Vec<i64>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Declare a decoder state pair the connection file does not record: the input IN takes,
    /// on the next step, the value the output OUT gave. Repeat per pair.
    #[arg(long = "state", value_name = "IN=OUT")]
    pub state: Vec<String>,
    #[command(flatten)]
    pub engine: crate::setup::EngineArgs,
    /// Print the tokens and the timings as one JSON object.
    #[arg(long)]
    pub json: bool,
}
