//! The synthesized models (`cleave_testdata::synth`): each runs in LiteRT, reads into the IR
//! as LiteRT sees it (names, dtypes, shapes and signatures, quantization, constants, from
//! `scripts/oracles/tflite_oracle.py tensors`), carries what it was made to carry (renamed tensors, a
//! shared buffer, per-channel quantization, control-flow references, dynamic dims, buffers
//! after the flatbuffer, ONE's InstanceNorm names), and round-trips through `reencode`: the
//! same object tree, and LiteRT's outputs bit-identical.

use std::path::{Path, PathBuf};
use std::process::Command;

use cleave_ir::{AttrValue, Dim, ElemType, Graph, Quantization, ValueDef, WeightData};
use cleave_testdata::synth;
use cleave_tflite::schema::{circle, tflite};
use cleave_tflite::{FlatModel, Format, TfliteSource};
use serde_json::Value;

fn oracles() -> PathBuf {
    cleave_testdata::oracles()
}

fn python(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new("python3")
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python3 {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// LiteRT's outputs for `model` on seed 7, as raw .npy bytes in output order.
fn litert_outputs(model: &Path, out: &Path, extra: &[&str]) -> Vec<Vec<u8>> {
    let oracle = oracles().join("tflite_oracle.py");
    let mut args = vec![
        oracle.as_os_str(),
        "run".as_ref(),
        model.as_os_str(),
        "--seed".as_ref(),
        "7".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    python(&args);
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("index.json")).unwrap()).unwrap();
    index["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| std::fs::read(out.join(o["file"].as_str().unwrap())).unwrap())
        .collect()
}

/// LiteRT's summary of a model (`tflite_oracle.py tensors`).
fn litert_tensors(model: &Path) -> Value {
    let oracle = oracles().join("tflite_oracle.py");
    serde_json::from_str(&python(&[
        oracle.as_os_str(),
        "tensors".as_ref(),
        model.as_os_str(),
    ]))
    .unwrap()
}

/// Every model written to a temporary folder.
fn written(dir: &Path) -> Vec<PathBuf> {
    synth::all()
        .into_iter()
        .map(|(name, bytes)| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        })
        .collect()
}

fn load(dir: &Path, name: &str) -> TfliteSource {
    TfliteSource::load(&dir.join(name)).unwrap()
}

/// Buffer data as the file holds it, wherever it is: inline or at `offset`/`size`.
fn resolve(bytes: &[u8], data: &mut Option<Vec<u8>>, offset: &mut u64, size: &mut u64) {
    if *offset > 1 {
        *data = Some(bytes[*offset as usize..][..*size as usize].to_vec());
        (*offset, *size) = (0, 0);
    }
    if data.as_ref().is_some_and(|d| d.is_empty()) {
        *data = None;
    }
}

/// The object tree, each buffer's data resolved (so a file with its buffers after the
/// flatbuffer compares equal to the same model with them inline).
fn tflite_tree(bytes: &[u8]) -> tflite::ModelT {
    let mut m = tflite::root_as_model(bytes).unwrap().unpack();
    for b in m.buffers.iter_mut().flatten() {
        resolve(bytes, &mut b.data, &mut b.offset, &mut b.size);
    }
    m
}

fn circle_tree(bytes: &[u8]) -> circle::ModelT {
    let mut m = circle::root_as_model(bytes).unwrap().unpack();
    for b in m.buffers.iter_mut().flatten() {
        resolve(bytes, &mut b.data, &mut b.offset, &mut b.size);
    }
    m
}

fn weight_bytes(g: &Graph, name: &str) -> bytes::Bytes {
    let v = g.find(name).unwrap_or_else(|| panic!("no value {name}"));
    match &g.value(v).def {
        ValueDef::Weight(w) => match &w.data {
            WeightData::Bytes(b) => b.clone(),
            other => panic!("{name}: weight data {other:?}"),
        },
        other => panic!("{name} is not a weight: {other:?}"),
    }
}

fn node<'g>(g: &'g Graph, op: &str) -> &'g cleave_ir::Node {
    let mut found = g.nodes.iter().filter(|n| n.op_type == op);
    let n = found.next().unwrap_or_else(|| panic!("no {op} node"));
    assert!(found.next().is_none(), "more than one {op} node");
    n
}

