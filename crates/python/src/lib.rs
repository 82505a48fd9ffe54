//! `cleave._cleave`: the extension module under the `cleave` Python package. It exposes the
//! library facade (load, query, partition, write, run) and the command line, run in process.
//! The Python package (`python/cleave`) wraps these in the API users call; what is Python
//! by nature (exceptions with attributes, numpy feeds, the Ray app) lives there.

mod errors;
mod generator;
mod isolate;
mod model;
mod part;
mod plan;
mod stage;
mod tensors;

use pyo3::prelude::*;

/// Runs the `cleave` command line (`argv[0]` the program name) and returns its exit code.
/// The GIL is released while it runs.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| cleave_cli::run(argv))
}

/// The names of the built-in device profiles.
#[pyfunction]
fn builtin_devices() -> Vec<String> {
    cleave::device::Profiles::builtin()
        .names()
        .map(String::from)
        .collect()
}

/// The engines this build links, from the registry `cleave run` uses: per engine its
/// `name`, `aliases`, the `formats` it runs, `devices` (`"DEVICE"`, `"BACKENDS"`) where
/// it takes one (`openvino:GPU`), and the `library` it loads from a Python wheel (`variable`,
/// `package`, `file`, `wheel`), where it does.
#[pyfunction]
fn engines(py: Python<'_>) -> PyResult<Vec<Bound<'_, pyo3::types::PyDict>>> {
    cleave::engine_registry()
        .entries()
        .iter()
        .map(|e| {
            let d = pyo3::types::PyDict::new(py);
            d.set_item("name", e.name)?;
            d.set_item("aliases", e.aliases.to_vec())?;
            d.set_item("formats", e.formats.to_vec())?;
            d.set_item("devices", e.devices.map(|d| d.what))?;
            let library = match e.library {
                Some(l) => {
                    let ld = pyo3::types::PyDict::new(py);
                    ld.set_item("variable", l.variable)?;
                    ld.set_item("package", l.package)?;
                    ld.set_item("file", l.file)?;
                    ld.set_item("wheel", l.wheel)?;
                    Some(ld)
                }
                None => None,
            };
            d.set_item("library", library)?;
            Ok(d)
        })
        .collect()
}

#[pymodule]
fn _cleave(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(builtin_devices, m)?)?;
    m.add_function(wrap_pyfunction!(engines, m)?)?;
    m.add_function(wrap_pyfunction!(isolate::_engine_worker, m)?)?;
    isolate::set_launcher(m.py())?;
    m.add_function(wrap_pyfunction!(model::load_path, m)?)?;
    m.add_function(wrap_pyfunction!(model::load_bytes, m)?)?;
    m.add_class::<model::Model>()?;
    m.add_class::<model::WholeModel>()?;
    m.add_class::<plan::Plan>()?;
    m.add_class::<plan::Runner>()?;
    m.add_class::<generator::Generator>()?;
    m.add_function(wrap_pyfunction!(part::open_part, m)?)?;
    m.add_class::<part::Part>()?;
    m.add_class::<part::CancelToken>()?;
    m.add_function(wrap_pyfunction!(stage::open_stage, m)?)?;
    m.add_class::<stage::Stage>()?;
    m.add_class::<stage::Sampler>()?;
    m.add_class::<stage::Codec>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
