//! TFLite and circle behind cleave's front-end interface.

use std::collections::HashMap;
use std::path::Path;

use cleave_frontend::{
    write_partition, Emitted, Encoded, ExternalData, FixedDims, FormatModel, Frontend,
    FrontendError, PartEncoder, PartRecord, RewriteOptions, Rewritten,
};
use cleave_ir::{ElemType, Model, OpSemantics, TensorType, ValueId};
use cleave_partition::ValidatedPlan;
use cleave_workdir::write_atomic;

use crate::build::{self, Selection, TensorDims};
use crate::model::{FlatModel, Format};
use crate::pack::{self, Layout, INLINE_LIMIT};
use crate::to_ir::{to_ir, Converted};
use crate::TfliteSemantics;

/// Reads `.tflite` and `.circle` files (or any file with their identifiers).
#[derive(Clone, Copy, Debug, Default)]
pub struct TfliteFrontend;

impl Frontend for TfliteFrontend {
    fn name(&self) -> &'static str {
        "tflite"
    }

    fn accepts(&self, path: &Path) -> bool {
        let by_extension = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("tflite") || e.eq_ignore_ascii_case("circle"));
        by_extension || sniff(path).is_some()
    }

    fn load(&self, path: &Path) -> Result<Box<dyn FormatModel>, FrontendError> {
        Ok(Box::new(TfliteSource::load(path)?))
    }
}

/// The format named by a file's identifier, reading only its first bytes.
fn sniff(path: &Path) -> Option<Format> {
    use std::io::Read;
    let mut head = [0u8; 8];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    Format::of_bytes(&head)
}

/// A loaded TFLite or circle model: the verified file and its IR.
#[derive(Clone)]
pub struct TfliteSource {
    pub file: FlatModel,
    pub converted: Converted,
    /// Tensor index by IR value name.
    index: HashMap<String, usize>,
    /// Dims written in place of the file's (`--shape`, `--learn-dims`), by tensor index.
    pub(crate) dims: HashMap<usize, TensorDims>,
}

impl TfliteSource {
    pub fn load(path: &Path) -> Result<TfliteSource, FrontendError> {
        TfliteSource::new(cleave_ir::phases::phase("read and verify", || {
            FlatModel::load(path)
        })?)
    }

    pub fn new(file: FlatModel) -> Result<TfliteSource, FrontendError> {
        let converted = cleave_ir::phases::phase("IR build, check and types", || to_ir(&file))?;
        // What LiteRT refuses or crashes on, cleave refuses, naming where the file lies: past
        // what the IR build reads of the main subgraph, the bodies, quantization, options.
        crate::trust::check_for_engine(&file, crate::trust::EngineNeeds::LITERT)
            .map_err(|m| FrontendError::new(&file.path, m))?;
        let index = converted
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        Ok(TfliteSource {
            file,
            converted,
            index,
            dims: HashMap::new(),
        })
    }

    pub fn format(&self) -> Format {
        self.file.format
    }

    /// Notes from loading (renamed tensors, variables).
    pub fn notes(&self) -> &[String] {
        &self.converted.notes
    }

    fn err(&self, m: impl ToString) -> FrontendError {
        FrontendError::new(&self.file.path, m)
    }

    pub(crate) fn tensor(&self, v: ValueId) -> Result<usize, FrontendError> {
        let name = &self.converted.model.graph.value(v).name;
        self.index
            .get(name.as_str())
            .copied()
            .ok_or_else(|| self.err(format!("tensor '{name}' is not in the main subgraph")))
    }

    /// Packs a selection of this model in its own format; the note says when the buffers
    /// went after the flatbuffer.
    pub fn encode(&self, sel: &Selection) -> Result<(Vec<u8>, Option<String>), FrontendError> {
        let f = &self.file;
        let encoded = match f.format {
            Format::Tflite => {
                let b = build::tflite::select(f, sel).map_err(|m| self.err(m))?;
                encode_tflite(f, b).map_err(|m| self.err(m))?
            }
            Format::Circle => {
                let b = build::circle::select(f, sel).map_err(|m| self.err(m))?;
                encode_circle(f, b).map_err(|m| self.err(m))?
            }
        };
        Ok(encoded)
    }

    /// The whole model written again through the object API (a round trip).
    pub fn reencode(&self) -> Result<Vec<u8>, FrontendError> {
        let f = &self.file;
        let out = match f.format {
            Format::Tflite => encode_tflite(f, build::tflite::whole(f, &self.dims)),
            Format::Circle => encode_circle(f, build::circle::whole(f, &self.dims)),
        };
        out.map(|(b, _)| b).map_err(|m| self.err(m))
    }

