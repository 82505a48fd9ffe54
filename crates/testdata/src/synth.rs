//! Small TFLite and circle models built through the generated object API, for tests: the
//! cases the real test models lack (empty, repeated and shared names and buffers, int8 with
//! per-channel weights, IF and WHILE with their bodies, a dynamic batch, buffers after the
//! flatbuffer, and ONE's `Net_InstanceNorm_003` as a circle file).
//!
//! Weights are seeded pseudo-random, so every call returns the same bytes. Operator versions
//! are the ones TFLite's converter gives these operators and types (LiteRT 2.3.0 runs them).

use cleave_ir::XorShift64;
use cleave_tflite::pack::Layout;
use cleave_tflite::schema::circle as C;
use cleave_tflite::schema::tflite as T;

/// A value of a generated object-API type: its defaults with these fields set. flatc marks
/// those types `#[non_exhaustive]`, so no struct expression builds one outside `cleave-tflite`.
macro_rules! obj {
    ($ty:path { $($field:ident : $value:expr),* $(,)? }) => {{
        let mut o = <$ty>::default();
        $(o.$field = $value;)*
        o
    }};
}

/// Weights drawn from a seeded generator, so they are the same on every call.
struct Rng(XorShift64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(XorShift64::raw(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 23) as f32) - 1.0
    }

    /// `n` values uniform in [-amp, amp).
    fn floats(&mut self, n: usize, amp: f32) -> Vec<f32> {
        (0..n).map(|_| self.unit() * amp).collect()
    }

    /// Uniform in [lo, hi].
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Generates, for one schema module, a small builder over its object API: operator codes and
/// buffers shared by the model's subgraphs, tensors and operators per subgraph.
macro_rules! net_builder {
    ($schema:ident, $format:expr) => {
        // Each schema's models use a different part of the builder.
        #[allow(dead_code)]
        pub(super) mod $schema {
            use cleave_tflite::codes::encode_builtin_code;
            use cleave_tflite::pack::Layout;
            use cleave_tflite::schema::$schema as s;

            pub use s::{
                ActivationFunctionType as Act, BuiltinOperator as Op, BuiltinOptionsT as Opt,
                TensorType as Ty,
            };

            /// A model under construction.
            pub struct Net {
                codes: Vec<s::OperatorCodeT>,
                /// Buffer data by index; buffer 0 stays empty, as the schema asks.
                buffers: Vec<Vec<u8>>,
                subgraphs: Vec<s::SubGraphT>,
            }

            /// One subgraph under construction.
            #[derive(Default)]
            pub struct Sub {
                tensors: Vec<s::TensorT>,
                operators: Vec<s::OperatorT>,
            }

            /// Per-tensor or per-channel quantization.
            pub fn quant(
                scale: &[f32],
                zero_point: &[i64],
                dim: i32,
            ) -> Option<Box<s::QuantizationParametersT>> {
                Some(Box::new(obj!(s::QuantizationParametersT {
                    scale: Some(scale.to_vec()),
                    zero_point: Some(zero_point.to_vec()),
                    quantized_dimension: dim,
                })))
            }

            impl Net {
                pub fn new() -> Net {
                    Net {
                        codes: Vec::new(),
                        buffers: vec![Vec::new()],
                        subgraphs: Vec::new(),
                    }
                }

                /// The index of `op`'s code at `version`, added on first use.
                pub fn code(&mut self, op: Op, version: i32) -> u32 {
                    let found = self
                        .codes
                        .iter()
                        .position(|c| c.builtin_code == op && c.version == version);
                    let at = found.unwrap_or_else(|| {
                        let (small, big) = encode_builtin_code($format, op.0);
                        self.codes.push(obj!(s::OperatorCodeT {
                            deprecated_builtin_code: small,
                            builtin_code: Op(big),
                            version: version,
                            custom_code: None,
                        }));
                        self.codes.len() - 1
                    });
                    at as u32
                }

                /// A new buffer holding `data`.
                pub fn buffer(&mut self, data: Vec<u8>) -> u32 {
                    self.buffers.push(data);
                    (self.buffers.len() - 1) as u32
                }

                /// Appends a finished subgraph; returns its index.
                pub fn subgraph(
                    &mut self,
                    name: &str,
                    sub: Sub,
                    inputs: &[i32],
                    outputs: &[i32],
                ) -> i32 {
                    self.subgraphs.push(obj!(s::SubGraphT {
                        tensors: Some(sub.tensors),
                        inputs: Some(inputs.to_vec()),
                        outputs: Some(outputs.to_vec()),
                        operators: Some(sub.operators),
                        name: Some(name.to_string()),
                    }));
                    (self.subgraphs.len() - 1) as i32
                }

                /// The packed model.
                pub fn finish(
                    self,
                    description: &str,
                    layout: Layout,
                    identifier: &str,
                ) -> Vec<u8> {
                    let model = obj!(s::ModelT {
                        version: 3,
                        operator_codes: Some(self.codes),
                        subgraphs: Some(self.subgraphs),
                        description: Some(description.to_string()),
                    });
                    let slices: Vec<&[u8]> = self.buffers.iter().map(Vec::as_slice).collect();
                    cleave_tflite::pack::$schema::pack(&model, &slices, layout, identifier)
                }
            }

            impl Sub {
                /// A tensor; returns its index.
                pub fn tensor(&mut self, name: &str, ty: Ty, shape: &[i32]) -> i32 {
                    self.push(obj!(s::TensorT {
                        name: Some(name.to_string()),
                        type_: ty,
                        shape: Some(shape.to_vec()),
                    }))
                }

                /// A constant tensor reading buffer `buffer`.
                pub fn constant(&mut self, name: &str, ty: Ty, shape: &[i32], buffer: u32) -> i32 {
                    let i = self.tensor(name, ty, shape);
                    self.tensors[i as usize].buffer = buffer;
                    i
                }

                /// A tensor written out in full.
                pub fn push(&mut self, t: s::TensorT) -> i32 {
                    self.tensors.push(t);
                    (self.tensors.len() - 1) as i32
                }

                /// Sets tensor `i`'s `shape_signature` (-1: a dynamic dim).
                pub fn set_signature(&mut self, i: i32, signature: &[i32]) {
                    self.tensors[i as usize].shape_signature = Some(signature.to_vec());
                }

                /// Sets tensor `i`'s quantization.
                pub fn quantize(&mut self, i: i32, q: Option<Box<s::QuantizationParametersT>>) {
                    self.tensors[i as usize].quantization = q;
                }

                /// An operator (`-1` among the inputs: an omitted optional input).
                pub fn op(&mut self, code: u32, inputs: &[i32], outputs: &[i32], options: Opt) {
                    self.operators.push(obj!(s::OperatorT {
                        opcode_index: code,
                        inputs: Some(inputs.to_vec()),
                        outputs: Some(outputs.to_vec()),
                        builtin_options: options,
                    }));
                }
            }
        }
    };
}

