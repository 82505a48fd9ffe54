//! ONE's `.part` rule files from any text: parsed and checked, or refused with an error,
//! never a panic. A file that parses names only backends that make plain file names, so a rule
//! file cannot choose where cleave writes (`backends=cpu,../../evil`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fn check_names(pf: &cleave_assign::PartFile) {
    // Every [OPNAME] rule points at one of the backends.
    for (name, &at) in &pf.opname {
        assert!(usize::from(at) < pf.backends.len(), "{name} -> {at}");
        assert!(pf.backend_of(name).is_some());
    }
    let named = pf
        .backends
        .iter()
        .chain(std::iter::once(&pf.default))
        .chain(pf.opcode.values());
    for b in named {
        let file = cleave_workdir::part_file_name("m", 0, b, "onnx")
            .unwrap_or_else(|e| panic!("accepted backend {b:?}: {e}"));
        assert!(!file.contains('/') && !file.contains('\\'), "{file}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = std::path::Path::new("fuzz.part");
    if let Ok(pf) = cleave_assign::PartFile::parse(text, path, None, None) {
        check_names(&pf);
    }
    let backends = ["npu".to_string(), "cpu".to_string()];
    if let Ok(pf) = cleave_assign::PartFile::parse(text, path, Some(&backends), Some("cpu")) {
        check_names(&pf);
    }
});
