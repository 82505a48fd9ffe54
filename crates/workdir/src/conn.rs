//! ONE's connection files. `.conn.json` is written in the layout ONE's tools write (two-space
//! indent, `"key" : value`, one-line arrays); `.conn.ini` has `[source]`, `[models]` and one
//! section per part, each followed by a blank line.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One dim of a recorded input shape: a number, a dim parameter's name, or unknown (`null`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ConnDim {
    Fixed(i64),
    Named(String),
    Unknown,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnModel {
    pub file: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// cleave's addition: the backend the part runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// cleave's addition: the part file's format (`onnx`, `tflite`, `circle`), which picks
    /// the engines that can run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// cleave's addition: the engine and device the part is for, where its backend names
    /// one (`openvino:CPU` for `ov-CPU`); `--engine` still overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// cleave's addition, for pipeline stages: the bytes of weights the part's file and engine
    /// hold (shared ones counted in each part that carries them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_bytes: Option<u64>,
    /// cleave's addition, for pipeline stages: the peak of the part's live activations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_peak_bytes: Option<u64>,
    /// cleave's addition, for the source: each input's shape as the parts were cut for it
    /// (`--shape`/`--dim` applied), which `run`, `verify`, `bench` and `serve` take unless
    /// told otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shapes: Option<BTreeMap<String, Vec<ConnDim>>>,
    /// cleave's addition: the decoder state this model or part holds, each input that takes
    /// an output's value on the next step (`past_key_values.0.key` : `present.0.key`). A part
    /// lists the pairs whose input and output are both its own: it keeps that cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<BTreeMap<String, String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnFile {
    pub source: ConnModel,
    pub parts: Vec<ConnModel>,
}