net_builder!(tflite, cleave_tflite::Format::Tflite);
net_builder!(circle, cleave_tflite::Format::Circle);

/// File names the tests give the models, and the models.
pub fn all() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("synth_names.tflite", names_and_shared()),
        ("synth_int8.tflite", int8_per_channel()),
        ("synth_control.tflite", control_flow()),
        ("synth_dynamic.tflite", dynamic_batch()),
        ("synth_offsets.tflite", names_offsets()),
        ("Net_InstanceNorm_003.circle", instance_norm_circle()),
        ("synth_computed_if.tflite", computed_if()),
    ]
}

/// A float chain with awkward names and a shared buffer (tensor indices in brackets):
///
/// ```text
/// fc_a [4]  = FULLY_CONNECTED(x [0], fc_a/weights [1], fc_a/bias [3])
/// fc_b [5]  = FULLY_CONNECTED(x, fc_b/weights [2], no bias)
/// ""   [6]  = ADD(fc_a, fc_b)
/// dup  [7]  = LOGISTIC([6])
/// dup  [8]  = MUL([6], [7])
/// out  [9]  = CONCATENATION([8], fc_a; axis 1)            x [1,8] → out [1,16]
/// ```
///
/// Tensor 6 has an empty name; tensors 7 and 8 are both named `dup`; `fc_a/weights` and
/// `fc_b/weights` read the same buffer.
pub fn names_and_shared() -> Vec<u8> {
    names_model(Layout::Inline)
}

/// [`names_and_shared`] with its buffers after the flatbuffer at `Buffer.offset`/`size`.
pub fn names_offsets() -> Vec<u8> {
    names_model(Layout::Offsets)
}

