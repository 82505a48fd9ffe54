use std::borrow::Cow;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use cleave_ir::phases::phase;
use prost::Message;

use crate::error::OnnxError;
use crate::external;
use crate::proto::{GraphProto, LeanGraphProto, LeanModelProto, ModelProto, NodeProto};

/// A decoded ONNX file. Its `bytes` fields (weights above all) are slices of the file's
/// memory map, not copies.
///
/// A model decoded from a file keeps its main graph's nodes as the undecoded bytes of their
/// records (slices of the map, 32 bytes each): a node is decoded when it is used, by
/// [`OnnxModel::node`], and the whole protobuf only when something asks for it with
/// [`OnnxModel::proto`]. A million-node model then holds its nodes in 32 MB instead of the
/// ~700 MB of their decoded strings, next to the IR built from them.
#[derive(Clone, Debug)]
pub struct OnnxModel {
    pub path: PathBuf,
    /// The model; while `raw_nodes` is set, its graph's `node` list is empty.
    proto: ModelProto,
    /// The main graph's node records, in file order, when they are held undecoded.
    raw_nodes: Option<Vec<Bytes>>,
    /// The memory map of `path` that `proto`'s bytes fields slice, when it came from there:
    /// a weight's position in it is its position in the file, so it can be streamed from disk.
    file: Option<Bytes>,
    /// The same map, to hand its pages back once read (see [`OnnxModel::release_pages`]).
    map: Option<Arc<memmap2::Mmap>>,
}

impl OnnxModel {
    pub fn load(path: impl AsRef<Path>) -> Result<OnnxModel, OnnxError> {
        let path = path.as_ref().to_path_buf();
        let (bytes, map) = phase("read", || map_file(&path))?;
        let mut model = phase("decode", || OnnxModel::from_bytes(bytes.clone(), path))?;
        model.file = Some(bytes);
        model.map = map;
        Ok(model)
    }

    /// Drops the pages of the mapped file from this process's memory once the graph has been
    /// read into the IR. They stay in the page cache and map back in where something reads
    /// them again (a part's node records, a weight): a million-node file is 38 MB of resident
    /// memory the later stages do not otherwise touch.
    pub fn release_pages(&self) {
        #[cfg(unix)]
        if let Some(map) = &self.map {
            // SAFETY: the map is shared and read-only, so dropping its pages loses nothing: a
            // later read faults them back in from the file, as on first access.
            let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        }
    }

    /// Decodes a model held in memory, its nodes left undecoded; `path` names it in errors
    /// and anchors external data.
    pub fn from_bytes(bytes: Bytes, path: PathBuf) -> Result<OnnxModel, OnnxError> {
        if bytes.is_empty() {
            return Err(OnnxError::Empty { path });
        }
        let lean = LeanModelProto::decode(bytes).map_err(|source| OnnxError::Decode {
            path: path.clone(),
            source,
        })?;
        let Some(graph) = lean.graph else {
            return Err(OnnxError::NoGraph { path });
        };
        let (graph, raw_nodes) = split_graph(graph);
        let proto = ModelProto {
            ir_version: lean.ir_version,
            opset_import: lean.opset_import,
            producer_name: lean.producer_name,
            producer_version: lean.producer_version,
            domain: lean.domain,
            model_version: lean.model_version,
            doc_string: lean.doc_string,
            graph: Some(graph),
            metadata_props: lean.metadata_props,
            training_info: lean.training_info,
            functions: lean.functions,
            configuration: lean.configuration,
        };
        Ok(OnnxModel {
            path,
            proto,
            raw_nodes: Some(raw_nodes),
            file: None,
            map: None,
        })
    }

    /// A model made in memory; `path` names it in errors and anchors external data.
    pub fn from_proto(proto: ModelProto, path: PathBuf) -> OnnxModel {
        OnnxModel {
            path,
            proto,
            raw_nodes: None,
            file: None,
            map: None,
        }
    }