fn int_attr(n: &cleave_ir::Node, name: &str) -> i64 {
    match n.attr(name) {
        Some(AttrValue::Int(i)) => *i,
        other => panic!("{} {name}: {other:?}", n.op_type),
    }
}

fn dims(g: &Graph, name: &str) -> Vec<Dim> {
    let v = g.find(name).unwrap_or_else(|| panic!("no value {name}"));
    g.value(v).ty.shape.clone().unwrap()
}

fn elem_name(e: ElemType) -> &'static str {
    match e {
        ElemType::F32 => "float32",
        ElemType::I32 => "int32",
        ElemType::I8 => "int8",
        ElemType::U8 => "uint8",
        ElemType::Bool => "bool",
        ElemType::I64 => "int64",
        other => panic!("unexpected element type {other:?}"),
    }
}

#[test]
fn every_synth_model_reads_into_the_ir_as_litert_sees_it() {
    let tmp = tempfile::tempdir().unwrap();
    let paths = written(tmp.path());
    assert_eq!(paths.len(), 7);
    for path in &paths {
        let src = TfliteSource::load(path).unwrap();
        let g = &src.converted.model.graph;
        let litert = litert_tensors(path);
        let names = |key: &str| -> Vec<String> {
            litert[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect()
        };
        let ir_names = |ids: &[cleave_ir::ValueId]| -> Vec<String> {
            ids.iter().map(|&v| g.value(v).name.to_string()).collect()
        };
        assert_eq!(ir_names(&g.inputs), names("inputs"), "{}", path.display());
        assert_eq!(ir_names(&g.outputs), names("outputs"), "{}", path.display());
        // Nodes: LiteRT's op counts of subgraph 0 (IF/WHILE bodies are not nodes).
        let mut counts = std::collections::BTreeMap::<String, u64>::new();
        for n in &g.nodes {
            *counts.entry(n.op_type.to_string()).or_default() += 1;
        }
        let want: std::collections::BTreeMap<String, u64> = litert["ops"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .collect();
        assert_eq!(counts, want, "{}: op counts", path.display());

        let tensors = litert["tensors"].as_array().unwrap();
        assert_eq!(tensors.len(), src.converted.names.len());
        for t in tensors {
            let i = t["index"].as_u64().unwrap() as usize;
            let ir_name = &src.converted.names[i];
            let what = format!("{}: tensor {i} ({ir_name})", path.display());
            let Some(v) = g.find(ir_name) else {
                panic!("{what}: not in the IR");
            };
            let value = g.value(v);
            assert_eq!(
                elem_name(value.ty.elem.unwrap()),
                t["dtype"].as_str().unwrap(),
                "{what}"
            );
            let signature: Vec<i64> = serde_json::from_value(t["shape_signature"].clone()).unwrap();
            let shape: Vec<i64> = serde_json::from_value(t["shape"].clone()).unwrap();
            let want_dims: Vec<Dim> = if signature.is_empty() {
                &shape
            } else {
                &signature
            }
            .iter()
            .map(|&d| if d < 0 { Dim::Unknown } else { Dim::Fixed(d) })
            .collect();
            assert_eq!(value.ty.shape.as_ref().unwrap(), &want_dims, "{what}");
            assert_eq!(
                matches!(value.def, ValueDef::Weight(_)),
                t["constant"].as_bool().unwrap(),
                "{what}: constant"
            );
            let q = &t["quantization"];
            let scales: Vec<f64> = serde_json::from_value(q["scales"].clone()).unwrap();
            let want_q = (!scales.is_empty()).then(|| Quantization {
                scale: scales.iter().map(|&s| s as f32).collect(),
                zero_point: serde_json::from_value(q["zero_points"].clone()).unwrap(),
                axis: (scales.len() > 1)
                    .then(|| q["quantized_dimension"].as_u64().unwrap() as usize),
            });
            assert_eq!(
                value.quant.as_deref(),
                want_q.as_ref(),
                "{what}: quantization"
            );
        }
    }
}

#[test]
fn renamed_tensors_and_a_shared_buffer() {
    let tmp = tempfile::tempdir().unwrap();
    written(tmp.path());
    for name in ["synth_names.tflite", "synth_offsets.tflite"] {
        let src = load(tmp.path(), name);
        let g = &src.converted.model.graph;
        // Tensor 6 has no name, 7 and 8 share one: NAME#INDEX, and a note says so.
        assert_eq!(src.converted.names[6], "tensor#6");
        assert_eq!(src.converted.names[7], "dup#7");
        assert_eq!(src.converted.names[8], "dup#8");
        assert_eq!(g.find("dup"), None);
        assert_eq!(g.find(""), None);
        let note = src.notes().join("\n");
        assert!(
            note.contains("3 tensor(s)") && note.contains("NAME#INDEX"),
            "{note}"
        );
        // The renamed tensors are wired as in the file: LOGISTIC reads tensor 6 and writes 7,
        // MUL reads 6 and 7 and writes 8.
        let label = |n: &cleave_ir::Node, k: usize| g.value(n.inputs[k].unwrap()).name.clone();
        let mul = node(g, "MUL");
        assert_eq!(
            (label(mul, 0), label(mul, 1)),
            ("tensor#6".into(), "dup#7".into())
        );
        assert_eq!(g.value(mul.outputs[0].unwrap()).name, "dup#8");
        // The second FULLY_CONNECTED has no bias: an omitted input.
        let fcs: Vec<_> = g
            .nodes
            .iter()
            .filter(|n| n.op_type == "FULLY_CONNECTED")
            .collect();
        assert_eq!(fcs.len(), 2);
        assert!(fcs[0].inputs[2].is_some() && fcs[1].inputs[2].is_none());
        // Two weights, one buffer: the same bytes, the same slice of the file.
        let a = weight_bytes(g, "fc_a/weights");
        let b = weight_bytes(g, "fc_b/weights");
        assert_eq!(a.len(), 8 * 8 * 4);
        assert_eq!(a, b);
        assert_eq!(
            a.as_ptr(),
            b.as_ptr(),
            "{name}: the shared buffer was copied"
        );
        let file = &src.file.data;
        let at = a.as_ptr() as usize - file.as_ptr() as usize;
        assert!(at + a.len() <= file.len());
        assert_eq!(
            at % 16,
            0,
            "{name}: buffer data at {at}, not 16-byte aligned"
        );
    }
}

#[test]
fn offset_buffers_are_read_from_after_the_flatbuffer() {
    let tmp = tempfile::tempdir().unwrap();
    written(tmp.path());
    let inline = load(tmp.path(), "synth_names.tflite");
    let offsets = load(tmp.path(), "synth_offsets.tflite");
    let root = offsets.file.root();
    let buffers = root.buffers().unwrap();
    let placed: Vec<u64> = buffers.iter().map(|b| b.offset()).collect();
    assert!(
        buffers.iter().all(|b| b.data().is_none()),
        "inline data in the offsets model"
    );
    assert_eq!(placed.iter().filter(|&&o| o > 1).count(), 2, "{placed:?}");
    let first = *placed.iter().filter(|&&o| o > 1).min().unwrap();
    for w in ["fc_a/weights", "fc_a/bias"] {
        let a = weight_bytes(&inline.converted.model.graph, w);
        let b = weight_bytes(&offsets.converted.model.graph, w);
        assert_eq!(a, b, "{w}");
        let at = b.as_ptr() as usize - offsets.file.data.as_ptr() as usize;
        assert!(
            at as u64 >= first,
            "{w} read from {at}, inside the flatbuffer"
        );
    }
    // LiteRT computes the same on both.
    let a = litert_outputs(&inline.file.path, &tmp.path().join("a"), &[]);
    let b = litert_outputs(&offsets.file.path, &tmp.path().join("b"), &[]);
    assert!(
        !a.is_empty() && a == b,
        "LiteRT reads the offset buffers differently"
    );
}

#[test]
fn int8_quantization_is_on_the_values() {
    let tmp = tempfile::tempdir().unwrap();
    written(tmp.path());
    let src = load(tmp.path(), "synth_int8.tflite");
    let g = &src.converted.model.graph;
    let q = |name: &str| g.value(g.find(name).unwrap()).quant.clone();
    assert_eq!(q("input"), None);
    assert_eq!(q("output"), None);
    let input = q("input_int8").unwrap();
    assert_eq!((input.scale.len(), input.axis), (1, None));
    let conv_w = q("conv/weights").unwrap();
    assert_eq!((conv_w.scale.len(), conv_w.axis), (4, Some(0)));
    assert_eq!(conv_w.zero_point, vec![0; 4]);
    let dw_w = q("dw/weights").unwrap();
    assert_eq!((dw_w.scale.len(), dw_w.axis), (4, Some(3)));
    // Bias scale = input scale × weight scale, channel by channel.
    let conv_b = q("conv/bias").unwrap();
    let conv = q("conv").unwrap();
    for c in 0..4 {
        assert_eq!(conv_b.scale[c], input.scale[0] * conv_w.scale[c]);
        assert_eq!(
            q("dw/bias").unwrap().scale[c],
            conv.scale[0] * dw_w.scale[c]
        );
    }
    for (name, elem) in [
        ("conv", ElemType::I8),
        ("dw", ElemType::I8),
        ("sum", ElemType::I8),
        ("conv/bias", ElemType::I32),
        ("output", ElemType::F32),
    ] {
        assert_eq!(g.value(g.find(name).unwrap()).ty.elem, Some(elem), "{name}");
    }
    let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(
        ops,
        [
            "QUANTIZE",
            "CONV_2D",
            "DEPTHWISE_CONV_2D",
            "ADD",
            "DEQUANTIZE"
        ]
    );
}

#[test]
fn control_flow_nodes_name_their_subgraphs() {
    let tmp = tempfile::tempdir().unwrap();
    written(tmp.path());
    let src = load(tmp.path(), "synth_control.tflite");
    let g = &src.converted.model.graph;
    assert_eq!(src.file.root().subgraphs().unwrap().len(), 5);
    let if_ = node(g, "IF");
    assert_eq!(int_attr(if_, "then_subgraph_index"), 1);
    assert_eq!(int_attr(if_, "else_subgraph_index"), 2);
    let while_ = node(g, "WHILE");
    assert_eq!(int_attr(while_, "cond_subgraph_index"), 3);
    assert_eq!(int_attr(while_, "body_subgraph_index"), 4);
    assert_eq!(while_.outputs.len(), 2);
    assert!(matches!(
        g.value(while_.inputs[0].unwrap()).def,
        ValueDef::Weight(_)
    ));
    let flag = g.find("flag").unwrap();
    assert_eq!(g.value(flag).ty.elem, Some(ElemType::Bool));
    assert_eq!(g.value(if_.inputs[0].unwrap()).name, "flag");
    // Only the main subgraph's operators are nodes.
    assert_eq!(g.nodes.len(), 5);
}

#[test]
fn dynamic_batch_is_an_unknown_dim() {
    let tmp = tempfile::tempdir().unwrap();
    written(tmp.path());
    let src = load(tmp.path(), "synth_dynamic.tflite");
    let g = &src.converted.model.graph;
    for (name, width) in [("x", 8), ("fc", 6), ("add", 6), ("out", 6)] {
        assert_eq!(dims(g, name), [Dim::Unknown, Dim::Fixed(width)], "{name}");
    }
    assert_eq!(dims(g, "fc/weights"), [Dim::Fixed(6), Dim::Fixed(8)]);
    assert_eq!(int_attr(node(g, "FULLY_CONNECTED"), "keep_num_dims"), 1);
    // LiteRT runs it at another batch size.
    let out = litert_outputs(
        &src.file.path,
        &tmp.path().join("b3"),
        &["--shape", "x=3,8"],
    );
    assert_eq!(out.len(), 1);
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("b3/index.json")).unwrap())
            .unwrap();
    assert_eq!(index["outputs"][0]["shape"], serde_json::json!([3, 6]));
}

