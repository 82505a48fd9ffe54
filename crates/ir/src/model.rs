use crate::graph::Graph;

/// An operator set the model imports: a domain ("" is the default one) and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opset {
    pub domain: String,
    pub version: i64,
}

/// A model-local function (in ONNX, `ModelProto.functions`): nodes whose op type and domain
/// match `name` and `domain` run this body.
#[derive(Clone, Debug)]
pub struct Function {
    pub domain: String,
    pub name: String,
    pub overload: String,
    pub body: Graph,
}

/// A whole model: one graph plus what it needs to be understood.
#[derive(Clone, Debug)]
pub struct Model {
    /// The source format, e.g. "onnx".
    pub format: &'static str,
    /// The source format's own version number (ONNX's `ir_version`).
    pub format_version: i64,
    pub opsets: Vec<Opset>,
    pub producer: String,
    pub graph: Graph,
    pub functions: Vec<Function>,
    /// Inputs that take an output's value on the next step (a decoder's KV cache): the
    /// names the model shows (recognised at load) and those the user declares.
    pub state: Vec<crate::StatePair>,
}

impl Model {
    /// The version of an operator set; the default domain is the empty string.
    pub fn opset(&self, domain: &str) -> Option<i64> {
        self.opsets
            .iter()
            .find(|o| o.domain == domain)
            .map(|o| o.version)
    }

    pub fn function(&self, domain: &str, name: &str) -> Option<&Function> {
        self.functions
            .iter()
            .find(|f| f.domain == domain && f.name == name)
    }
}
