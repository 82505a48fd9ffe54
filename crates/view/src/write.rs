use std::path::{Path, PathBuf};

use crate::explorer::to_model_explorer;
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
    /// `stem.model-explorer.json`, when the front-end knows Model Explorer's node ids.
    pub explorer: Option<PathBuf>,
}

/// Writes `stem.partition.md`, `stem.dot`, `stem.report.html` and, when `explorer_ids` are
/// known (Model Explorer's id of each source record), `stem.model-explorer.json` into `dir`,
/// each to a temporary file renamed into place.
pub fn write_views(
    r: &Report,
    dir: &Path,
    stem: &str,
    explorer_ids: &[Vec<(String, String)>],
) -> Result<Written, ViewError> {
    let overlay = to_model_explorer(r, explorer_ids);
    let w = Written {
        markdown: dir.join(format!("{stem}.partition.md")),
        dot: dir.join(format!("{stem}.dot")),
        html: dir.join(format!("{stem}.report.html")),
        explorer: overlay
            .as_ref()
            .map(|_| dir.join(format!("{stem}.model-explorer.json"))),
    };
    let mut files = vec![
        (&w.markdown, to_markdown(r)),
        (&w.dot, to_dot(r)),
        (&w.html, to_html(r)),
    ];
    if let (Some(path), Some(text)) = (&w.explorer, overlay) {
        files.push((path, text));
    }
    for (path, text) in files {
        cleave_workdir::write_atomic(path, text.as_bytes()).map_err(|e| {
            let message = e.source.to_string();
            ViewError::Write {
                path: path.clone(),
                message,
            }
        })?;
    }
    Ok(w)
}