#[test]
fn instance_norm_is_a_circle_model_with_ones_names() {
    let tmp = tempfile::tempdir().unwrap();
    written(tmp.path());
    let src = load(tmp.path(), "Net_InstanceNorm_003.circle");
    assert_eq!(src.format(), Format::Circle);
    assert_eq!(&src.file.data[4..8], b"CIR0");
    let g = &src.converted.model.graph;
    assert!(src.notes().is_empty(), "{:?}", src.notes());
    let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(
        ops,
        [
            "MEAN",
            "SQUARED_DIFFERENCE",
            "MEAN",
            "ADD",
            "POW",
            "SUB",
            "DIV",
            "MUL",
            "ADD"
        ]
    );
    let outs: Vec<&str> = g
        .nodes
        .iter()
        .map(|n| g.value(n.outputs[0].unwrap()).name.as_str())
        .collect();
    assert_eq!(
        outs,
        [
            "Mean_of_ifm",
            "SquaredDifference",
            "Mean_as_variance",
            "Add_as_variance",
            "Pow",
            "Sub",
            "Div",
            "Mul_gamma",
            "Add_as_terminal"
        ]
    );
    assert_eq!(g.value(g.inputs[0]).name, "Input");
    assert_eq!(g.value(g.outputs[0]).name, "Add_as_terminal");
    let div = node(g, "DIV");
    let ins: Vec<&str> = div
        .inputs
        .iter()
        .map(|v| g.value(v.unwrap()).name.as_str())
        .collect();
    assert_eq!(ins, ["Sub", "Pow"]);
    // Scalars are rank 0.
    assert_eq!(dims(g, "Epsilon"), []);
}

