use cleave_ir::ElemType;

/// `TensorProto.DataType` code to the IR's element type (0, UNDEFINED, gives `None`).
pub fn elem_from_code(code: i32) -> Option<ElemType> {
    use ElemType::*;
    Some(match code {
        0 => return None,
        1 => F32,
        2 => U8,
        3 => I8,
        4 => U16,
        5 => I16,
        6 => I32,
        7 => I64,
        8 => Str,
        9 => Bool,
        10 => F16,
        11 => F64,
        12 => U32,
        13 => U64,
        14 => C64,
        15 => C128,
        16 => BF16,
        17 => F8E4M3FN,
        18 => F8E4M3FNUZ,
        19 => F8E5M2,
        20 => F8E5M2FNUZ,
        21 => U4,
        22 => I4,
        23 => F4E2M1,
        24 => F8E8M0,
        25 => U2,
        26 => I2,
        other => Other(other),
    })
}

pub fn elem_to_code(e: ElemType) -> i32 {
    use ElemType::*;
    match e {
        F32 => 1,
        U8 => 2,
        I8 => 3,
        U16 => 4,
        I16 => 5,
        I32 => 6,
        I64 => 7,
        Str => 8,
        Bool => 9,
        F16 => 10,
        F64 => 11,
        U32 => 12,
        U64 => 13,
        C64 => 14,
        C128 => 15,
        BF16 => 16,
        F8E4M3FN => 17,
        F8E4M3FNUZ => 18,
        F8E5M2 => 19,
        F8E5M2FNUZ => 20,
        U4 => 21,
        I4 => 22,
        F4E2M1 => 23,
        F8E8M0 => 24,
        U2 => 25,
        I2 => 26,
        Other(code) => code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for code in 1..=30 {
            let e = elem_from_code(code).unwrap();
            assert_eq!(elem_to_code(e), code);
        }
        assert_eq!(elem_from_code(0), None);
    }
}
