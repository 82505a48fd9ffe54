//! Emission streams parts through a few writer threads; a part over the size limit restarts
//! it with every part referencing one weights file, exactly as `--external-data shared` does.

use std::collections::BTreeMap;
use std::path::Path;

use cleave::onnx::emit::emit_limited;
use cleave::onnx::OnnxSource;
use cleave::{load_model, Algorithm, AssignRequest, Devices, ExternalData, NO_RECORD};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tiny_cnn");

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

/// The partition `partition` makes by default of the model at `path` on `devices`.
fn default_partition(path: impl AsRef<Path>, devices: Devices) -> cleave::Partitioned {
    let assigned = load_model(path)
        .unwrap()
        .into_assigned(devices, &AssignRequest::default())
        .unwrap();
    let default = Algorithm::Default {
        allow_disconnected: false,
    };
    assigned.into_partitioned(default, &mut Vec::new()).unwrap()
}

#[test]
fn a_part_over_the_limit_gives_the_shared_weights_output_byte_for_byte() {
    let devices = Devices::part_file(format!("{EXAMPLE}.part")).unwrap();
    let mut partitioned = default_partition(format!("{EXAMPLE}.onnx"), devices);
    let src = OnnxSource::load(Path::new(&format!("{EXAMPLE}.onnx"))).unwrap();

    let root = tempfile::tempdir().unwrap();
    let (limited, shared, inline) = (
        root.path().join("limited"),
        root.path().join("shared"),
        root.path().join("inline"),
    );
    let e = emit_limited(
        &src.onnx,
        &src.model,
        &partitioned.plan,
        &limited,
        ExternalData::Inline,
        64,
        NO_RECORD,
    )
    .unwrap();
    assert!(
        e.notes
            .iter()
            .any(|n| n.contains("more than protobuf's 2 GB limit")),
        "{:?}",
        e.notes
    );
    assert!(e.weights.is_some());
    partitioned.write(&shared, ExternalData::Shared).unwrap();
    let (l, s) = (files(&limited), files(&shared));
    assert!(l.contains_key("tiny_cnn.weights"), "{:?}", l.keys());
    assert_eq!(
        l, s,
        "the fallback wrote other files than --external-data shared"
    );

    // Within the limit nothing falls back, and the parts hold their weights.
    let e = emit_limited(
        &src.onnx,
        &src.model,
        &partitioned.plan,
        &inline,
        ExternalData::Inline,
        1 << 30,
        NO_RECORD,
    )
    .unwrap();
    assert!(e.notes.is_empty() && e.weights.is_none());
    let i = files(&inline);
    assert_eq!(i.len(), partitioned.plan.parts.len() + 2);
    assert!(i.keys().all(|k| !k.ends_with(".weights")));
}

/// Parts copy the source's node records byte for byte when its nodes are held undecoded;
/// the files are the same as when every node is decoded and encoded again.
#[test]
fn parts_from_node_records_equal_parts_from_decoded_nodes() {
    let devices = Devices::part_file(format!("{EXAMPLE}.part")).unwrap();
    let partitioned = default_partition(format!("{EXAMPLE}.onnx"), devices);
    assert!(partitioned.plan.parts.len() > 1);
    let src = OnnxSource::load(Path::new(&format!("{EXAMPLE}.onnx"))).unwrap();
    let decoded = cleave::onnx::OnnxModel::from_proto(
        src.onnx.proto().unwrap().into_owned(),
        src.onnx.path.clone(),
    );
    let root = tempfile::tempdir().unwrap();
    let (records, whole) = (root.path().join("records"), root.path().join("decoded"));
    let limit = 1 << 30;
    emit_limited(
        &src.onnx,
        &src.model,
        &partitioned.plan,
        &records,
        ExternalData::Inline,
        limit,
        NO_RECORD,
    )
    .unwrap();
    emit_limited(
        &decoded,
        &src.model,
        &partitioned.plan,
        &whole,
        ExternalData::Inline,
        limit,
        NO_RECORD,
    )
    .unwrap();
    let (r, d) = (files(&records), files(&whole));
    assert!(
        r.keys().filter(|k| k.ends_with(".onnx")).count() > 1,
        "{:?}",
        r.keys()
    );
    assert_eq!(r, d);
}

/// A field this build's schema does not know, inside a node record, reaches the part that
/// holds the node: records are copied, not decoded and encoded again.
#[test]
fn a_node_field_unknown_to_the_schema_reaches_its_part() {
    use cleave::onnx::proto::{
        type_proto, LeanGraphProto, LeanModelProto, NodeProto, OperatorSetIdProto,
        TensorShapeProto, TypeProto, ValueInfoProto,
    };
    use prost::Message;
    let info = |name: &str| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: Some(TensorShapeProto::default()),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let node = |name: &str, input: &str, output: &str| NodeProto {
        name: Some(name.into()),
        op_type: Some("Relu".into()),
        input: vec![input.into()],
        output: vec![output.into()],
        ..Default::default()
    };
    // Field 100, a varint of value 7: tag (100 << 3) | 0 = 800 = 0xa0 0x06.
    let mut second = node("b", "y", "z").encode_to_vec();
    second.extend_from_slice(&[0xa0, 0x06, 0x07]);
    let model = LeanModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(LeanGraphProto {
            node: vec![
                node("a", "x", "y").encode_to_vec().into(),
                second.clone().into(),
            ],
            name: Some("g".into()),
            input: vec![info("x")],
            output: vec![info("z")],
            value_info: vec![info("y")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let part = dir.path().join("m.part");
    std::fs::write(
        &part,
        "[partition]\nbackends=cpu,npu\ndefault=cpu\ncomply=opname\n[OPNAME]\nb=npu\n",
    )
    .unwrap();
    let devices = Devices::part_file(&part).unwrap();
    let mut partitioned = default_partition(&path, devices);
    let out = dir.path().join("out");
    partitioned.write(&out, ExternalData::Inline).unwrap();
    let written = files(&out);
    let holds = |bytes: &[u8]| bytes.windows(second.len()).any(|w| w == second.as_slice());
    let with: Vec<&String> = written
        .iter()
        .filter(|(_, b)| holds(b))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(with, ["m.00002_npu.onnx"], "{:?}", written.keys());
}