#[test]
fn every_synth_model_round_trips_tree_equal_and_bit_identical_in_litert() {
    let tmp = tempfile::tempdir().unwrap();
    for (k, path) in written(tmp.path()).iter().enumerate() {
        let src = TfliteSource::load(path).unwrap();
        let before = std::fs::read(path).unwrap();
        let bytes = src.reencode().unwrap();
        let same = match src.format() {
            Format::Tflite => tflite_tree(&before) == tflite_tree(&bytes),
            Format::Circle => circle_tree(&before) == circle_tree(&bytes),
        };
        assert!(same, "{}: the object tree changed", path.display());
        assert_eq!(
            &bytes[4..8],
            &before[4..8],
            "{}: identifier",
            path.display()
        );
        let again =
            TfliteSource::new(FlatModel::from_bytes(path, bytes.clone().into()).unwrap()).unwrap();
        let (a, b) = (&src.converted.model.graph, &again.converted.model.graph);
        assert_eq!(a.nodes.len(), b.nodes.len());
        assert_eq!(a.values.len(), b.values.len());
        assert_eq!(src.converted.names, again.converted.names);

        // LiteRT reads a circle file with its identifier swapped (tflite_common.load_bytes):
        // this one holds TFLite builtins only.
        let ext = path.extension().unwrap().to_str().unwrap();
        let copy = tmp.path().join(format!("copy{k}.{ext}"));
        std::fs::write(&copy, &bytes).unwrap();
        let want = litert_outputs(path, &tmp.path().join(format!("a{k}")), &[]);
        let got = litert_outputs(&copy, &tmp.path().join(format!("b{k}")), &[]);
        assert!(!want.is_empty());
        assert!(
            want == got,
            "{}: LiteRT's outputs differ after the round trip",
            path.display()
        );
    }
}

#[test]
fn the_same_bytes_on_every_call() {
    let a = synth::all();
    let b = synth::all();
    assert_eq!(a, b);
    // Buffer 0 is empty and every model verifies against its own schema.
    for (name, bytes) in &a {
        let fm = FlatModel::from_bytes(Path::new(name), bytes.clone().into()).unwrap();
        let b0 = fm.root().buffers().unwrap().get(0);
        assert!(
            b0.data().is_none_or(|d| d.is_empty()) && b0.offset() == 0,
            "{name}"
        );
    }
}
