//! TFLite's builtins (circle's builtins are TFLite's plus its own: one vocabulary): for each
//! builtin what cleave knows of it, in one place: the class the format-neutral stages see,
//! how its FLOPs are counted, its window (convolutions and pools), whether it holds state or
//! is random, the resource a handle op names, and which of its options become IR
//! attributes. Adding an op is one line in [`build`].

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;
use cleave_ir::{AttrValue, Attribute, Graph, Node, NodeId, OpClass, Window};

use crate::schema::tflite;

/// How a node's FLOPs are estimated (see `TfliteSemantics::flops`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Flops {
    /// One per output element.
    #[default]
    Output,
    /// Two per output element and filter tap (OHWI filters: H × W × I).
    Conv,
    /// Two per output element and spatial tap (`[1, H, W, C·M]` filters: H × W).
    DepthwiseConv,
    /// Two per output element and input feature.
    FullyConnected,
}

/// Reads an operator's options into attributes.
pub(crate) type Options = fn(&tflite::Operator, &mut Vec<Attribute>);

/// Reads a convolution's or pool's window from its attributes and operands.
pub(crate) type WindowOf = fn(&Graph, NodeId) -> Option<Window>;

/// The resource a handle op names (ops that read the handle share its state).
pub(crate) type ResourceOf = fn(&Node) -> String;

/// The subgraphs an operator runs, by option name.
pub(crate) type SubgraphRefs = fn(&tflite::Operator) -> Vec<(&'static str, i64)>;

/// What the table holds for one builtin.
#[derive(Clone, Copy, Default)]
pub(crate) struct OpDef {
    pub class: Option<OpClass>,
    pub flops: Flops,
    /// Its result is not a function of its inputs alone (random generators, resources):
    /// never folded or copied as a constant into several parts.
    pub stateful: bool,
    pub options: Option<Options>,
    pub window: Option<WindowOf>,
    pub resource: Option<ResourceOf>,
    /// Runs once to set up the model's variables: copied into every part that holds one,
    /// never a part of its own.
    pub initialiser: bool,
    /// Makes, reads or writes a variable: a part with one needs the initialiser.
    pub variable: bool,
    pub subgraphs: Option<SubgraphRefs>,
    /// Its options name subgraphs the part writer does not copy (StableHLO's): refused.
    pub uncopied_subgraphs: bool,
}

impl OpDef {
    fn class(&mut self, c: OpClass) -> &mut Self {
        self.class = Some(c);
        self
    }

    fn flops(&mut self, f: Flops) -> &mut Self {
        self.flops = f;
        self
    }

    fn stateful(&mut self) -> &mut Self {
        self.stateful = true;
        self
    }

    fn options(&mut self, o: Options) -> &mut Self {
        self.options = Some(o);
        self
    }

    fn window(&mut self, w: WindowOf) -> &mut Self {
        self.window = Some(w);
        self
    }

    fn subgraphs(&mut self, s: SubgraphRefs) -> &mut Self {
        self.subgraphs = Some(s);
        self
    }

    fn resource(&mut self, r: ResourceOf) -> &mut Self {
        self.resource = Some(r);
        self
    }
}

/// The entry of a builtin op type (`CONV_2D`); `None` for ops cleave knows nothing special of.
pub(crate) fn op(op_type: &str) -> Option<&'static OpDef> {
    static TABLE: OnceLock<HashMap<&'static str, OpDef>> = OnceLock::new();
    TABLE.get_or_init(build).get(op_type)
}

