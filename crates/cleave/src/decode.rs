//! Generation with a decoder's parts, in process (`cleave generate`, `verify --generate`,
//! Python's `Runner.generate`): the facade finds what to feed from the source model and the
//! state pairs the connection file records.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cleave_ir::{state_pairs, StatePair};
use cleave_runtime::decode::{DecoderSpec, Generation, Sampling, Steps, Whole};
use cleave_runtime::runner::read_conn;
use cleave_runtime::EngineKind;

use crate::{Arg, Error, Message};

/// What to generate.
#[derive(Clone, Debug, Default)]
pub struct GenerateRequest {
    pub prompt: Vec<i64>,
    pub max_new_tokens: usize,
    /// Tokens that end the generation (given back as its last).
    pub stop: Vec<i64>,
    pub sampling: Sampling,
    /// State pairs beyond those the connection file records and the names show.
    pub state: Vec<StatePair>,
}

/// The whole model's file a connection file names.
pub fn conn_source_path(conn: &Path) -> Result<PathBuf, Error> {
    let c = read_conn(conn)?;
    let dir = conn.parent().unwrap_or(Path::new("."));
    Ok(dir.join(&c.source.file))
}

/// What `conn`'s source takes and gives, with its state pairs: those `conn` records, those
/// `declared` adds, and those the names show. Refuses a model generation cannot feed (an
/// input it does not know, no logits), naming what is missing, before any part loads.
pub fn decoder_spec(conn: &Path, declared: &[StatePair]) -> Result<DecoderSpec, Error> {
    let c = read_conn(conn)?;
    let source = crate::conn_source(conn)?;
    let g = &source.model().graph;
    let mut state = state_pairs(g, declared)
        .map_err(|e| Error::request(Message::about_arg(Arg::State, format!(": {e}"))))?;
    let known: BTreeSet<String> = state.iter().map(|p| p.input.clone()).collect();
    for (input, output) in c.source.state.iter().flatten() {
        if !known.contains(input) {
            state.push(StatePair {
                input: input.clone(),
                output: output.clone(),
            });
        }
    }
    let spec = DecoderSpec {
        path: conn.to_path_buf(),
        inputs: g
            .inputs
            .iter()
            .map(|&v| (g.value(v).name.to_string(), g.value(v).ty.clone()))
            .collect(),
        outputs: g
            .outputs
            .iter()
            .map(|&v| g.value(v).name.to_string())
            .collect(),
        state,
    };
    spec.check().map_err(|message| Error::Unsupported {
        path: conn.to_path_buf(),
        node: None,
        message,
    })?;
    Ok(spec)
}

fn start<S: Steps>(
    steps: S,
    spec: DecoderSpec,
    req: &GenerateRequest,
) -> Result<Generation<S>, Error> {
    req.sampling.check().map_err(Error::request)?;
    if req.prompt.is_empty() {
        return Err(Error::usage("the prompt has no token"));
    }
    let path = spec.path.clone();
    Generation::new(
        steps,
        spec,
        &req.prompt,
        req.max_new_tokens,
        &req.stop,
        req.sampling,
    )
    .map_err(|message| Error::Unsupported {
        path,
        node: None,
        message: message.into(),
    })
}

/// A generation through `steps` (the parts of the partition `spec` was read from, loaded).
pub fn generation<S: Steps>(
    steps: S,
    spec: DecoderSpec,
    req: &GenerateRequest,
) -> Result<Generation<S>, Error> {
    start(steps, spec, req)
}

/// The same generation through the whole model `conn` names, on `engine`: the reference a
/// split's tokens are compared with.
pub fn whole_generation(
    conn: &Path,
    engine: &EngineKind,
    req: &GenerateRequest,
) -> Result<Generation<Whole>, Error> {
    let mut spec = decoder_spec(conn, &req.state)?;
    let model = conn_source_path(conn)?;
    let session = crate::engine(engine.clone())?.load_with(&model, crate::run::for_generation())?;
    spec.path = model;
    start(Whole(session), spec, req)
}
