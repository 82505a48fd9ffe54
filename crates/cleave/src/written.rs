//! The last stage of a partition's life: the parts and ONE's connection files on disk
//! ([`Written`]); [`Written::load`] puts them into their engines to run.

use std::ops::Deref;

use cleave_frontend::Emitted;
use cleave_runtime::runner::LoadedParts;
use cleave_runtime::EngineMap;

use crate::Error;

/// What [`crate::Partitioned::write`] wrote: the connection files, each part's file and
/// boundary, the shared weights file, and notes for the user.
pub struct Written {
    emitted: Emitted,
}

impl From<Emitted> for Written {
    fn from(emitted: Emitted) -> Self {
        Written { emitted }
    }
}

/// The files as the front-end wrote them; `Written` adds only what comes next.
impl Deref for Written {
    type Target = Emitted;
    fn deref(&self) -> &Emitted {
        &self.emitted
    }
}

impl Written {
    /// The parts loaded into the engines `engines` names (each backend's default otherwise),
    /// single-threaded when asked, as `cleave run` and `verify` load them.
    pub fn load(&self, engines: &EngineMap, single_thread: bool) -> Result<LoadedParts, Error> {
        crate::load_parts(&self.emitted.conn_json, engines, single_thread)
    }

    /// The files as the front-end wrote them.
    pub fn into_emitted(self) -> Emitted {
        self.emitted
    }
}
