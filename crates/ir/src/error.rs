/// A graph that breaks the IR's integrity rules. Messages name the nodes and tensors involved.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GraphError {
    #[error("node '{node}' ({op}) reads tensor '{tensor}', which is not a graph input, a constant or any node's output")]
    UndefinedTensor {
        node: String,
        op: String,
        tensor: String,
    },
    #[error("tensor '{tensor}' has two producers: {first} and {second}")]
    DuplicateProducer {
        tensor: String,
        first: String,
        second: String,
    },
    #[error("graph output '{tensor}' is not defined anywhere in the graph")]
    UndefinedOutput { tensor: String },
    /// `path` alternates node labels and the tensors that join them, ending where it began.
    #[error("graph has a cycle: {}", render_cycle(.nodes, .tensors))]
    Cycle {
        nodes: Vec<String>,
        tensors: Vec<String>,
    },
}

fn render_cycle(nodes: &[String], tensors: &[String]) -> String {
    let mut s = String::new();
    for (n, t) in nodes.iter().zip(tensors) {
        s.push_str(&format!("'{n}' -[{t}]-> "));
    }
    if let Some(first) = nodes.first() {
        s.push_str(&format!("'{first}'"));
    }
    s
}
