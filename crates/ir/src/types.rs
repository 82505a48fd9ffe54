use std::fmt;

/// Element type of a tensor. The set is ONNX's, which is a superset of TFLite's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElemType {
    F32,
    U8,
    I8,
    U16,
    I16,
    I32,
    I64,
    Str,
    Bool,
    F16,
    F64,
    U32,
    U64,
    C64,
    C128,
    BF16,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    U4,
    I4,
    F4E2M1,
    F8E8M0,
    U2,
    I2,
    /// A type this version of cleave has no name for; the number is the source format's code.
    Other(i32),
}

impl ElemType {
    /// Storage size of one element in bits, where it has a fixed one.
    pub fn bits(self) -> Option<u32> {
        use ElemType::*;
        Some(match self {
            Bool | U8 | I8 | F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F8E8M0 => 8,
            U16 | I16 | F16 | BF16 => 16,
            F32 | I32 | U32 => 32,
            F64 | I64 | U64 | C64 => 64,
            C128 => 128,
            U4 | I4 | F4E2M1 => 4,
            U2 | I2 => 2,
            Str | Other(_) => return None,
        })
    }

    pub fn name(self) -> String {
        use ElemType::*;
        match self {
            F32 => "float32",
            U8 => "uint8",
            I8 => "int8",
            U16 => "uint16",
            I16 => "int16",
            I32 => "int32",
            I64 => "int64",
            Str => "string",
            Bool => "bool",
            F16 => "float16",
            F64 => "float64",
            U32 => "uint32",
            U64 => "uint64",
            C64 => "complex64",
            C128 => "complex128",
            BF16 => "bfloat16",
            F8E4M3FN => "float8e4m3fn",
            F8E4M3FNUZ => "float8e4m3fnuz",
            F8E5M2 => "float8e5m2",
            F8E5M2FNUZ => "float8e5m2fnuz",
            U4 => "uint4",
            I4 => "int4",
            F4E2M1 => "float4e2m1",
            F8E8M0 => "float8e8m0",
            U2 => "uint2",
            I2 => "int2",
            Other(code) => return format!("type#{code}"),
        }
        .to_string()
    }

    pub fn is_float(self) -> bool {
        use ElemType::*;
        matches!(
            self,
            F32 | F16 | F64 | BF16 | F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F4E2M1 | F8E8M0
        )
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// One dimension of a shape: a number, a named symbol (a dynamic batch, say), or unknown.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Fixed(i64),
    Param(String),
    Unknown,
}

impl Dim {
    pub fn fixed(&self) -> Option<i64> {
        match self {
            Dim::Fixed(n) => Some(*n),
            _ => None,
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Param(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// What is known of a tensor: its element type and its shape (`None` = rank unknown).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub elem: Option<ElemType>,
    pub shape: Option<Vec<Dim>>,
}

impl TensorType {
    pub fn new(elem: ElemType, shape: Vec<Dim>) -> Self {
        TensorType {
            elem: Some(elem),
            shape: Some(shape),
        }
    }

    pub fn fixed(elem: ElemType, dims: &[i64]) -> Self {
        TensorType::new(elem, dims.iter().map(|&d| Dim::Fixed(d)).collect())
    }

    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(Vec::len)
    }

    /// All dimensions as numbers, when every one is known.
    pub fn static_dims(&self) -> Option<Vec<i64>> {
        self.shape.as_ref()?.iter().map(Dim::fixed).collect()
    }

    pub fn is_complete(&self) -> bool {
        self.elem.is_some() && self.shape.is_some()
    }

    /// Bytes of one tensor of this type, when its shape is static and its element sized.
    pub fn byte_size(&self) -> Option<u64> {
        let bits = u64::from(self.elem?.bits()?);
        let count = self
            .static_dims()?
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))?;
        Some(count.checked_mul(bits)?.div_ceil(8))
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.elem {
            Some(e) => write!(f, "{e}")?,
            None => f.write_str("?")?,
        }
        match &self.shape {
            Some(dims) => {
                f.write_str("[")?;
                for (i, d) in dims.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{d}")?;
                }
                f.write_str("]")
            }
            None => f.write_str("[?]"),
        }
    }
}