fn names_model(layout: Layout) -> Vec<u8> {
    use tflite::{Act, Net, Op, Opt, Sub, Ty};
    let mut rng = Rng::new(0x5eed_0001);
    let mut net = Net::new();
    let fc = net.code(Op::FULLY_CONNECTED, 1);
    let add = net.code(Op::ADD, 1);
    let logistic = net.code(Op::LOGISTIC, 1);
    let mul = net.code(Op::MUL, 1);
    let concat = net.code(Op::CONCATENATION, 1);
    let shared = net.buffer(f32_bytes(&rng.floats(64, 0.5)));
    let bias = net.buffer(f32_bytes(&rng.floats(8, 0.2)));

    let mut g = Sub::default();
    let x = g.tensor("x", Ty::FLOAT32, &[1, 8]);
    let wa = g.constant("fc_a/weights", Ty::FLOAT32, &[8, 8], shared);
    let wb = g.constant("fc_b/weights", Ty::FLOAT32, &[8, 8], shared);
    let ba = g.constant("fc_a/bias", Ty::FLOAT32, &[8], bias);
    let fc_a = g.tensor("fc_a", Ty::FLOAT32, &[1, 8]);
    let fc_b = g.tensor("fc_b", Ty::FLOAT32, &[1, 8]);
    let unnamed = g.tensor("", Ty::FLOAT32, &[1, 8]);
    let dup1 = g.tensor("dup", Ty::FLOAT32, &[1, 8]);
    let dup2 = g.tensor("dup", Ty::FLOAT32, &[1, 8]);
    let out = g.tensor("out", Ty::FLOAT32, &[1, 16]);
    let fc_opts = || Opt::FullyConnectedOptions(Box::default());
    g.op(fc, &[x, wa, ba], &[fc_a], fc_opts());
    g.op(fc, &[x, wb, -1], &[fc_b], fc_opts());
    g.op(
        add,
        &[fc_a, fc_b],
        &[unnamed],
        Opt::AddOptions(Box::default()),
    );
    g.op(logistic, &[unnamed], &[dup1], Opt::NONE);
    g.op(
        mul,
        &[unnamed, dup1],
        &[dup2],
        Opt::MulOptions(Box::default()),
    );
    g.op(
        concat,
        &[dup2, fc_a],
        &[out],
        Opt::ConcatenationOptions(Box::new(obj!(T::ConcatenationOptionsT {
            axis: 1,
            fused_activation_function: Act::NONE,
        }))),
    );
    net.subgraph("main", g, &[x], &[out]);
    net.finish("cleave synth: names and a shared buffer", layout, "TFL3")
}

/// int8 with per-channel weights, so a split can put a boundary on quantized tensors:
///
/// ```text
/// input_int8 = QUANTIZE(input)                     input f32 [1,8,8,3]
/// conv       = CONV_2D(input_int8, 4×3×3×3)        per-channel weights, axis 0
/// dw         = DEPTHWISE_CONV_2D(conv, 1×3×3×4)    per-channel weights, axis 3
/// sum        = ADD(conv, dw)
/// output     = DEQUANTIZE(sum)                     f32 [1,8,8,4]
/// ```
///
/// Activations are int8 per-tensor with non-zero zero points; biases int32 with scale
/// `input scale × weight scale[c]`; weight and bias zero points 0.
pub fn int8_per_channel() -> Vec<u8> {
    use tflite::{quant, Net, Op, Opt, Sub, Ty};
    let mut rng = Rng::new(0x5eed_0002);
    let mut net = Net::new();
    let quantize = net.code(Op::QUANTIZE, 2);
    let conv = net.code(Op::CONV_2D, 3);
    let dwconv = net.code(Op::DEPTHWISE_CONV_2D, 3);
    let add = net.code(Op::ADD, 2);
    let dequantize = net.code(Op::DEQUANTIZE, 2);

    let (in_scale, in_zp) = (0.024f32, -2i64);
    let (conv_scale, conv_zp) = (0.06f32, 3i64);
    let (dw_scale, dw_zp) = (0.05f32, -4i64);
    let (sum_scale, sum_zp) = (0.08f32, 1i64);
    let channels = 4usize;
    let w_scales = |rng: &mut Rng| -> Vec<f32> {
        (0..channels)
            .map(|_| 0.002 + 0.002 * (rng.unit() + 1.0))
            .collect()
    };
    let int8s = |rng: &mut Rng, n: usize| -> Vec<u8> {
        (0..n).map(|_| rng.int(-127, 127) as i8 as u8).collect()
    };
    let biases = |rng: &mut Rng| -> Vec<i32> {
        (0..channels).map(|_| rng.int(-2000, 2000) as i32).collect()
    };
    let conv_ws = w_scales(&mut rng);
    let conv_w = net.buffer(int8s(&mut rng, channels * 3 * 3 * 3));
    let conv_b = net.buffer(i32_bytes(&biases(&mut rng)));
    let dw_ws = w_scales(&mut rng);
    let dw_w = net.buffer(int8s(&mut rng, 3 * 3 * channels));
    let dw_b = net.buffer(i32_bytes(&biases(&mut rng)));
    let zeros = vec![0i64; channels];
    let c = channels as i32;

    let mut g = Sub::default();
    let input = g.tensor("input", Ty::FLOAT32, &[1, 8, 8, 3]);
    let q_in = g.tensor("input_int8", Ty::INT8, &[1, 8, 8, 3]);
    g.quantize(q_in, quant(&[in_scale], &[in_zp], 0));
    let w1 = g.constant("conv/weights", Ty::INT8, &[c, 3, 3, 3], conv_w);
    g.quantize(w1, quant(&conv_ws, &zeros, 0));
    let b1 = g.constant("conv/bias", Ty::INT32, &[c], conv_b);
    let b1_scales: Vec<f32> = conv_ws.iter().map(|w| in_scale * w).collect();
    g.quantize(b1, quant(&b1_scales, &zeros, 0));
    let conv_out = g.tensor("conv", Ty::INT8, &[1, 8, 8, c]);
    g.quantize(conv_out, quant(&[conv_scale], &[conv_zp], 0));
    let w2 = g.constant("dw/weights", Ty::INT8, &[1, 3, 3, c], dw_w);
    g.quantize(w2, quant(&dw_ws, &zeros, 3));
    let b2 = g.constant("dw/bias", Ty::INT32, &[c], dw_b);
    let b2_scales: Vec<f32> = dw_ws.iter().map(|w| conv_scale * w).collect();
    g.quantize(b2, quant(&b2_scales, &zeros, 0));
    let dw_out = g.tensor("dw", Ty::INT8, &[1, 8, 8, c]);
    g.quantize(dw_out, quant(&[dw_scale], &[dw_zp], 0));
    let sum = g.tensor("sum", Ty::INT8, &[1, 8, 8, c]);
    g.quantize(sum, quant(&[sum_scale], &[sum_zp], 0));
    let output = g.tensor("output", Ty::FLOAT32, &[1, 8, 8, c]);

    g.op(
        quantize,
        &[input],
        &[q_in],
        Opt::QuantizeOptions(Box::default()),
    );
    g.op(
        conv,
        &[q_in, w1, b1],
        &[conv_out],
        Opt::Conv2DOptions(Box::new(obj!(T::Conv2DOptionsT {
            padding: T::Padding::SAME,
            stride_w: 1,
            stride_h: 1,
            dilation_w_factor: 1,
            dilation_h_factor: 1,
        }))),
    );
    g.op(
        dwconv,
        &[conv_out, w2, b2],
        &[dw_out],
        Opt::DepthwiseConv2DOptions(Box::new(obj!(T::DepthwiseConv2DOptionsT {
            padding: T::Padding::SAME,
            stride_w: 1,
            stride_h: 1,
            depth_multiplier: 1,
            dilation_w_factor: 1,
            dilation_h_factor: 1,
        }))),
    );
    g.op(
        add,
        &[conv_out, dw_out],
        &[sum],
        Opt::AddOptions(Box::default()),
    );
    g.op(
        dequantize,
        &[sum],
        &[output],
        Opt::DequantizeOptions(Box::default()),
    );
    net.subgraph("main", g, &[input], &[output]);
    net.finish("cleave synth: int8 per-channel", Layout::Inline, "TFL3")
}

