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
    #[error("not an ONNX model or truncated ({})", decode_cause(.source))]
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

/// prost's message names every field it was inside ("AttributeProto.g: NodeProto.attribute:
/// GraphProto.node: ..."), up to its recursion limit of 100, so a model nested 60 `If`s deep
/// gave a line of 2 KB. The first (innermost) and last two levels say where it went wrong; the
/// count says how deep.
fn decode_cause(e: &prost::DecodeError) -> String {
    shorten_levels(&e.to_string())
}

fn shorten_levels(text: &str) -> String {
    const PREFIX: &str = "failed to decode Protobuf message: ";
    let (prefix, rest) = match text.strip_prefix(PREFIX) {
        Some(rest) => (PREFIX, rest),
        None => ("", text),
    };
    let parts: Vec<&str> = rest.split(": ").collect();
    // Levels are `Message.field`; the cause after them may hold ": " itself.
    let levels = parts
        .iter()
        .take_while(|p| is_level(p))
        .count()
        .min(parts.len().saturating_sub(1));
    if levels <= 5 {
        return text.to_string();
    }
    format!(
        "{prefix}{}: … ({} levels) …: {}",
        parts[..2].join(": "),
        levels - 4,
        parts[levels - 2..].join(": ")
    )
}

fn is_level(p: &str) -> bool {
    // Fields named by Rust keywords are spelled raw: `ValueInfoProto.r#type`.
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '#')
    };
    p.split_once('.').is_some_and(|(m, f)| ident(m) && ident(f))
}

#[cfg(test)]
mod tests {
    use super::shorten_levels;

    #[test]
    fn deep_decode_errors_keep_the_ends_of_the_path() {
        // prost names the innermost level first.
        let level = "AttributeProto.g: NodeProto.attribute: GraphProto.node: ";
        let deep = format!(
            "failed to decode Protobuf message: ValueInfoProto.r#type: GraphProto.output: \
             {}recursion limit reached",
            level.repeat(40)
        );
        assert!(deep.len() > 2000);
        assert_eq!(
            shorten_levels(&deep),
            "failed to decode Protobuf message: ValueInfoProto.r#type: GraphProto.output: \
             … (118 levels) …: NodeProto.attribute: GraphProto.node: recursion limit reached"
        );
        // Shallow paths and causes with ": " in them are left as they are.
        let shallow = "failed to decode Protobuf message: GraphProto.node: NodeProto.name: \
                       invalid wire type: Varint (expected LengthDelimited)";
        assert_eq!(shorten_levels(shallow), shallow);
        assert_eq!(shorten_levels("buffer underflow"), "buffer underflow");
    }
}