    /// The whole model, its nodes decoded (a copy when they are held undecoded).
    pub fn proto(&self) -> Result<Cow<'_, ModelProto>, OnnxError> {
        let Some(raw) = &self.raw_nodes else {
            return Ok(Cow::Borrowed(&self.proto));
        };
        let mut full = self.proto.clone();
        if let Some(g) = full.graph.as_mut() {
            g.node = self.decode_all(raw)?;
        }
        Ok(Cow::Owned(full))
    }

    /// The whole model, to change; nodes held undecoded are decoded first, once.
    pub fn proto_mut(&mut self) -> Result<&mut ModelProto, OnnxError> {
        if let Some(raw) = &self.raw_nodes {
            let nodes = self.decode_all(raw)?;
            if let Some(g) = self.proto.graph.as_mut() {
                g.node = nodes;
            }
            self.raw_nodes = None;
        }
        Ok(&mut self.proto)
    }

    /// The model with its main graph's node list possibly empty: everything else (opsets,
    /// functions, initializers, value_info) without decoding a node.
    pub fn without_nodes(&self) -> &ModelProto {
        &self.proto
    }

    /// How many nodes the main graph has.
    pub fn node_count(&self) -> usize {
        match &self.raw_nodes {
            Some(raw) => raw.len(),
            None => self.proto.graph.as_ref().map_or(0, |g| g.node.len()),
        }
    }

    /// Node `i` of the main graph, in file order, decoded if it is held undecoded.
    pub fn node(&self, i: usize) -> Result<Option<Cow<'_, NodeProto>>, OnnxError> {
        match &self.raw_nodes {
            Some(raw) => raw
                .get(i)
                .map(|r| self.decode_node(r).map(Cow::Owned))
                .transpose(),
            None => Ok(self
                .proto
                .graph
                .as_ref()
                .and_then(|g| g.node.get(i))
                .map(Cow::Borrowed)),
        }
    }

    /// The main graph's nodes in file order, each decoded as it is reached.
    pub fn nodes(&self) -> impl Iterator<Item = Result<Cow<'_, NodeProto>, OnnxError>> {
        (0..self.node_count()).filter_map(|i| self.node(i).transpose())
    }

    /// Node `i`'s record as it lies in the file, when nodes are held undecoded.
    pub(crate) fn raw_node(&self, i: usize) -> Option<&Bytes> {
        self.raw_nodes.as_ref()?.get(i)
    }

    fn decode_all(&self, records: &[Bytes]) -> Result<Vec<NodeProto>, OnnxError> {
        records.iter().map(|r| self.decode_node(r)).collect()
    }

    fn decode_node(&self, record: &Bytes) -> Result<NodeProto, OnnxError> {
        NodeProto::decode(record.clone()).map_err(|source| OnnxError::Decode {
            path: self.path.clone(),
            source,
        })
    }

    /// Another model made from this one (extra outputs, say): same path and external data,
    /// so [`OnnxModel::save`] carries its data files along.
    pub fn derived(&self, proto: ModelProto) -> OnnxModel {
        OnnxModel {
            path: self.path.clone(),
            proto,
            raw_nodes: None,
            file: self.file.clone(),
            map: self.map.clone(),
        }
    }

    /// The external data files the model reads (they may not exist).
    pub fn data_files(&self) -> Vec<PathBuf> {
        let base = self.base_dir();
        self.proto()
            .ok()
            .and_then(|p| external::external_locations(&p, &self.path).ok())
            .map(|ls| ls.into_iter().map(|l| base.join(l)).collect())
            .unwrap_or_default()
    }

    /// Where `bytes` (a field of `proto`) lies in the model's file, when it is a slice of it.
    pub fn file_offset(&self, bytes: &Bytes) -> Option<u64> {
        let file = self.file.as_ref()?;
        let start = (bytes.as_ptr() as usize).checked_sub(file.as_ptr() as usize)?;
        (start + bytes.len() <= file.len()).then_some(start as u64)
    }

    /// The folder external data locations are relative to.
    pub fn base_dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// Writes the model to `out` atomically. External data files it references are placed
    /// beside `out` under the same relative locations (copied: onnx refuses hard-linked data), so the
    /// written model stays valid and its data stays external.
    pub fn save(&self, out: impl AsRef<Path>) -> Result<(), OnnxError> {
        let out = out.as_ref();
        let proto = self.proto()?;
        external::carry_external_files(&proto, &self.base_dir(), &self.path, out)?;
        write_atomic(out, &encode_model(&proto))
    }
}