/// Number of WHILE iterations in [`control_flow`].
pub const WHILE_ITERATIONS: i32 = 3;

/// IF and WHILE with operators before, between and after, in five subgraphs:
///
/// ```text
/// 0 main: pre = ADD(x [1,4], bias); if_out = IF(flag [1] bool, pre; then 1, else 2)
///         mid = MUL(if_out, scale); (i_out, w_out) = WHILE(i0 = 0, mid; cond 3, body 4)
///         y = LOGISTIC(w_out)
/// 1 then: t_out = ADD(MUL(t_in, 2), 1)      2 else: e_out = TANH(SUB(e_in, 0.25))
/// 3 cond: c_i < 3                           4 body: (b_i + 1, b_x × 2)
/// ```
pub fn control_flow() -> Vec<u8> {
    use tflite::{Net, Op, Opt, Sub, Ty};
    let mut rng = Rng::new(0x5eed_0003);
    let mut net = Net::new();
    let add = net.code(Op::ADD, 1);
    let mul = net.code(Op::MUL, 1);
    let sub = net.code(Op::SUB, 1);
    let tanh = net.code(Op::TANH, 1);
    let logistic = net.code(Op::LOGISTIC, 1);
    let less = net.code(Op::LESS, 1);
    let if_ = net.code(Op::IF, 1);
    let while_ = net.code(Op::WHILE, 1);
    let bias = net.buffer(f32_bytes(&rng.floats(4, 0.5)));
    let scale = net.buffer(f32_bytes(&rng.floats(4, 0.3)));
    let zero = net.buffer(i32_bytes(&[0]));
    let two = net.buffer(f32_bytes(&[2.0]));
    let one = net.buffer(f32_bytes(&[1.0]));
    let quarter = net.buffer(f32_bytes(&[0.25]));
    let limit = net.buffer(i32_bytes(&[WHILE_ITERATIONS]));
    let one_i = net.buffer(i32_bytes(&[1]));
    let two_b = net.buffer(f32_bytes(&[2.0]));
    let add_opts = || Opt::AddOptions(Box::default());
    let mul_opts = || Opt::MulOptions(Box::default());

    let mut g = Sub::default();
    let x = g.tensor("x", Ty::FLOAT32, &[1, 4]);
    let flag = g.tensor("flag", Ty::BOOL, &[1]);
    let bias_t = g.constant("bias", Ty::FLOAT32, &[4], bias);
    let pre = g.tensor("pre", Ty::FLOAT32, &[1, 4]);
    let if_out = g.tensor("if_out", Ty::FLOAT32, &[1, 4]);
    let scale_t = g.constant("scale", Ty::FLOAT32, &[4], scale);
    let mid = g.tensor("mid", Ty::FLOAT32, &[1, 4]);
    let i0 = g.constant("i0", Ty::INT32, &[1], zero);
    let i_out = g.tensor("i_out", Ty::INT32, &[1]);
    let w_out = g.tensor("w_out", Ty::FLOAT32, &[1, 4]);
    let y = g.tensor("y", Ty::FLOAT32, &[1, 4]);
    g.op(add, &[x, bias_t], &[pre], add_opts());
    g.op(
        if_,
        &[flag, pre],
        &[if_out],
        Opt::IfOptions(Box::new(obj!(T::IfOptionsT {
            then_subgraph_index: 1,
            else_subgraph_index: 2,
        }))),
    );
    g.op(mul, &[if_out, scale_t], &[mid], mul_opts());
    g.op(
        while_,
        &[i0, mid],
        &[i_out, w_out],
        Opt::WhileOptions(Box::new(obj!(T::WhileOptionsT {
            cond_subgraph_index: 3,
            body_subgraph_index: 4,
        }))),
    );
    g.op(logistic, &[w_out], &[y], Opt::NONE);
    net.subgraph("main", g, &[x, flag], &[y]);

    let mut t = Sub::default();
    let t_in = t.tensor("t_in", Ty::FLOAT32, &[1, 4]);
    let t_two = t.constant("t_two", Ty::FLOAT32, &[1], two);
    let t_mul = t.tensor("t_mul", Ty::FLOAT32, &[1, 4]);
    let t_one = t.constant("t_one", Ty::FLOAT32, &[1], one);
    let t_out = t.tensor("t_out", Ty::FLOAT32, &[1, 4]);
    t.op(mul, &[t_in, t_two], &[t_mul], mul_opts());
    t.op(add, &[t_mul, t_one], &[t_out], add_opts());
    net.subgraph("then", t, &[t_in], &[t_out]);

    let mut e = Sub::default();
    let e_in = e.tensor("e_in", Ty::FLOAT32, &[1, 4]);
    let e_quarter = e.constant("e_quarter", Ty::FLOAT32, &[1], quarter);
    let e_sub = e.tensor("e_sub", Ty::FLOAT32, &[1, 4]);
    let e_out = e.tensor("e_out", Ty::FLOAT32, &[1, 4]);
    e.op(
        sub,
        &[e_in, e_quarter],
        &[e_sub],
        Opt::SubOptions(Box::default()),
    );
    e.op(tanh, &[e_sub], &[e_out], Opt::NONE);
    net.subgraph("else", e, &[e_in], &[e_out]);

    let mut c = Sub::default();
    let c_i = c.tensor("c_i", Ty::INT32, &[1]);
    let c_x = c.tensor("c_x", Ty::FLOAT32, &[1, 4]);
    let c_n = c.constant("c_n", Ty::INT32, &[1], limit);
    let c_out = c.tensor("c_out", Ty::BOOL, &[1]);
    c.op(
        less,
        &[c_i, c_n],
        &[c_out],
        Opt::LessOptions(Box::default()),
    );
    net.subgraph("cond", c, &[c_i, c_x], &[c_out]);

    let mut b = Sub::default();
    let b_i = b.tensor("b_i", Ty::INT32, &[1]);
    let b_x = b.tensor("b_x", Ty::FLOAT32, &[1, 4]);
    let b_one = b.constant("b_one", Ty::INT32, &[1], one_i);
    let b_two = b.constant("b_two", Ty::FLOAT32, &[1], two_b);
    let b_i_next = b.tensor("b_i_next", Ty::INT32, &[1]);
    let b_x_next = b.tensor("b_x_next", Ty::FLOAT32, &[1, 4]);
    b.op(add, &[b_i, b_one], &[b_i_next], add_opts());
    b.op(mul, &[b_x, b_two], &[b_x_next], mul_opts());
    net.subgraph("body", b, &[b_i, b_x], &[b_i_next, b_x_next]);

    net.finish("cleave synth: IF and WHILE", Layout::Inline, "TFL3")
}