fn build() -> HashMap<&'static str, OpDef> {
    let mut t = Builder(HashMap::new());
    t.op("CONV_2D")
        .class(OpClass::Conv)
        .flops(Flops::Conv)
        .window(conv_window)
        .options(conv_2d);
    t.op("DEPTHWISE_CONV_2D")
        .class(OpClass::Conv)
        .flops(Flops::DepthwiseConv)
        .window(conv_window)
        .options(depthwise_conv_2d);
    t.op("MAX_POOL_2D")
        .class(OpClass::MaxPool)
        .window(pool_window)
        .options(pool_2d);
    t.op("AVERAGE_POOL_2D")
        .class(OpClass::AveragePool)
        .window(pool_window)
        .options(pool_2d);
    t.op("L2_POOL_2D").window(pool_window).options(pool_2d);
    t.op("FULLY_CONNECTED")
        .class(OpClass::FullyConnected)
        .flops(Flops::FullyConnected)
        .options(fully_connected);
    t.op("BATCH_MATMUL").class(OpClass::MatMul);
    t.op("RELU").class(OpClass::Relu);
    for clipping in ["RELU6", "RELU_N1_TO_1", "RELU_0_TO_1"] {
        t.op(clipping).class(OpClass::Clip);
    }
    t.op("LEAKY_RELU")
        .class(OpClass::LeakyRelu)
        .options(leaky_relu);
    t.op("ELU").class(OpClass::Elu);
    t.op("LOGISTIC").class(OpClass::Sigmoid);
    t.op("TANH").class(OpClass::Tanh);
    t.op("PRELU").class(OpClass::PRelu);
    t.op("ADD").class(OpClass::Add).options(|o, a| {
        a.extend(
            o.builtin_options_as_add_options()
                .map(|o| activation(o.fused_activation_function())),
        )
    });
    t.op("SUB").options(|o, a| {
        a.extend(
            o.builtin_options_as_sub_options()
                .map(|o| activation(o.fused_activation_function())),
        )
    });
    t.op("MUL").class(OpClass::Mul).options(|o, a| {
        a.extend(
            o.builtin_options_as_mul_options()
                .map(|o| activation(o.fused_activation_function())),
        )
    });
    t.op("DIV").options(|o, a| {
        a.extend(
            o.builtin_options_as_div_options()
                .map(|o| activation(o.fused_activation_function())),
        )
    });
    t.op("MAXIMUM").class(OpClass::Max);
    t.op("ADD_N").class(OpClass::Sum);
    t.op("QUANTIZE").class(OpClass::Quantize);
    t.op("DEQUANTIZE").class(OpClass::Dequantize);
    t.op("CONCATENATION").options(concatenation);
    // Ops that share state through a resource, or draw random numbers.
    for stateful in [
        "RANDOM_STANDARD_NORMAL",
        "RANDOM_UNIFORM",
        "MULTINOMIAL",
        "READ_VARIABLE",
        "ASSIGN_VARIABLE",
        "CALL_ONCE",
        "HASHTABLE_FIND",
        "HASHTABLE_IMPORT",
        "HASHTABLE_SIZE",
    ] {
        t.op(stateful).stateful();
    }
    // Control flow: the subgraphs each runs.
    t.op("IF").subgraphs(|op| {
        op.builtin_options_as_if_options()
            .map_or_else(Vec::new, |o| {
                vec![
                    ("then_subgraph_index", i64::from(o.then_subgraph_index())),
                    ("else_subgraph_index", i64::from(o.else_subgraph_index())),
                ]
            })
    });
    t.op("WHILE").subgraphs(|op| {
        op.builtin_options_as_while_options()
            .map_or_else(Vec::new, |o| {
                vec![
                    ("cond_subgraph_index", i64::from(o.cond_subgraph_index())),
                    ("body_subgraph_index", i64::from(o.body_subgraph_index())),
                ]
            })
    });
    t.op("CALL").subgraphs(|op| {
        op.builtin_options_as_call_options()
            .map_or_else(Vec::new, |o| vec![("subgraph", i64::from(o.subgraph()))])
    });
    t.op("CALL_ONCE").subgraphs(|op| {
        op.builtin_options_as_call_once_options()
            .map_or_else(Vec::new, |o| {
                vec![("init_subgraph_index", i64::from(o.init_subgraph_index()))]
            })
    });
    for stablehlo in [
        "STABLEHLO_REDUCE",
        "STABLEHLO_SORT",
        "STABLEHLO_WHILE",
        "STABLEHLO_SCATTER",
        "STABLEHLO_REDUCE_WINDOW",
        "STABLEHLO_CUSTOM_CALL",
        "STABLEHLO_COMPOSITE",
        "STABLEHLO_CASE",
    ] {
        t.op(stablehlo).uncopied_subgraphs = true;
    }
    t.op("CALL_ONCE").initialiser = true;
    for variable in ["VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"] {
        t.op(variable).variable = true;
    }
    // The resource a handle names: ops that share it share state.
    t.op("VAR_HANDLE")
        .stateful()
        .resource(|node| {
            // By container and shared name.
            let container = str_attr(node, "container").unwrap_or_default();
            let shared = str_attr(node, "shared_name").unwrap_or_default();
            let name = String::from_utf8_lossy(shared).into_owned();
            match container.is_empty() {
                true => name,
                false => format!("{}/{name}", String::from_utf8_lossy(container)),
            }
        })
        .options(var_handle);
    t.op("HASHTABLE")
        .stateful()
        .resource(|node| format!("table {}", int_attr(node, "table_id").unwrap_or(0)))
        .options(|o, a| {
            a.extend(
                o.builtin_options_as_hashtable_options()
                    .map(|o| int("table_id", o.table_id())),
            )
        });
    t.0
}

