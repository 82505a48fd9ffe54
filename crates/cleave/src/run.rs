//! Running written parts on the engines `cleave-engines` links.

use std::path::Path;

use cleave_runtime::runner::{self, LoadedParts};
use cleave_runtime::{Engine, EngineKind, EngineMap};

use crate::Error;

/// The engine of a kind (tract in process, ONNX Runtime loaded at run time).
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