/// IF whose condition is computed, the way a streaming detector gates its head on a counter:
///
/// ```text
/// 0 main: gate = GREATER(level [1,1], threshold [1,1])   (bool [1,1])
///         y = IF(gate, x [1,4]; then 1, else 2)
/// 1 then: t_out = ADD(t_in, 1)      2 else: e_out = SUB(e_in, 1)
/// ```
///
/// A split between GREATER and IF makes `gate` a part input of rank 2 feeding IF's condition.
pub fn computed_if() -> Vec<u8> {
    use tflite::{Net, Op, Opt, Sub, Ty};
    let mut net = Net::new();
    let greater = net.code(Op::GREATER, 1);
    let if_ = net.code(Op::IF, 1);
    let add = net.code(Op::ADD, 1);
    let sub = net.code(Op::SUB, 1);
    let threshold = net.buffer(f32_bytes(&[0.0]));
    let one = net.buffer(f32_bytes(&[1.0]));
    let one_e = net.buffer(f32_bytes(&[1.0]));

    let mut g = Sub::default();
    let level = g.tensor("level", Ty::FLOAT32, &[1, 1]);
    let x = g.tensor("x", Ty::FLOAT32, &[1, 4]);
    let threshold_t = g.constant("threshold", Ty::FLOAT32, &[1, 1], threshold);
    let gate = g.tensor("gate", Ty::BOOL, &[1, 1]);
    let y = g.tensor("y", Ty::FLOAT32, &[1, 4]);
    g.op(
        greater,
        &[level, threshold_t],
        &[gate],
        Opt::GreaterOptions(Box::default()),
    );
    g.op(
        if_,
        &[gate, x],
        &[y],
        Opt::IfOptions(Box::new(obj!(T::IfOptionsT {
            then_subgraph_index: 1,
            else_subgraph_index: 2,
        }))),
    );
    net.subgraph("main", g, &[level, x], &[y]);

    let mut t = Sub::default();
    let t_in = t.tensor("t_in", Ty::FLOAT32, &[1, 4]);
    let t_one = t.constant("t_one", Ty::FLOAT32, &[1], one);
    let t_out = t.tensor("t_out", Ty::FLOAT32, &[1, 4]);
    t.op(
        add,
        &[t_in, t_one],
        &[t_out],
        Opt::AddOptions(Box::default()),
    );
    net.subgraph("then", t, &[t_in], &[t_out]);

    let mut e = Sub::default();
    let e_in = e.tensor("e_in", Ty::FLOAT32, &[1, 4]);
    let e_one = e.constant("e_one", Ty::FLOAT32, &[1], one_e);
    let e_out = e.tensor("e_out", Ty::FLOAT32, &[1, 4]);
    e.op(
        sub,
        &[e_in, e_one],
        &[e_out],
        Opt::SubOptions(Box::default()),
    );
    net.subgraph("else", e, &[e_in], &[e_out]);

    net.finish(
        "cleave synth: IF on a computed condition",
        Layout::Inline,
        "TFL3",
    )
}

