//! Parts against the whole model, tensor by tensor.

use crate::tensor::Diff;

/// One compared tensor.
#[derive(Clone, Debug)]
pub struct Row {
    pub tensor: String,
    /// `true` for a model output, `false` for a boundary tensor between parts.
    pub is_output: bool,
    pub diff: Diff,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub rows: Vec<Row>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.diff.beyond == 0)
    }
}