/// `model` (its graph's node list empty) with `records` as its graph's nodes, ready to
/// encode: the same bytes as the model with those nodes decoded into it.
pub(crate) fn with_records(model: ModelProto, records: Vec<Bytes>) -> LeanModelProto {
    LeanModelProto {
        ir_version: model.ir_version,
        opset_import: model.opset_import,
        producer_name: model.producer_name,
        producer_version: model.producer_version,
        domain: model.domain,
        model_version: model.model_version,
        doc_string: model.doc_string,
        graph: model.graph.map(|g| LeanGraphProto {
            node: records,
            name: g.name,
            initializer: g.initializer,
            sparse_initializer: g.sparse_initializer,
            doc_string: g.doc_string,
            input: g.input,
            output: g.output,
            value_info: g.value_info,
            quantization_annotation: g.quantization_annotation,
            metadata_props: g.metadata_props,
        }),
        metadata_props: model.metadata_props,
        training_info: model.training_info,
        functions: model.functions,
        configuration: model.configuration,
    }
}

/// A graph without its nodes, and its node records.
fn split_graph(lean: LeanGraphProto) -> (GraphProto, Vec<Bytes>) {
    let graph = GraphProto {
        node: Vec::new(),
        name: lean.name,
        initializer: lean.initializer,
        sparse_initializer: lean.sparse_initializer,
        doc_string: lean.doc_string,
        input: lean.input,
        output: lean.output,
        value_info: lean.value_info,
        quantization_annotation: lean.quantization_annotation,
        metadata_props: lean.metadata_props,
    };
    (graph, lean.node)
}

/// Decodes a model from a buffer. With a `Bytes` buffer the weights are sliced, not copied.
pub fn decode_model(bytes: Bytes) -> Result<ModelProto, prost::DecodeError> {
    ModelProto::decode(bytes)
}

pub fn encode_model(model: &ModelProto) -> Vec<u8> {
    model.encode_to_vec()
}

/// Bytes [`encode_model`] would give, computed without encoding.
pub fn encoded_len(model: &ModelProto) -> usize {
    model.encoded_len()
}

/// The file's contents as shared bytes backed by a read-only memory map, and the map itself
/// (none for an empty file).
pub(crate) fn map_file(path: &Path) -> Result<(Bytes, Option<Arc<memmap2::Mmap>>), OnnxError> {
    let read_err = |source| OnnxError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if meta.is_dir() {
        return Err(read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "is a directory",
        )));
    }
    if meta.len() == 0 {
        return Ok((Bytes::new(), None));
    }
    // SAFETY: the map is read-only. Another process truncating the file while it is mapped
    // would fault, which is the accepted risk of every memory-mapping model loader.
    let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.map_err(read_err)?);
    Ok((Bytes::from_owner(SharedMap(map.clone())), Some(map)))
}

struct SharedMap(Arc<memmap2::Mmap>);