/// A dynamic batch: `x` has shape [1, 8] and `shape_signature` [-1, 8], as do the tensors
/// after it.
///
/// ```text
/// fc [-1,6] = FULLY_CONNECTED(x [-1,8]; keep_num_dims)
/// add = ADD(fc, offset); out = RELU(add)
/// ```
pub fn dynamic_batch() -> Vec<u8> {
    use tflite::{Net, Op, Opt, Sub, Ty};
    let mut rng = Rng::new(0x5eed_0004);
    let mut net = Net::new();
    let fc = net.code(Op::FULLY_CONNECTED, 5);
    let add = net.code(Op::ADD, 1);
    let relu = net.code(Op::RELU, 1);
    let w = net.buffer(f32_bytes(&rng.floats(6 * 8, 0.5)));
    let bias = net.buffer(f32_bytes(&rng.floats(6, 0.2)));
    let offset = net.buffer(f32_bytes(&rng.floats(6, 0.3)));
    let mut g = Sub::default();
    let dynamic = |g: &mut Sub, name: &str, width: i32| -> i32 {
        let i = g.tensor(name, Ty::FLOAT32, &[1, width]);
        g.set_signature(i, &[-1, width]);
        i
    };
    let x = dynamic(&mut g, "x", 8);
    let w_t = g.constant("fc/weights", Ty::FLOAT32, &[6, 8], w);
    let b_t = g.constant("fc/bias", Ty::FLOAT32, &[6], bias);
    let fc_out = dynamic(&mut g, "fc", 6);
    let off_t = g.constant("offset", Ty::FLOAT32, &[6], offset);
    let add_out = dynamic(&mut g, "add", 6);
    let out = dynamic(&mut g, "out", 6);
    g.op(
        fc,
        &[x, w_t, b_t],
        &[fc_out],
        Opt::FullyConnectedOptions(Box::new(obj!(T::FullyConnectedOptionsT {
            keep_num_dims: true,
        }))),
    );
    g.op(
        add,
        &[fc_out, off_t],
        &[add_out],
        Opt::AddOptions(Box::default()),
    );
    g.op(relu, &[add_out], &[out], Opt::NONE);
    net.subgraph("main", g, &[x], &[out]);
    net.finish("cleave synth: dynamic batch", Layout::Inline, "TFL3")
}