fn quote(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

fn array(items: &[String]) -> String {
    if items.is_empty() {
        "[]".to_string()
    } else {
        format!(
            "[ {} ]",
            items
                .iter()
                .map(|s| quote(s))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

fn model_json(m: &ConnModel, indent: &str) -> String {
    let mut fields = vec![
        format!("{indent}  \"file\" : {}", quote(&m.file)),
        format!("{indent}  \"inputs\" : {}", array(&m.inputs)),
        format!("{indent}  \"outputs\" : {}", array(&m.outputs)),
    ];
    if let Some(b) = &m.backend {
        fields.push(format!("{indent}  \"backend\" : {}", quote(b)));
    }
    if let Some(f) = &m.format {
        fields.push(format!("{indent}  \"format\" : {}", quote(f)));
    }
    if let Some(e) = &m.engine {
        fields.push(format!("{indent}  \"engine\" : {}", quote(e)));
    }
    if let Some(w) = m.weights_bytes {
        fields.push(format!("{indent}  \"weights_bytes\" : {w}"));
    }
    if let Some(a) = m.activation_peak_bytes {
        fields.push(format!("{indent}  \"activation_peak_bytes\" : {a}"));
    }
    if let Some(shapes) = m.shapes.as_ref().filter(|s| !s.is_empty()) {
        let one = |dims: &[ConnDim]| {
            let d: Vec<String> = dims
                .iter()
                .map(|d| match d {
                    ConnDim::Fixed(n) => n.to_string(),
                    ConnDim::Named(p) => quote(p),
                    ConnDim::Unknown => "null".to_string(),
                })
                .collect();
            if d.is_empty() {
                "[]".to_string()
            } else {
                format!("[ {} ]", d.join(", "))
            }
        };
        let entries: Vec<String> = shapes
            .iter()
            .map(|(name, dims)| format!("{} : {}", quote(name), one(dims)))
            .collect();
        fields.push(format!(
            "{indent}  \"shapes\" : {{ {} }}",
            entries.join(", ")
        ));
    }
    if let Some(state) = m.state.as_ref().filter(|s| !s.is_empty()) {
        let entries: Vec<String> = state
            .iter()
            .map(|(i, o)| format!("{} : {}", quote(i), quote(o)))
            .collect();
        fields.push(format!(
            "{indent}  \"state\" : {{ {} }}",
            entries.join(", ")
        ));
    }
    format!("{{\n{}\n{indent}}}", fields.join(",\n"))
}

impl ConnFile {
    pub fn to_json(&self) -> String {
        let parts: Vec<String> = self
            .parts
            .iter()
            .map(|p| format!("    {}", model_json(p, "    ")))
            .collect();
        format!(
            "{{\n  \"source\" : {},\n  \"parts\" : [\n{}\n  ]\n}}\n",
            model_json(&self.source, "  "),
            parts.join(",\n")
        )
    }

    pub fn to_ini(&self) -> String {
        let mut s = String::new();
        let io = |s: &mut String, m: &ConnModel| {
            s.push_str(&format!("file={}\n", m.file));
            for (i, x) in m.inputs.iter().enumerate() {
                s.push_str(&format!("i{}={x}\n", i + 1));
            }
            for (i, x) in m.outputs.iter().enumerate() {
                s.push_str(&format!("o{}={x}\n", i + 1));
            }
            s.push('\n');
        };
        s.push_str("[source]\n");
        io(&mut s, &self.source);
        s.push_str("[models]\n");
        for (i, p) in self.parts.iter().enumerate() {
            s.push_str(&format!("m{}={}\n", i + 1, p.file));
        }
        s.push('\n');
        for p in &self.parts {
            s.push_str(&format!("[{}]\n", p.file));
            io(&mut s, p);
        }
        s
    }

    pub fn from_json(text: &str) -> Result<ConnFile, serde_json::Error> {
        serde_json::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> ConnFile {
        let m = |f: &str, i: &[&str], o: &[&str]| ConnModel {
            file: f.into(),
            inputs: i.iter().map(|s| s.to_string()).collect(),
            outputs: o.iter().map(|s| s.to_string()).collect(),
            backend: None,
            format: None,
            engine: None,
            weights_bytes: None,
            activation_peak_bytes: None,
            shapes: None,
            state: None,
        };
        ConnFile {
            source: m(
                "Net_InstanceNorm_003.circle",
                &["Input"],
                &["Add_as_terminal"],
            ),
            parts: vec![
                m(
                    "Net_InstanceNorm_003.00001_cpu.circle",
                    &["Input"],
                    &["Pow", "Sub"],
                ),
                m(
                    "Net_InstanceNorm_003.00002_acl_cl.circle",
                    &["Sub", "Pow"],
                    &["Div"],
                ),
                m(
                    "Net_InstanceNorm_003.00003_cpu.circle",
                    &["Div"],
                    &["Add_as_terminal"],
                ),
            ],
        }
    }

    #[test]
    fn json_matches_ones_layout() {
        let want = r#"{
  "source" : {
    "file" : "Net_InstanceNorm_003.circle",
    "inputs" : [ "Input" ],
    "outputs" : [ "Add_as_terminal" ]
  },
  "parts" : [
    {
      "file" : "Net_InstanceNorm_003.00001_cpu.circle",
      "inputs" : [ "Input" ],
      "outputs" : [ "Pow", "Sub" ]
    },
    {
      "file" : "Net_InstanceNorm_003.00002_acl_cl.circle",
      "inputs" : [ "Sub", "Pow" ],
      "outputs" : [ "Div" ]
    },
    {
      "file" : "Net_InstanceNorm_003.00003_cpu.circle",
      "inputs" : [ "Div" ],
      "outputs" : [ "Add_as_terminal" ]
    }
  ]
}
"#;
        let c = example();
        assert_eq!(c.to_json(), want);
        assert_eq!(ConnFile::from_json(want).unwrap(), c);
    }

    #[test]
    fn recorded_shapes_are_one_line_and_read_back() {
        let mut c = example();
        let mut shapes = BTreeMap::new();
        shapes.insert(
            "Input".to_string(),
            vec![
                ConnDim::Named("batch".into()),
                ConnDim::Fixed(3),
                ConnDim::Unknown,
            ],
        );
        c.source.shapes = Some(shapes);
        let json = c.to_json();
        assert!(
            json.contains("    \"shapes\" : { \"Input\" : [ \"batch\", 3, null ] }\n  },"),
            "{json}"
        );
        assert_eq!(ConnFile::from_json(&json).unwrap(), c);
    }

    #[test]
    fn state_pairs_are_one_line_and_read_back() {
        let mut c = example();
        c.parts[1].state = Some(BTreeMap::from([(
            "past_key_values.0.key".to_string(),
            "present.0.key".to_string(),
        )]));
        let json = c.to_json();
        assert!(
            json.contains("\"state\" : { \"past_key_values.0.key\" : \"present.0.key\" }\n    }"),
            "{json}"
        );
        assert_eq!(ConnFile::from_json(&json).unwrap(), c);
    }

    #[test]
    fn ini_matches_ones_layout() {
        let ini = example().to_ini();
        assert!(ini.starts_with("[source]\nfile=Net_InstanceNorm_003.circle\ni1=Input\no1=Add_as_terminal\n\n[models]\nm1=Net_InstanceNorm_003.00001_cpu.circle\n"), "{ini}");
        assert!(ini.contains("\n[Net_InstanceNorm_003.00002_acl_cl.circle]\nfile=Net_InstanceNorm_003.00002_acl_cl.circle\ni1=Sub\ni2=Pow\no1=Div\n\n"), "{ini}");
        assert!(ini.ends_with("o1=Add_as_terminal\n\n"));
    }
}
