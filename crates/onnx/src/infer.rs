pub fn infer_types(_m: &mut cleave_ir::Model) -> Vec<String> { Vec::new() }