fn int_attr(node: &Node, name: &str) -> Option<i64> {
    match node.attr(name)? {
        AttrValue::Int(v) => Some(*v),
        _ => None,
    }
}

fn str_attr<'a>(node: &'a Node, name: &str) -> Option<&'a [u8]> {
    match node.attr(name)? {
        AttrValue::String(s) => Some(s),
        _ => None,
    }
}

/// A convolution's window: OHWI filters (`[1, H, W, C·M]` for depthwise, one group per input
/// channel), strides and dilations from the options.
fn conv_window(g: &Graph, n: NodeId) -> Option<Window> {
    let node = g.node(n);
    let w = g.value((*node.inputs.get(1)?)?).ty.static_dims()?;
    let [_, h, wd, i] = w[..] else { return None };
    let group = if node.op_type == "DEPTHWISE_CONV_2D" {
        let input = g.value((*node.inputs.first()?)?).ty.static_dims()?;
        *input.last()?
    } else {
        let input = g.value((*node.inputs.first()?)?).ty.static_dims();
        input
            .and_then(|d| d.last().copied())
            .filter(|&c| i > 0 && c % i == 0)
            .map_or(1, |c| c / i)
    };
    strided_window(node, vec![h, wd], group)
}

/// A pool's window: its filter size and strides from the options.
fn pool_window(g: &Graph, n: NodeId) -> Option<Window> {
    let node = g.node(n);
    let kernel = vec![
        int_attr(node, "filter_height")?,
        int_attr(node, "filter_width")?,
    ];
    strided_window(node, kernel, 1)
}

fn strided_window(node: &Node, kernel: Vec<i64>, group: i64) -> Option<Window> {
    let same = str_attr(node, "padding")? == b"SAME";
    let dil = |k| int_attr(node, k).unwrap_or(1);
    Some(Window {
        kernel,
        strides: vec![int_attr(node, "stride_h")?, int_attr(node, "stride_w")?],
        dilations: vec![dil("dilation_h_factor"), dil("dilation_w_factor")],
        pads: vec![0; 4],
        explicit_pads: !same,
        ceil_mode: false,
        group,
    })
}

