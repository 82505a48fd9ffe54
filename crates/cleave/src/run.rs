//! Running written parts on the engines `cleave-engines` links.

use std::path::Path;

use cleave_frontend::{Computed, Evaluator};
use cleave_runtime::runner::{self, LoadedParts};
use cleave_runtime::{Engine, EngineKind, EngineMap};

use crate::Error;

/// The engine of a kind (tract in process; ONNX Runtime, LiteRT, OpenVINO loaded at run time).
pub fn engine(kind: EngineKind) -> Result<Box<dyn Engine>, Error> {
    Ok(cleave_engines::engine(kind)?)
}

/// Loads every part of a connection file into the engine `engines` picks for its backend.
/// `single_thread` keeps each engine on one core (pipelined workers).
pub fn load_parts(
    conn: &Path,
    engines: &EngineMap,
    single_thread: bool,
) -> Result<LoadedParts, Error> {
    Ok(runner::load_parts(
        conn,
        engines,
        &cleave_engines::engine,
        single_thread,
    )?)
}

/// The source model a connection file names, loaded and typed.
pub fn conn_source(conn: &Path) -> Result<Box<dyn cleave_frontend::Source>, Error> {
    let c = runner::read_conn(conn)?;
    let dir = conn.parent().unwrap_or(Path::new("."));
    crate::load(&dir.join(&c.source.file))
}

/// Constant folding on the engines cleave links: for ONNX, ONNX Runtime when its library is
/// found (the engine whose folding the EP tables assume), tract otherwise or when ONNX Runtime
/// refuses the constants; for TFLite, LiteRT. Engines are made per model file, as its format
/// asks (the run-time libraries are loaded once per process either way).
pub struct EngineEvaluator {
    _private: (),
}

impl EngineEvaluator {
    pub fn new() -> EngineEvaluator {
        EngineEvaluator { _private: () }
    }
}

impl Default for EngineEvaluator {
    fn default() -> Self {
        EngineEvaluator::new()
    }
}

impl Evaluator for EngineEvaluator {
    fn evaluate(&self, model: &Path) -> Result<Vec<Computed>, String> {
        let mut why = Vec::new();
        let engines = EngineKind::candidates(model)
            .iter()
            .filter_map(|k| cleave_engines::engine(k.clone()).ok());
        for e in engines {
            let run = e.load(model, false).and_then(|mut s| s.run(&[]));
            match run {
                Ok(outs) => {
                    return Ok(outs
                        .into_iter()
                        .map(|(name, t)| Computed {
                            name,
                            elem: t.elem,
                            dims: t.shape,
                            data: t.data,
                        })
                        .collect())
                }
                Err(err) => why.push(format!("{}: {err}", e.name())),
            }
        }
        if why.is_empty() {
            why.push("no engine could be loaded".into());
        }
        Err(why.join("; "))
    }
}