    fn selection(
        &self,
        ops: Vec<usize>,
        inputs: &[ValueId],
        outputs: &[ValueId],
        description: String,
        keep_metadata: bool,
    ) -> Result<Selection<'_>, FrontendError> {
        Ok(Selection {
            ops,
            inputs: inputs
                .iter()
                .map(|&v| self.tensor(v))
                .collect::<Result<_, _>>()?,
            outputs: outputs
                .iter()
                .map(|&v| self.tensor(v))
                .collect::<Result<_, _>>()?,
            names: &self.converted.names,
            dims: &self.dims,
            description,
            keep_metadata,
        })
    }

    fn op_index(&self, n: cleave_ir::NodeId) -> Result<usize, FrontendError> {
        let g = &self.converted.model.graph;
        g.node(n).source.map(|s| s.index()).ok_or_else(|| {
            self.err(format!(
                "node '{}' has no operator in the file",
                g.node_label(n)
            ))
        })
    }
}

/// What `builtins.rs` says of a builtin node (none for a custom op).
fn builtin(node: &cleave_ir::Node) -> Option<&'static crate::builtins::OpDef> {
    node.domain
        .is_empty()
        .then(|| crate::builtins::op(&node.op_type))
        .flatten()
}

/// The layout for buffers of these sizes, and a note when it is not inline.
fn layout_for(total: u64) -> (Layout, Option<String>) {
    if total > INLINE_LIMIT {
        (
            Layout::Offsets,
            Some(format!(
                "{:.2} GB of weights: buffers placed after the flatbuffer (Buffer.offset), as TFLite does past 2 GB",
                total as f64 / 1e9
            )),
        )
    } else {
        (Layout::Inline, None)
    }
}

type Packed = (Vec<u8>, Option<String>);

fn encode_tflite(
    f: &FlatModel,
    b: build::Built<crate::schema::tflite::ModelT>,
) -> Result<Packed, String> {
    let slices = build::buffer_slices(f, &b.buffers)?;
    let refs: Vec<&[u8]> = slices.iter().map(|s| s.as_ref()).collect();
    let (layout, note) = layout_for(refs.iter().map(|s| s.len() as u64).sum());
    Ok((
        pack::tflite::pack(&b.model, &refs, layout, Format::Tflite.identifier()),
        note,
    ))
}

fn encode_circle(
    f: &FlatModel,
    b: build::Built<crate::schema::circle::ModelT>,
) -> Result<Packed, String> {
    let slices = build::buffer_slices(f, &b.buffers)?;
    let refs: Vec<&[u8]> = slices.iter().map(|s| s.as_ref()).collect();
    let (layout, note) = layout_for(refs.iter().map(|s| s.len() as u64).sum());
    Ok((
        pack::circle::pack(&b.model, &refs, layout, Format::Circle.identifier()),
        note,
    ))
}

impl FormatModel for TfliteSource {
    fn path(&self) -> &Path {
        &self.file.path
    }

