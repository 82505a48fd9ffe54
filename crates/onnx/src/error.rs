use std::path::PathBuf;

use cleave_ir::GraphError;

/// Errors of the ONNX front-end. Each names the file it concerns; the `Display` form is the
/// cause alone, so a caller can print `file: cause` on one line.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    #[error("cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("empty file, not an ONNX model")]
    Empty { path: PathBuf },
    #[error("not an ONNX model or truncated ({source})")]
    Decode {
        path: PathBuf,
        source: prost::DecodeError,
    },
    #[error("not an ONNX model: it has no graph")]
    NoGraph { path: PathBuf },
    #[error("invalid graph: {source}")]
    /// Boxed: a graph error names nodes and tensors, and would make every result large.
    Graph {
        path: PathBuf,
        source: Box<GraphError>,
    },
    #[error("invalid graph in function '{function}': {source}")]
    Function {
        path: PathBuf,
        function: String,
        source: Box<GraphError>,
    },
    #[error("tensor '{tensor}': external data {reason}")]
    External {
        path: PathBuf,
        tensor: String,
        reason: String,
    },
    #[error("cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("with its weights inside, the model would be {bytes} bytes, over protobuf's 2 GB limit; keep them external")]
    TooLarge { path: PathBuf, bytes: u64 },
    #[error("node '{node}' has no record in the model's node list")]
    NoRecord { path: PathBuf, node: String },
    /// What the onnx checker would refuse: `what` names the node or tensor.
    #[error("{what}: {cause}")]
    Invalid {
        path: PathBuf,
        what: crate::validate::Subject,
        cause: String,
    },
}

impl OnnxError {
    /// The file the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            OnnxError::Read { path, .. }
            | OnnxError::Empty { path }
            | OnnxError::Decode { path, .. }
            | OnnxError::NoGraph { path }
            | OnnxError::Graph { path, .. }
            | OnnxError::Function { path, .. }
            | OnnxError::External { path, .. }
            | OnnxError::Write { path, .. }
            | OnnxError::TooLarge { path, .. }
            | OnnxError::NoRecord { path, .. }
            | OnnxError::Invalid { path, .. } => path,
        }
    }
}
