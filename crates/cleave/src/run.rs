//! Running written parts on the engines `cleave-engines` links.

use std::path::Path;

use cleave_frontend::{Computed, Evaluator};
use cleave_runtime::runner::{self, LoadedParts, ServedPart};
use cleave_runtime::{part_format, Engine, EngineKind, EngineMap, Registry, Threads};

use crate::{Arg, Error, Message};

/// The engines cleave links, by name and format: tract in process; ONNX Runtime, LiteRT and
/// OpenVINO loaded at run time.
pub fn engine_registry() -> &'static Registry {
    cleave_engines::registry()
}

/// From now on, the engines that parse model files they do not verify (LiteRT, onert) run
/// in worker processes that `launcher` starts, each calling [`engine_worker_main`]: a crash
/// inside one is an error naming the part, and this process goes on.
pub fn isolate_engines(launcher: cleave_engines::Launcher) {
    cleave_engines::set_launcher(launcher);
}

/// The body of an engine worker process, until the process that started it lets go; the exit
/// code.
pub fn engine_worker_main() -> i32 {
    cleave_engines::worker_main()
}

/// The engine of a kind.
pub fn engine(kind: EngineKind) -> Result<Box<dyn Engine>, Error> {
    Ok(engine_registry().make(&kind)?)
}

/// The engine `name` names (`ort`, `openvino:GPU`); `flag` says where the name came from.
pub fn parse_engine(flag: &str, name: &str) -> Result<EngineKind, Error> {
    engine_registry().parse(name).ok_or_else(|| {
        Error::usage(format!(
            "{flag} '{name}': unknown engine (engines: {})",
            engine_registry().names()
        ))
    })
}

/// One part loaded for serving on at most `threads` threads (`Threads::Any`: the engine's
/// own choice): on `engine` where the connection file records one, else on the engine
/// `backend` names, else on the first of its format's engines that loads it.
pub fn load_served_part(
    path: &Path,
    backend: &str,
    format: Option<&str>,
    engine: Option<&str>,
    threads: Threads,
) -> Result<ServedPart, Error> {
    Ok(runner::load_served(
        engine_registry(),
        path,
        backend,
        format,
        engine,
        threads,
    )?)
}

/// The engine that runs the whole model at `model` unless told otherwise.
pub fn default_engine(model: &Path) -> Result<EngineKind, Error> {
    let format = part_format(model, None);
    engine_registry().default_for(&format).ok_or_else(|| {
        Error::usage(format!(
            "no engine runs {format} models (engines: {})",
            engine_registry().names()
        ))
    })
}

/// `--engine BACKEND=ENGINE` pairs as a map (none: every part on its format's default).
pub fn engine_map(pairs: &[(String, String)]) -> Result<EngineMap, Error> {
    engine_registry().parse_map(pairs).map_err(|(k, why)| {
        let given = pairs
            .get(k)
            .map_or_else(String::new, |(b, e)| format!("{b}={e}"));
        Error::request(Message::about(Arg::Engines, given, format!(": {why}")))
    })
}

/// A `BACKEND=ENGINE` pair as the command line writes it (`npu=tract`).
pub fn parse_engine_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((b, e)) if !b.trim().is_empty() && !e.trim().is_empty() => {
            Ok((b.trim().to_string(), e.trim().to_string()))
        }
        _ => Err(format!("'{s}': expected BACKEND=ENGINE, e.g. npu=tract")),
    }
}

/// Loads every part of a connection file into the engine `engines` picks for its backend.
/// `single_thread` keeps each engine on one core (pipelined workers).
pub fn load_parts(
    conn: &Path,
    engines: &EngineMap,
    single_thread: bool,
) -> Result<LoadedParts, Error> {
    Ok(runner::load_parts(conn, engines, single_thread)?)
}

/// The parts of `conn` loaded for generation: each engine may rewrite a part for speed (ONNX
/// Runtime's graph optimizations), as served stages are, since a decoder's steps compare only
/// the logits with the whole model's.
pub fn load_decoder_parts(conn: &Path, engines: &EngineMap) -> Result<LoadedParts, Error> {
    Ok(runner::load_parts_with(conn, engines, for_generation())?)
}

/// How generation loads a model: every engine's default threads, optimized.
pub(crate) fn for_generation() -> cleave_runtime::LoadOptions {
    cleave_runtime::LoadOptions {
        threads: cleave_runtime::Threads::single(false),
        optimize: true,
        gpu: None,
    }
}

/// The source model a connection file names, loaded and typed.
pub fn conn_source(conn: &Path) -> Result<Box<dyn cleave_frontend::FormatModel>, Error> {
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
        let engines = engine_registry()
            .candidates(&part_format(model, None))
            .into_iter()
            .filter_map(|k| engine_registry().make(&k).ok());
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