struct Builder(HashMap<&'static str, OpDef>);

impl Builder {
    fn op(&mut self, name: &'static str) -> &mut OpDef {
        self.0.entry(name).or_default()
    }
}

fn activation(code: tflite::ActivationFunctionType) -> Attribute {
    let name = code.variant_name().unwrap_or("UNKNOWN");
    Attribute {
        name: "fused_activation_function".into(),
        value: AttrValue::String(Bytes::from_static(name.as_bytes())),
    }
}

pub(crate) fn int(name: &str, v: impl Into<i64>) -> Attribute {
    Attribute {
        name: name.into(),
        value: AttrValue::Int(v.into()),
    }
}

fn padding(p: tflite::Padding) -> Attribute {
    let name = p.variant_name().unwrap_or("UNKNOWN");
    Attribute {
        name: "padding".into(),
        value: AttrValue::String(Bytes::from_static(name.as_bytes())),
    }
}

/// What every 2-D window op's options hold, in one order: padding, strides, the op's own sizes,
/// then its fused activation.
fn window_2d(
    a: &mut Vec<Attribute>,
    pad: tflite::Padding,
    strides: (i32, i32),
    sizes: &[(&str, i32)],
    act: tflite::ActivationFunctionType,
) {
    a.push(padding(pad));
    a.push(int("stride_h", strides.0));
    a.push(int("stride_w", strides.1));
    a.extend(sizes.iter().map(|&(name, v)| int(name, v)));
    a.push(activation(act));
}

fn conv_2d(op: &tflite::Operator, a: &mut Vec<Attribute>) {
    if let Some(o) = op.builtin_options_as_conv_2_doptions() {
        let dilation = [
            ("dilation_h_factor", o.dilation_h_factor()),
            ("dilation_w_factor", o.dilation_w_factor()),
        ];
        let strides = (o.stride_h(), o.stride_w());
        window_2d(
            a,
            o.padding(),
            strides,
            &dilation,
            o.fused_activation_function(),
        );
    }
}

fn depthwise_conv_2d(op: &tflite::Operator, a: &mut Vec<Attribute>) {
    if let Some(o) = op.builtin_options_as_depthwise_conv_2_doptions() {
        let sizes = [
            ("dilation_h_factor", o.dilation_h_factor()),
            ("dilation_w_factor", o.dilation_w_factor()),
            ("depth_multiplier", o.depth_multiplier()),
        ];
        let strides = (o.stride_h(), o.stride_w());
        window_2d(
            a,
            o.padding(),
            strides,
            &sizes,
            o.fused_activation_function(),
        );
    }
}

fn pool_2d(op: &tflite::Operator, a: &mut Vec<Attribute>) {
    if let Some(o) = op.builtin_options_as_pool_2_doptions() {
        let filter = [
            ("filter_height", o.filter_height()),
            ("filter_width", o.filter_width()),
        ];
        let strides = (o.stride_h(), o.stride_w());
        window_2d(
            a,
            o.padding(),
            strides,
            &filter,
            o.fused_activation_function(),
        );
    }
}

fn fully_connected(op: &tflite::Operator, a: &mut Vec<Attribute>) {
    if let Some(o) = op.builtin_options_as_fully_connected_options() {
        a.push(activation(o.fused_activation_function()));
        a.push(int("keep_num_dims", o.keep_num_dims()));
    }
}

fn concatenation(op: &tflite::Operator, a: &mut Vec<Attribute>) {
    if let Some(o) = op.builtin_options_as_concatenation_options() {
        a.push(int("axis", o.axis()));
        a.push(activation(o.fused_activation_function()));
    }
}

fn var_handle(op: &tflite::Operator, a: &mut Vec<Attribute>) {
    if let Some(o) = op.builtin_options_as_var_handle_options() {
        for (name, v) in [
            ("container", o.container()),
            ("shared_name", o.shared_name()),
        ] {
            a.push(Attribute {
                name: name.into(),
                value: AttrValue::String(v.unwrap_or("").as_bytes().to_vec().into()),
            });
        }
    }
}

fn leaky_relu(op: &tflite::Operator, a: &mut Vec<Attribute>) {
    if let Some(o) = op.builtin_options_as_leaky_relu_options() {
        a.push(Attribute {
            name: "alpha".into(),
            value: AttrValue::Float(o.alpha()),
        });
    }
}