/// A dim computed at run time, as Keras front ends make them: the converter writes -1 in
/// `shape_signature` and a placeholder 1 in `shape` for every tensor after the RESHAPE, and the
/// real height (16 for x `[1,16,6,1]`) only comes from preparing the RESHAPE itself.
///
/// ```text
/// y = RESHAPE(x [1,-1,6,1], [1,-1,3,2])               [1,-1,3,2], written [1,1,3,2]
/// a = CONV_2D(y, a/weights [4,3,3,2], a/bias; VALID)  [1,-1,1,4]
/// b = CONV_2D(y, b/weights [4,3,3,2], b/bias; VALID)  [1,-1,1,4]
/// out = LOGISTIC(CONCATENATION(a, b; axis 3))         [1,-1,1,8]
/// ```
///
/// A part that receives `y` with the placeholder cannot be prepared: a 3-high VALID
/// convolution over a height of 1.
pub fn computed_dims() -> Vec<u8> {
    use tflite::{Act, Net, Op, Opt, Sub, Ty};
    let mut rng = Rng::new(0x5eed_0007);
    let mut net = Net::new();
    let reshape = net.code(Op::RESHAPE, 1);
    let conv = net.code(Op::CONV_2D, 1);
    let concat = net.code(Op::CONCATENATION, 1);
    let logistic = net.code(Op::LOGISTIC, 1);
    let new_shape = net.buffer(i32_bytes(&[1, -1, 3, 2]));
    let mut g = Sub::default();
    let dynamic = |g: &mut Sub, name: &str, written: &[i32]| -> i32 {
        let i = g.tensor(name, Ty::FLOAT32, written);
        let mut signature = written.to_vec();
        signature[1] = -1;
        g.set_signature(i, &signature);
        i
    };
    let x = dynamic(&mut g, "x", &[1, 16, 6, 1]);
    let shape_t = g.constant("new_shape", Ty::INT32, &[4], new_shape);
    let y = dynamic(&mut g, "y", &[1, 1, 3, 2]);
    g.op(
        reshape,
        &[x, shape_t],
        &[y],
        Opt::ReshapeOptions(Box::new(obj!(T::ReshapeOptionsT {
            new_shape: Some(vec![1, -1, 3, 2]),
        }))),
    );
    let mut branches = Vec::new();
    for name in ["a", "b"] {
        let w = net.buffer(f32_bytes(&rng.floats(4 * 3 * 3 * 2, 0.5)));
        let b = net.buffer(f32_bytes(&rng.floats(4, 0.2)));
        let w_t = g.constant(&format!("{name}/weights"), Ty::FLOAT32, &[4, 3, 3, 2], w);
        let b_t = g.constant(&format!("{name}/bias"), Ty::FLOAT32, &[4], b);
        let out = dynamic(&mut g, name, &[1, 1, 1, 4]);
        g.op(
            conv,
            &[y, w_t, b_t],
            &[out],
            Opt::Conv2DOptions(Box::new(obj!(T::Conv2DOptionsT {
                padding: T::Padding::VALID,
                stride_w: 1,
                stride_h: 1,
                dilation_w_factor: 1,
                dilation_h_factor: 1,
                fused_activation_function: Act::RELU,
            }))),
        );
        branches.push(out);
    }
    let joined = dynamic(&mut g, "joined", &[1, 1, 1, 8]);
    g.op(
        concat,
        &branches,
        &[joined],
        Opt::ConcatenationOptions(Box::new(obj!(T::ConcatenationOptionsT {
            axis: 3,
            fused_activation_function: Act::NONE,
        }))),
    );
    let out = dynamic(&mut g, "out", &[1, 1, 1, 8]);
    g.op(logistic, &[joined], &[out], Opt::NONE);
    net.subgraph("main", g, &[x], &[out]);
    net.finish("cleave synth: computed dims", Layout::Inline, "TFL3")
}

/// The values of ONE's `Net_InstanceNorm_003` recipe (res/TensorFlowLiteRecipes).
const IN_GAMMA: [f32; 12] = [
    0.574708, 0.387735, 0.8995, 0.484296, 2.35851, 1.06661, 0.343602, 2.27583, 1.14559, 0.690169,
    1.2044, 0.350952,
];
const IN_BETA: [f32; 12] = [
    1.9714, 1.4517, 1.20315, 0.287979, 0.161815, -0.281398, 2.70276, -0.166962, 0.266389, 0.890943,
    -0.279833, 1.82808,
];