    fn extension(&self) -> &'static str {
        self.file.format.extension()
    }

    fn model(&self) -> &Model {
        &self.converted.model
    }

    fn model_mut(&mut self) -> &mut Model {
        &mut self.converted.model
    }

    fn semantics(&self) -> &dyn OpSemantics {
        &TfliteSemantics
    }

    /// Model Explorer's TFLite adapter keys each operator of a subgraph by its index there; it
    /// does not open circle files.
    fn explorer_ids(&self) -> Vec<Vec<(String, String)>> {
        if self.file.format != Format::Tflite {
            return Vec::new();
        }
        let g = &self.converted.model.graph;
        let records = g
            .nodes
            .iter()
            .filter_map(|n| n.source.map(|s| s.index() + 1))
            .max()
            .unwrap_or(0);
        let mut ids = vec![Vec::new(); records];
        for n in &g.nodes {
            if let Some(s) = n.source {
                ids[s.index()] = vec![(s.index().to_string(), n.op_type.to_string())];
            }
        }
        ids
    }

    fn rewrite(&self, _opts: &RewriteOptions) -> Result<Rewritten, FrontendError> {
        // TFLite converters already fold constants and fuse activations into ops.
        Ok(Rewritten {
            source: Box::new(self.clone()),
            applied: Default::default(),
            origins: Default::default(),
            notes: Vec::new(),
        })
    }

    fn clone_boxed(&self) -> Box<dyn FormatModel> {
        Box::new(self.clone())
    }

    fn fix_dims(&self, fixed: &FixedDims) -> Result<Box<dyn FormatModel>, FrontendError> {
        let mut fixed_model = self.clone();
        crate::dims::fix_inputs(&mut fixed_model, fixed)?;
        Ok(Box::new(fixed_model))
    }

    fn save_as(&mut self, path: &Path) -> Result<(), FrontendError> {
        let bytes = self.reencode()?;
        write_atomic(path, &bytes).map_err(FrontendError::from)?;
        self.file.path = path.to_path_buf();
        Ok(())
    }

    fn write_parts(
        &self,
        plan: &ValidatedPlan,
        workdir: &Path,
        _external: ExternalData,
        record: PartRecord<'_>,
    ) -> Result<Emitted, FrontendError> {
        let model = &self.converted.model;
        let mut emitted = write_partition(
            &mut FlatParts(self),
            &self.file.path,
            model,
            plan,
            workdir,
            ExternalData::Inline,
            record,
        )?;
        emitted
            .notes
            .extend(crate::dims::placeholder_note(self, plan));
        Ok(emitted)
    }

    fn to_learn(&self) -> Vec<ValueId> {
        crate::dims::to_learn(self)
    }

    fn types_from_tensor_dims(&self, dims: &[Option<Vec<i64>>]) -> Vec<(ValueId, TensorType)> {
        crate::dims::types_from_tensor_dims(self, dims)
    }

    fn placeholder_shape(&self, v: ValueId) -> Option<Vec<i64>> {
        crate::dims::placeholder_shape(self, v)
    }

    fn learns_dims_by_default(&self) -> bool {
        // LiteRT runs TFLite files; a circle model is converted first (`cleave convert`).
        self.file.format == crate::Format::Tflite
    }

    fn learn_types(&mut self, learned: &[(ValueId, TensorType)]) -> Result<(), FrontendError> {
        crate::dims::learn(self, learned);
        Ok(())
    }

    fn write_with_outputs(&self, extra: &[ValueId], path: &Path) -> Result<(), FrontendError> {
        let g = &self.converted.model.graph;
        let ops: Vec<usize> = (0..g.nodes.len())
            .map(|n| self.op_index(cleave_ir::NodeId(n as u32)))
            .collect::<Result<_, _>>()?;
        let mut outputs = g.outputs.clone();
        outputs.extend(extra.iter().filter(|v| !g.outputs.contains(v)));
        let description = self
            .file
            .root()
            .description()
            .unwrap_or_default()
            .to_string();
        let sel = self.selection(build::ordered(ops), &g.inputs, &outputs, description, true)?;
        let (bytes, _) = self.encode(&sel)?;
        write_atomic(path, &bytes).map_err(FrontendError::from)
    }

    fn write_probe(
        &self,
        _elem: ElemType,
        _dims: &[i64],
        _path: &Path,
    ) -> Result<(), FrontendError> {
        Err(FrontendError::unsupported(
            &self.file.path,
            format!(
                "profiling {} models is not supported yet",
                self.file.format.name()
            ),
        ))
    }
}

/// Encodes TFLite or circle parts: each the source's own operators and tensors, repacked.
struct FlatParts<'a>(&'a TfliteSource);

impl PartEncoder for FlatParts<'_> {
    fn extension(&self) -> &'static str {
        self.0.file.format.extension()
    }

    fn notes(&self) -> Vec<String> {
        self.0.converted.notes.clone()
    }

    fn encode(&self, plan: &ValidatedPlan, k: usize) -> Result<Encoded, FrontendError> {
        let src = self.0;
        let g = &src.converted.model.graph;
        let part = &plan.parts[k];
        let mut ops = part
            .nodes
            .iter()
            .chain(&part.constant_nodes)
            .map(|&n| src.op_index(n))
            .collect::<Result<Vec<_>, _>>()?;
        // Each part is an interpreter of its own: one that holds a variable must run the
        // model's initialiser of its variables too (it sets up the others as well, unread).
        if part
            .nodes
            .iter()
            .any(|&n| builtin(g.node(n)).is_some_and(|d| d.variable))
        {
            for (i, node) in g.nodes.iter().enumerate() {
                if builtin(node).is_some_and(|d| d.initialiser) {
                    ops.push(src.op_index(cleave_ir::NodeId(i as u32))?);
                }
            }
        }
        let stem = src
            .file
            .path
            .file_stem()
            .map_or_else(|| "model".into(), |s| s.to_string_lossy());
        let description = format!(
            "part {} of {} of {stem}, cut by cleave",
            k + 1,
            plan.parts.len()
        );
        let sel = src.selection(
            build::ordered(ops),
            &part.inputs,
            &part.outputs,
            description,
            false,
        )?;
        let (bytes, note) = src.encode(&sel)?;
        Ok(Encoded::Part { bytes, note })
    }
}