impl AsRef<[u8]> for SharedMap {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// [`cleave_workdir::write_atomic`], with this crate's error.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), OnnxError> {
    cleave_workdir::write_atomic(path, data).map_err(|e| OnnxError::Write {
        path: e.path,
        source: e.source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{
        DeviceConfigurationProto, FunctionProto, OperatorSetIdProto, SparseTensorProto,
        StringStringEntryProto, TensorAnnotation, TensorProto, TrainingInfoProto, ValueInfoProto,
    };

    fn entry(k: &str) -> StringStringEntryProto {
        StringStringEntryProto {
            key: Some(k.into()),
            value: Some(format!("{k}-value")),
        }
    }

    fn node(name: &str) -> NodeProto {
        NodeProto {
            name: Some(name.into()),
            op_type: Some("Relu".into()),
            input: vec!["x".into()],
            output: vec![format!("{name}_out")],
            ..Default::default()
        }
    }

    /// `lean.proto` must mirror every field of ModelProto and GraphProto: set them all, load
    /// leanly, and the model and its bytes come back unchanged.
    #[test]
    fn a_lean_load_keeps_every_field() {
        let tensor = |n: &str| TensorProto {
            name: Some(n.into()),
            dims: vec![1],
            data_type: Some(1),
            raw_data: Some(Bytes::from_static(&[0, 0, 128, 63])),
            ..Default::default()
        };
        let info = |n: &str| ValueInfoProto {
            name: Some(n.into()),
            ..Default::default()
        };
        let graph = GraphProto {
            node: vec![node("a"), node("b")],
            name: Some("g".into()),
            initializer: vec![tensor("w")],
            sparse_initializer: vec![SparseTensorProto {
                values: Some(tensor("s")),
                ..Default::default()
            }],
            doc_string: Some("graph doc".into()),
            input: vec![info("x")],
            output: vec![info("b_out")],
            value_info: vec![info("a_out")],
            quantization_annotation: vec![TensorAnnotation {
                tensor_name: Some("a_out".into()),
                quant_parameter_tensor_names: vec![entry("SCALE_TENSOR")],
            }],
            metadata_props: vec![entry("graph")],
        };
        let model = ModelProto {
            ir_version: Some(10),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(21),
            }],
            producer_name: Some("p".into()),
            producer_version: Some("1".into()),
            domain: Some("d".into()),
            model_version: Some(3),
            doc_string: Some("model doc".into()),
            graph: Some(graph.clone()),
            metadata_props: vec![entry("model")],
            training_info: vec![TrainingInfoProto {
                initialization: Some(graph),
                ..Default::default()
            }],
            functions: vec![FunctionProto {
                name: Some("f".into()),
                node: vec![node("c")],
                ..Default::default()
            }],
            configuration: vec![DeviceConfigurationProto {
                name: Some("mesh".into()),
                num_devices: Some(2),
                device: vec!["cpu".into(), "npu".into()],
            }],
        };
        let bytes = encode_model(&model);
        let lean = OnnxModel::from_bytes(Bytes::from(bytes.clone()), "m.onnx".into()).unwrap();
        assert_eq!(lean.node_count(), 2);
        assert!(lean.without_nodes().graph.as_ref().unwrap().node.is_empty());
        assert_eq!(lean.node(1).unwrap().unwrap().name(), "b");
        assert!(lean.node(2).unwrap().is_none());
        assert_eq!(*lean.proto().unwrap(), model);
        assert_eq!(encode_model(&lean.proto().unwrap()), bytes);
    }

    #[test]
    fn a_garbled_node_record_is_a_decode_error_naming_the_file() {
        // A graph whose one node record is a truncated varint: the skeleton decodes, the node
        // does not.
        let graph_bytes = [0x0a, 0x02, 0x08, 0xff];
        let mut bytes = vec![0x3a, graph_bytes.len() as u8];
        bytes.extend_from_slice(&graph_bytes);
        let lean = OnnxModel::from_bytes(Bytes::from(bytes), "bad.onnx".into()).unwrap();
        let e = lean.node(0).unwrap_err();
        assert!(matches!(e, OnnxError::Decode { .. }), "{e:?}");
        assert_eq!(e.path(), Path::new("bad.onnx"));
        assert!(crate::to_ir(&lean).is_err());
    }
}