/// ONE's `Net_InstanceNorm_003` as a circle model: instance normalisation spelled out in
/// TFLite builtins (no circle-only operator), tensors named and ordered as ONE's recipe
/// declares them.
///
/// ```text
/// Mean_of_ifm       = MEAN(Input [1,8,6,12], Reduction_indices = [1, 2]; keep_dims)
/// SquaredDifference = SQUARED_DIFFERENCE(Input, Mean_of_ifm)
/// Mean_as_variance  = MEAN(SquaredDifference, Reduction_indices; keep_dims)
/// Add_as_variance   = ADD(Mean_as_variance, Epsilon)
/// Pow               = POW(Add_as_variance, Zero_point_five)
/// Sub               = SUB(Input, Mean_of_ifm)
/// Div               = DIV(Sub, Pow)
/// Mul_gamma         = MUL(Div, Gamma)
/// Add_as_terminal   = ADD(Mul_gamma, Beta; RELU)
/// ```
pub fn instance_norm_circle() -> Vec<u8> {
    use circle::{Act, Net, Op, Opt, Sub, Ty};
    let mut net = Net::new();
    let mean = net.code(Op::MEAN, 1);
    let sqdiff = net.code(Op::SQUARED_DIFFERENCE, 1);
    let add = net.code(Op::ADD, 1);
    let pow = net.code(Op::POW, 1);
    let sub = net.code(Op::SUB, 1);
    let div = net.code(Op::DIV, 1);
    let mul = net.code(Op::MUL, 1);
    let beta = net.buffer(f32_bytes(&IN_BETA));
    let gamma = net.buffer(f32_bytes(&IN_GAMMA));
    let epsilon = net.buffer(f32_bytes(&[0.001]));
    let half = net.buffer(f32_bytes(&[0.5]));
    let axes = net.buffer(i32_bytes(&[1, 2]));
    let full = [1, 8, 6, 12];
    let reduced = [1, 1, 1, 12];

    let mut g = Sub::default();
    let input = g.tensor("Input", Ty::FLOAT32, &full);
    let div_out = g.tensor("Div", Ty::FLOAT32, &full);
    let beta_t = g.constant("Beta", Ty::FLOAT32, &[12], beta);
    let gamma_t = g.constant("Gamma", Ty::FLOAT32, &[12], gamma);
    let pow_out = g.tensor("Pow", Ty::FLOAT32, &reduced);
    let output = g.tensor("Add_as_terminal", Ty::FLOAT32, &full);
    let eps_t = g.constant("Epsilon", Ty::FLOAT32, &[], epsilon);
    let half_t = g.constant("Zero_point_five", Ty::FLOAT32, &[], half);
    let mul_out = g.tensor("Mul_gamma", Ty::FLOAT32, &full);
    let sub_out = g.tensor("Sub", Ty::FLOAT32, &full);
    let sq_out = g.tensor("SquaredDifference", Ty::FLOAT32, &full);
    let mean_out = g.tensor("Mean_of_ifm", Ty::FLOAT32, &reduced);
    let axes_t = g.constant("Reduction_indices", Ty::INT32, &[2], axes);
    let var_out = g.tensor("Mean_as_variance", Ty::FLOAT32, &reduced);
    let var_eps = g.tensor("Add_as_variance", Ty::FLOAT32, &reduced);
    let keep = || Opt::ReducerOptions(Box::new(obj!(C::ReducerOptionsT { keep_dims: true })));
    g.op(mean, &[input, axes_t], &[mean_out], keep());
    g.op(
        sqdiff,
        &[input, mean_out],
        &[sq_out],
        Opt::SquaredDifferenceOptions(Box::default()),
    );
    g.op(mean, &[sq_out, axes_t], &[var_out], keep());
    g.op(
        add,
        &[var_out, eps_t],
        &[var_eps],
        Opt::AddOptions(Box::default()),
    );
    g.op(
        pow,
        &[var_eps, half_t],
        &[pow_out],
        Opt::PowOptions(Box::default()),
    );
    g.op(
        sub,
        &[input, mean_out],
        &[sub_out],
        Opt::SubOptions(Box::default()),
    );
    g.op(
        div,
        &[sub_out, pow_out],
        &[div_out],
        Opt::DivOptions(Box::default()),
    );
    g.op(
        mul,
        &[div_out, gamma_t],
        &[mul_out],
        Opt::MulOptions(Box::default()),
    );
    g.op(
        add,
        &[mul_out, beta_t],
        &[output],
        Opt::AddOptions(Box::new(obj!(C::AddOptionsT {
            fused_activation_function: Act::RELU,
        }))),
    );
    net.subgraph("main", g, &[input], &[output]);
    net.finish(
        "cleave synth: ONE's Net_InstanceNorm_003",
        Layout::Inline,
        "CIR0",
    )
}
