use std::path::{Path, PathBuf};

use crate::{to_dot, to_html, to_markdown, Report};

#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("cannot write: {message}")]
    Write { path: PathBuf, message: String },
}

impl ViewError {
    pub fn path(&self) -> &Path {
        match self {
            ViewError::Write { path, .. } => path,
        }
    }
}

/// The files [`write_views`] wrote.
#[derive(Clone, Debug)]
pub struct Written {
    pub markdown: PathBuf,
    pub dot: PathBuf,
    pub html: PathBuf,
}

/// Writes `stem.partition.md`, `stem.dot` and `stem.report.html` into `dir`, each to a temporary
/// file renamed into place.
pub fn write_views(r: &Report, dir: &Path, stem: &str) -> Result<Written, ViewError> {
    let w = Written {
        markdown: dir.join(format!("{stem}.partition.md")),
        dot: dir.join(format!("{stem}.dot")),
        html: dir.join(format!("{stem}.report.html")),
    };
    for (path, text) in [
        (&w.markdown, to_markdown(r)),
        (&w.dot, to_dot(r)),
        (&w.html, to_html(r)),
    ] {
        cleave_files::write_atomic(path, text.as_bytes()).map_err(|e| {
            let message = e.source.to_string();
            ViewError::Write {
                path: path.clone(),
                message,
            }
        })?;
    }
    Ok(w)
}
