//! `cleave verify --generate N`: a decoder's parts generate as the whole model does, token for
//! token, with each step's logits within tolerance.

use std::path::{Path, PathBuf};

use cleave::runtime::decode::Sampling;
use cleave::runtime::verify::Tolerance;
use cleave::runtime::HostTensor;

use crate::generate_cmd::{measured, PromptArgs};
use crate::run_cmd::{engines, load_decoder_parts, runtime_fail};
use crate::setup::DeviceArgs;
use crate::Fail;

pub struct GenerateCheck<'a> {
    pub model: &'a Path,
    pub conn: Option<&'a Path>,
    pub devices: &'a DeviceArgs,
    pub tokens: usize,
    pub prompt: &'a PromptArgs,
    pub engines: &'a [(String, String)],
    pub reference: Option<&'a str>,
    pub tolerance: Tolerance,
    pub json: bool,
}

fn logits(v: &[f32]) -> HostTensor {
    HostTensor {
        elem: cleave::ir::ElemType::F32,
        shape: vec![v.len()],
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// Whether the parts' tokens equal the whole model's and every step's logits match.
pub fn run(a: GenerateCheck) -> Result<bool, Fail> {
    let tmp = cleave::workdir::private_tempdir("cleave-")
        .map_err(|e| Fail::usage(format!("cannot make a temporary folder: {e}")))?;
    let conn: PathBuf = match a.conn {
        Some(c) => c.to_path_buf(),
        None => crate::partition_cmd::partition_into(a.model, a.devices, tmp.path(), false)?,
    };
    let same = |p: &Path| p.canonicalize().ok();
    let source = cleave::conn_source_path(&conn)?;
    if same(&source) != same(a.model) {
        return Err(Fail::input(
            &conn,
            format!("partitions {}, not {}", source.display(), a.model.display()),
        ));
    }
    let codec = a.prompt.codec(&conn)?;
    let req = a.prompt.request(
        a.tokens,
        Sampling::default(),
        &a.devices.state,
        codec.as_ref(),
    )?;
    let reference = match a.reference {
        Some(r) => cleave::parse_engine("--reference", r)?,
        None => cleave::default_engine(a.model)?,
    };
    let spec = cleave::decoder_spec(&conn, &req.state)?;
    let parts = load_decoder_parts(&conn, &engines(a.engines)?)?;
    let n_parts = parts.sessions.len();
    let mut split = cleave::generation(parts, spec, &req)?;
    let mut whole = cleave::whole_generation(&conn, &reference, &req)?;
    // Step by step in turn, so that whatever else the machine does slows both alike.
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    loop {
        let a = split.next_token().map_err(runtime_fail)?;
        let b = whole.next_token().map_err(runtime_fail)?;
        mine.extend(a);
        theirs.extend(b);
        if a.is_none() && b.is_none() {
            break;
        }
    }
    let got = measured(&split, mine);
    let want = measured(&whole, theirs);
    let mut worst: f64 = 0.0;
    let mut failed_step = None;
    for (k, (s, w)) in split.reports.iter().zip(&whole.reports).enumerate() {
        let d = logits(&s.logits).diff(&logits(&w.logits), 0.0, 0.0);
        worst = worst.max(d.rel_l2);
        let ok = match a.tolerance {
            Tolerance::Norm(tol) => d.rel_l2 <= tol,
            Tolerance::Elementwise { rtol, atol } => {
                logits(&s.logits)
                    .diff(&logits(&w.logits), rtol, atol)
                    .beyond
                    == 0
            }
        };
        if !ok && failed_step.is_none() {
            failed_step = Some(k);
        }
    }
    let passed = got.tokens == want.tokens && failed_step.is_none();
    let hop = got.hop_bytes.iter().max().copied().unwrap_or(0);
    if a.json {
        let v = serde_json::json!({
            "passed": passed,
            "reference": reference.label(),
            "parts": n_parts,
            "tokens": got.tokens,
            "whole_tokens": want.tokens,
            "largest_logits_rel_l2": worst,
            "first_step_beyond_tolerance": failed_step,
            "per_token_ms": got.per_token_ms(),
            "whole_per_token_ms": want.per_token_ms(),
            "hop_bytes_per_token": got.hop_bytes,
            "state_bytes": got.state_bytes,
        });
        println!("{v}");
    } else {
        let verdict = if passed { "equal to" } else { "DIFFER from" };
        println!(
            "verify --generate: {} tokens from {n_parts} parts {verdict} the whole model's ({}); largest relative L2 error of a step's logits {worst:.2e} ({}), first beyond it: {}",
            got.tokens.len(),
            reference.label(),
            a.tolerance.describe(),
            failed_step.map_or("none".to_string(), |k| format!("step {k}"))
        );
        if got.tokens != want.tokens {
            println!("  parts: {:?}\n  whole: {:?}", got.tokens, want.tokens);
        }
        println!(
            "  per token: {:.2} ms split, {:.2} ms whole (medians); {hop} bytes between parts per token; {} bytes of cache in the parts",
            got.per_token_ms(),
            want.per_token_ms(),
            got.state_bytes
        );
    }
    Ok(passed)
}
