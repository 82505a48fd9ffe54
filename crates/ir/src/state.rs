//! Decoder state: a model input that takes, on the next step, what one of its outputs gave on
//! this one (one layer's KV cache, `past_key_values.0.key` <- `present.0.key`). A runner feeds
//! each pair's output back; a partition keeps it where the layer is.

use crate::{Dim, Graph, TensorType};

/// The input that carries a decoder's token ids, as every exporter names it.
pub const TOKEN_INPUT: &str = "input_ids";

/// One state pair, by tensor name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StatePair {
    /// The graph input the step reads.
    pub input: String,
    /// The graph output whose value the next step reads as `input`.
    pub output: String,
}

/// The outputs exporters pair with an input named `input`, most likely first: Optimum and
/// onnxruntime-genai name the cache `past_key_values.N.key` -> `present.N.key`; older GPT-2
/// and Whisper exports `past.N`/`past_N` -> `present.N`/`present_N`; some
/// `past_key_values.*` -> `present_key_values.*`.
fn candidates(input: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(rest) = input.strip_prefix("past_key_values") {
        out.push(format!("present{rest}"));
        out.push(format!("present_key_values{rest}"));
    }
    if let Some(rest) = input.strip_prefix("past") {
        if rest.starts_with(['.', '_']) {
            out.push(format!("present{rest}"));
        }
    }
    out
}

/// The pairs `g`'s input and output names show, in input order.
pub fn recognised_state(g: &Graph) -> Vec<StatePair> {
    let outputs: Vec<&str> = g
        .outputs
        .iter()
        .map(|&v| g.value(v).name.as_str())
        .collect();
    g.inputs
        .iter()
        .filter_map(|&v| {
            let input = g.value(v).name.as_str();
            let output = candidates(input)
                .into_iter()
                .find(|c| outputs.contains(&c.as_str()))?;
            Some(StatePair {
                input: input.to_string(),
                output,
            })
        })
        .collect()
}

/// `declared` pairs checked against `g`, then the recognised ones whose input `declared`
/// does not name. A declared pair names an input and an output of `g` of the same element
/// type and rank; each input and output is in one pair at most.
pub fn state_pairs(g: &Graph, declared: &[StatePair]) -> Result<Vec<StatePair>, String> {
    let ty = |name: &str, of: &[crate::ValueId]| -> Option<TensorType> {
        of.iter()
            .map(|&v| g.value(v))
            .find(|v| v.name.as_str() == name)
            .map(|v| v.ty.clone())
    };
    let mut pairs: Vec<StatePair> = Vec::new();
    for p in declared {
        let input = ty(&p.input, &g.inputs)
            .ok_or_else(|| format!("'{}' is not an input of the model", p.input))?;
        let output = ty(&p.output, &g.outputs)
            .ok_or_else(|| format!("'{}' is not an output of the model", p.output))?;
        if let (Some(a), Some(b)) = (input.elem, output.elem) {
            if a != b {
                return Err(format!(
                    "'{}' is {a} but '{}' is {b}: a state's input and output have one type",
                    p.input, p.output
                ));
            }
        }
        if let (Some(a), Some(b)) = (&input.shape, &output.shape) {
            if a.len() != b.len() {
                return Err(format!(
                    "'{}' has rank {} but '{}' has rank {}",
                    p.input,
                    a.len(),
                    p.output,
                    b.len()
                ));
            }
        }
        if let Some(q) = pairs
            .iter()
            .find(|q| q.input == p.input || q.output == p.output)
        {
            return Err(format!(
                "{}={} and {}={} share a tensor: each state is one input and one output",
                q.input, q.output, p.input, p.output
            ));
        }
        pairs.push(p.clone());
    }
    for p in recognised_state(g) {
        if !pairs
            .iter()
            .any(|q| q.input == p.input || q.output == p.output)
        {
            pairs.push(p);
        }
    }
    Ok(pairs)
}

/// A `IN=OUT` declaration (`--state`).
pub fn parse_state_pair(s: &str) -> Result<StatePair, String> {
    match s.split_once('=') {
        Some((i, o)) if !i.trim().is_empty() && !o.trim().is_empty() => Ok(StatePair {
            input: i.trim().to_string(),
            output: o.trim().to_string(),
        }),
        _ => Err(format!(
            "'{s}': expected INPUT=OUTPUT (past_key_values.0.key=present.0.key)"
        )),
    }
}

/// Whether a dim of a state input grows from step to step (and so starts at 0): any dim
/// other than the first (the batch) that the model leaves open.
pub fn grows(dims: &[Dim], k: usize) -> bool {
    k > 0 && !matches!(dims.get(k), Some(Dim::Fixed(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exporters_names_pair_up() {
        let c = candidates("past_key_values.3.key");
        assert_eq!(c[0], "present.3.key");
        assert!(c.contains(&"present_key_values.3.key".to_string()));
        assert_eq!(candidates("past_2"), vec!["present_2"]);
        assert_eq!(candidates("past.0"), vec!["present.0"]);
        assert!(candidates("pasta").is_empty());
        assert!(candidates("input_ids").is_empty());
    }

    #[test]
    fn declarations_parse() {
        let p = parse_state_pair("a=b").unwrap();
        assert_eq!((p.input.as_str(), p.output.as_str()), ("a", "b"));
        assert!(parse_state_pair("a").unwrap_err().contains("INPUT=OUTPUT"));
        assert!(parse_state_pair("=b").is_err());
    }
}
